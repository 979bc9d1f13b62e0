"""Retry policies for tool calls."""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field

from tether.errors import TaskDefinitionError

__all__ = ["Retry"]

_JITTER = random.Random()
"""tether's own random numbers: a retry's jitter leaves the application's (the ``random`` module's
shared generator, which it may have seeded) alone."""


@dataclass(frozen=True)
class Retry:
    """How a tool call is retried.

    Attempt ``k`` (1-based) that fails waits ``backoff * multiplier ** (k - 1)``
    seconds, capped at ``max_backoff``, with up to ``jitter`` of it added or taken
    away at random, before attempt ``k + 1``. An exception is retried when it is an
    instance of one of ``retry_on`` and of none of ``give_up_on``.

    Example:
        >>> policy = Retry(max_attempts=4, backoff=0.5, jitter=0)
        >>> [policy.delay(k) for k in (1, 2, 3)]
        [0.5, 1.0, 2.0]
        >>> policy.should_retry(TimeoutError(), attempt=1), policy.should_retry(TimeoutError(), attempt=4)
        (True, False)
    """

    max_attempts: int = 3
    backoff: float = 0.5
    multiplier: float = 2.0
    max_backoff: float = 60.0
    jitter: float = 0.1
    retry_on: Sequence[type[BaseException]] = field(default=(Exception,))
    give_up_on: Sequence[type[BaseException]] = field(default=())

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise TaskDefinitionError(f"Retry.max_attempts must be at least 1, got {self.max_attempts}")
        if self.backoff < 0 or self.max_backoff < 0 or self.multiplier < 1:
            raise TaskDefinitionError(
                "Retry needs backoff >= 0, max_backoff >= 0 and multiplier >= 1, got "
                f"backoff={self.backoff}, max_backoff={self.max_backoff}, multiplier={self.multiplier}"
            )
        if not 0 <= self.jitter <= 1:
            raise TaskDefinitionError(f"Retry.jitter is a fraction from 0 to 1, got {self.jitter}")
        object.__setattr__(self, "retry_on", tuple(self.retry_on))
        object.__setattr__(self, "give_up_on", tuple(self.give_up_on))

    def should_retry(self, error: BaseException, *, attempt: int) -> bool:
        if attempt >= self.max_attempts:
            return False
        if isinstance(error, tuple(self.give_up_on)):
            return False
        return isinstance(error, tuple(self.retry_on))

    def delay(self, attempt: int) -> float:
        """Seconds to wait after failed attempt ``attempt`` (jitter included)."""
        base = min(self.backoff * self.multiplier ** (attempt - 1), self.max_backoff)
        if self.jitter:
            base *= 1 + _JITTER.uniform(-self.jitter, self.jitter)
        return max(0.0, base)


NO_RETRY = Retry(max_attempts=1)
