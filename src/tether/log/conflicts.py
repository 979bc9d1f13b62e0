"""One way to write against a stream other writers append to: decide from the latest state, append
at its version, and on a conflict (someone got there first) read again and decide again."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from tether.errors import ConflictError, LeaseLostError

__all__ = ["TRIES", "retry_on_conflict"]

T = TypeVar("T")
TRIES = 100


def retry_on_conflict(attempt: Callable[[], T], *, stream: str, tries: int = TRIES) -> T:
    """``attempt()`` again while it raises :class:`ConflictError`; a lost lease is never retried.

    ``attempt`` reads what it needs afresh each time, so a decision is always made on the state it
    writes after. After ``tries`` conflicts in a row the last one is raised: nothing was written.
    """
    last: ConflictError | None = None
    for _ in range(max(1, tries)):
        try:
            return attempt()
        except LeaseLostError:
            raise
        except ConflictError as conflict:
            last = conflict
    assert last is not None and last.expected is not None  # a lost lease (no version) was re-raised
    raise ConflictError(stream, expected=last.expected, actual=last.actual) from last
