"""``tether.cached(ttl=...)``: a TTL cache for read functions outside tasks, with write-through invalidation.

Inside a task, use ``ctx.fetch(fn, *args, ttl=...)`` instead: it records what it read.
"""

from __future__ import annotations

import functools
import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, Generic, ParamSpec, TypeVar

from tether.canonical import canonical_json
from tether.checks import check_int
from tether.errors import InvalidInputError

__all__ = ["cached"]

P = ParamSpec("P")
R = TypeVar("R")


class Cached(Generic[P, R]):
    """A read function with a TTL cache keyed by its arguments, of at most ``maxsize`` values: the
    oldest read first out, as soon as it is stale or there are too many."""

    def __init__(self, fn: Callable[P, R], ttl: float, maxsize: int = 1024) -> None:
        self.fn = fn
        self.ttl = ttl
        self.maxsize = maxsize
        self._values: OrderedDict[bytes, tuple[float, R]] = OrderedDict()  # oldest read first
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
            values = self._values
            values[key] = (now, value)
            values.move_to_end(key)
            while values:  # the oldest read first: stale, or one too many
                read_at = next(iter(values.values()))[0]
                if len(values) <= self.maxsize and now - read_at < self.ttl:
                    break
                values.popitem(last=False)
        return value

    def invalidate(self, *args: Any, **kwargs: Any) -> None:
        """Forget the value for these arguments (call it when you write to what it reads)."""
        with self._lock:
            self._values.pop(self._key(args, kwargs), None)

    def clear(self) -> None:
        with self._lock:
            self._values.clear()


def cached(*, ttl: float, maxsize: int = 1024) -> Callable[[Callable[P, R]], Cached[P, R]]:
    """Cache a read function's results for ``ttl`` seconds, per arguments, keeping at most
    ``maxsize`` of them (the oldest read goes first; a stale one goes when the next is read).

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
    if not isinstance(ttl, int | float) or isinstance(ttl, bool) or not math.isfinite(ttl) or ttl <= 0:
        raise InvalidInputError(f"ttl must be a finite number of seconds above 0, got {ttl!r}")
    check_int(maxsize, "maxsize", low=1)

    def decorate(fn: Callable[P, R]) -> Cached[P, R]:
        return Cached(fn, ttl, maxsize)

    return decorate
