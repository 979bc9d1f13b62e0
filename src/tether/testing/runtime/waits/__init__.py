"""Waits and wake-ups: waiting for people, durable sleep, cancels, what lands while a run writes that it waits."""
