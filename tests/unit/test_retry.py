"""A retry's delay: its backoff, its jitter, and the application's random numbers left alone."""

from __future__ import annotations

import random

import pytest

import tether


def test_jitter_stays_within_its_share_and_varies() -> None:
    policy = tether.Retry(max_attempts=5, backoff=1.0, multiplier=2.0, max_backoff=3.0, jitter=0.5)
    delays = [policy.delay(attempt) for attempt in (1, 2, 3) for _ in range(200)]
    for attempt, base in ((1, 1.0), (2, 2.0), (3, 3.0)):  # the third is capped at max_backoff
        mine = delays[(attempt - 1) * 200 : attempt * 200]
        assert all(base * 0.5 <= d <= base * 1.5 for d in mine), (attempt, min(mine), max(mine))
        assert len(set(mine)) > 100  # it is random
    assert tether.Retry(backoff=1.0, jitter=0).delay(1) == 1.0


def test_jitter_leaves_the_applications_random_numbers_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    # The random module's functions draw from its one shared generator (which the application may
    # have seeded): a retry must draw none of them.
    def shared(*args: object) -> float:
        raise AssertionError("a retry drew from the random module's shared generator")

    for name in ("random", "uniform", "gauss", "triangular"):
        monkeypatch.setattr(random, name, shared)
    policy = tether.Retry(backoff=1.0, jitter=0.5)
    assert all(0.5 <= policy.delay(1) <= 1.5 for _ in range(20))
