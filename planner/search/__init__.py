"""The plan search: the candidate space, its evaluation, CP-SAT, layouts and infeasibility explanations."""
