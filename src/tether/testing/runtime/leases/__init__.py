"""Leases and fencing at the runtime: the ledger and leases at the store, takeover and backoff of a worker."""
