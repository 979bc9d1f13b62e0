"""Parallel calls and group commit: batches in flight, waits and divergences inside them, async store I/O."""
