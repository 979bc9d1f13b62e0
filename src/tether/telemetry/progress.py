"""Progress of long work (a check over many tasks; export, import, migrate, gc and fsck as they come):
the operation walks its items through :func:`tracked`, and whoever wants to show progress (the CLI's
bar on a terminal) listens with :func:`reporting`. Nobody listening costs a context-variable read
per operation, not per item."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TypeVar

__all__ = ["Listener", "reporting", "tracked"]

T = TypeVar("T")

Listener = Callable[[str, int, int], None]
"""Told ``(what, done, total)`` before the first item and after each one."""

_LISTENER: ContextVar[Listener | None] = ContextVar("tether_progress", default=None)


@contextmanager
def reporting(listener: Listener) -> Iterator[None]:
    """Tell ``listener`` how the long operations run inside this block progress.

    Example:
        >>> seen = []
        >>> with reporting(lambda what, done, total: seen.append((what, done, total))):
        ...     for _ in tracked(["a", "b"], "checking"):
        ...         pass
        >>> seen
        [('checking', 0, 2), ('checking', 1, 2), ('checking', 2, 2)]
    """
    token = _LISTENER.set(listener)
    try:
        yield
    finally:
        _LISTENER.reset(token)


def tracked(items: Sequence[T], what: str) -> Iterator[T]:
    """Yield ``items``, telling the listener of :func:`reporting`, if any, how far the walk is."""
    listener = _LISTENER.get()
    if listener is None:
        yield from items
        return
    total = len(items)
    listener(what, 0, total)
    for done, item in enumerate(items, start=1):
        yield item
        listener(what, done, total)
