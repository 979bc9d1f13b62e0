"""``tether.cached(ttl=...)``: a TTL cache for read functions outside tasks, with write-through invalidation.

Inside a task, use ``ctx.fetch(fn, *args, ttl=...)`` instead: it records what it read.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable
from typing import Any, Generic, ParamSpec, TypeVar

from tether._keys import canonical_json
from tether.errors import InvalidInputError

__all__ = ["cached"]

P = ParamSpec("P")
R = TypeVar("R")


class Cached(Generic[P, R]):
    """A read function with a TTL cache keyed by its arguments."""

    def __init__(self, fn: Callable[P, R], ttl: float) -> None:
        self.fn = fn
        self.ttl = ttl
        self._values: dict[bytes, tuple[float, R]] = {}
        self._lock = threading.Lock()
        functools.update_wrapper(self, fn)

    def _key(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bytes:
        try:
            return canonical_json({"args": list(args), "kwargs": kwargs})
        except TypeError as exc:
            raise InvalidInputError(f"{self.fn.__name__}: cached arguments must be JSON: {exc}") from None

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        key = self._key(args, kwargs)
        now = time.monotonic()
        with self._lock:
            hit = self._values.get(key)
        if hit is not None and now - hit[0] < self.ttl:
            return hit[1]
        value = self.fn(*args, **kwargs)
        with self._lock:
            self._values[key] = (now, value)
        return value

    def invalidate(self, *args: Any, **kwargs: Any) -> None:
        """Forget the value for these arguments (call it when you write to what it reads)."""
        with self._lock:
            self._values.pop(self._key(args, kwargs), None)

    def clear(self) -> None:
        with self._lock:
            self._values.clear()


def cached(*, ttl: float) -> Callable[[Callable[P, R]], Cached[P, R]]:
    """Cache a read function's results for ``ttl`` seconds, per arguments.

    Example:
        >>> import tether
        >>> reads = []
        >>> @tether.cached(ttl=60)
        ... def price(flight: str) -> int:
        ...     reads.append(flight)
        ...     return 420
        >>> price("BA117"), price("BA117"), len(reads)
        (420, 420, 1)
        >>> price.invalidate("BA117"); price("BA117"), len(reads)
        (420, 2)
    """
    if ttl <= 0:
        raise InvalidInputError(f"ttl must be positive, got {ttl}")

    def decorate(fn: Callable[P, R]) -> Cached[P, R]:
        return Cached(fn, ttl)

    return decorate
