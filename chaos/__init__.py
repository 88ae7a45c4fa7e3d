"""The fault suite: fault proxies, a scenario runner and a checker of ARCHITECTURE §4's invariants (`make chaos`)."""
