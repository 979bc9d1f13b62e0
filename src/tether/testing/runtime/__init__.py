"""tether's behaviour on a backend, one package per capability: tasks, recorded calls, the ledger,
parallel calls and group commit, waits and wake-ups, leases, sessions, time travel. Every check runs
on a fresh namespace of the backend (the ``store_url`` fixture)."""
