"""Exact counts of results per namespace and policy, and their windows."""
