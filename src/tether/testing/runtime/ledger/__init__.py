"""The idempotency ledger: an effect once per key, and calls in doubt."""
