"""Cached reads (tether.cached): invalidation and a bounded number of values (the kit's
tether.testing.runtime.sessions.test_conversation checks sessions, windows, compaction and user
state on every backend)."""

from __future__ import annotations

import time

import pytest

import tether


def test_cached_reads_and_invalidation() -> None:
    reads: list[int] = []

    @tether.cached(ttl=0.2)
    def price(flight: str) -> int:
        reads.append(1)
        return 420

    assert price("BA117") == price("BA117") == 420 and len(reads) == 1
    price.invalidate("BA117")
    price("BA117")
    assert len(reads) == 2
    time.sleep(0.25)
    price("BA117")
    assert len(reads) == 3
    with pytest.raises(tether.InvalidInputError):
        tether.cached(ttl=0)


def test_a_cache_keeps_at_most_maxsize_values_and_drops_stale_ones() -> None:
    """A cache read with ever new arguments (a user id, a flight) holds at most ``maxsize`` values,
    the oldest read going first, and a stale value goes when the next is read: it never grows."""
    reads: list[str] = []

    @tether.cached(ttl=60, maxsize=3)
    def price(flight: str) -> int:
        reads.append(flight)
        return len(flight)

    for flight in ("A1", "B22", "C333", "D4444"):  # A1, the oldest, goes
        price(flight)
    assert len(price._values) == 3
    price("B22")
    assert reads == ["A1", "B22", "C333", "D4444"]  # B22 was kept
    price("A1")
    assert reads[-1] == "A1" and len(price._values) == 3  # A1 read again; B22 went in its place
    price("C333")
    assert reads[-1] == "A1"  # still kept
    price("B22")
    assert reads[-1] == "B22"  # read again
    price.ttl = 0.05
    time.sleep(0.1)
    price("E")  # every value before it is stale now: all go
    assert len(price._values) == 1
    for bad in ({"ttl": float("nan")}, {"ttl": 1, "maxsize": 0}, {"ttl": True}):
        with pytest.raises(tether.InvalidInputError):
            tether.cached(**bad)  # type: ignore[arg-type]
