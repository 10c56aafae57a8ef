"""Feasibility: every rule once, the float check of one strategy, and the review of a user's config."""
