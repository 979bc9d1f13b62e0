"""One way to write against a stream other writers append to: decide from the latest state, append
at its version, and on a conflict (someone got there first) read again and decide again."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import TypeVar

from tether.errors import ConflictError, LeaseLostError

__all__ = ["TRIES", "retry_on_conflict"]

T = TypeVar("T")
TRIES = 100


def retry_on_conflict(
    attempt: Callable[[], T],
    *,
    stream: str,
    tries: int | None = TRIES,
    on_conflict: Callable[[ConflictError], object] | None = None,
) -> T:
    """``attempt()`` again while it raises :class:`ConflictError`; a lost lease is never retried.

    ``attempt`` reads what it needs afresh each time, so a decision is always made on the state it
    writes after. After ``tries`` conflicts in a row the last one is raised: nothing was written.

    ``on_conflict(conflict)`` runs before each try again, for a writer that keeps what it has read
    and takes in only what the other writer appended (a run's recorder); raising there stops the
    retries with that error. ``tries=None``: no limit of its own, ``on_conflict`` is what stops it.
    """
    last: ConflictError | None = None
    try:
        for _ in itertools.count() if tries is None else range(max(1, tries)):
            if last is not None and on_conflict is not None:
                on_conflict(last)
            try:
                return attempt()
            except LeaseLostError:
                raise
            except ConflictError as conflict:
                last = conflict
        assert last is not None and last.expected is not None  # a lost lease (no version) was re-raised
        raise ConflictError(stream, expected=last.expected, actual=last.actual) from last
    finally:
        # A conflict kept in this frame holds the frame (and its callers', a run's context among them)
        # through its traceback: a cycle only the collector would free.
        last = None
