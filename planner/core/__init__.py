"""The shared vocabulary every other planner package stands on: what a plan is for
(`Problem`), strategies as named arrays (`Candidates`, with the orders of their option indices)
and the rule ids. It imports no other planner package."""
