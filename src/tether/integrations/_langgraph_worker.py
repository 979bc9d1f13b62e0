"""The one worker thread a LangGraph saver does all its work on.

LangGraph calls a checkpointer from many threads at once (its task pools, a background executor per
run and per subgraph). ``TetherSaver`` runs every method on one thread of its own, in the order it
is asked for, so it needs no lock and holds one store connection however many threads call it:
:func:`serialized` sends a method there (or runs it at once when already there: one method may call
another), :func:`raw` gives the undecorated method for async code to submit without a second hop.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar, cast

__all__ = ["Worker", "raw", "serialized"]

_T = TypeVar("_T")
_M = TypeVar("_M", bound=Callable[..., Any])
_working = threading.local()  # which owner the current thread is working for, on that owner's worker


class Worker:
    """One thread that runs an owner's methods one after another."""

    def __init__(self, owner: object, name: str) -> None:
        self._owner = owner
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix=name)

    def submit(self, method: Callable[..., _T], *args: Any, **kwargs: Any) -> Future[_T]:
        return self._pool.submit(_on_worker, self._owner, method, args, kwargs)

    def shutdown(self) -> None:
        self._pool.shutdown(wait=True)


def serialized(method: _M) -> _M:
    """Run the method on its owner's worker thread (at once when already there)."""

    @functools.wraps(method)
    def run(self: Any, *args: Any, **kwargs: Any) -> Any:
        if getattr(_working, "owner", None) is self:
            return method(self, *args, **kwargs)
        return self._worker.submit(method, *args, **kwargs).result()

    return cast(_M, run)


def raw(method: Callable[..., _T]) -> Callable[..., _T]:
    """The undecorated method, to submit to the worker from async code without a second hop."""
    return cast(Callable[..., _T], getattr(method, "__wrapped__", method))


def _on_worker(owner: object, method: Callable[..., _T], args: tuple[Any, ...], kwargs: dict[str, Any]) -> _T:
    _working.owner = owner
    try:
        return method(owner, *args, **kwargs)
    finally:
        _working.owner = None
