"""A second opinion on a user's own config: read it, judge it by the rules, price it, and
compare it with the best plan the search finds for the same job."""
