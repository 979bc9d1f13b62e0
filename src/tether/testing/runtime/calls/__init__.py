"""Recorded calls: replay, keys, retries, failures and compensations, what a replay writes (nothing),
patches and checks."""
