"""`planner calibrate`: fit a cluster's constants to its measured runs."""
