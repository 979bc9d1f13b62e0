"""Tool calls: the intent of each attempt, its verbatim result, a failed attempt, and the give-up."""

from __future__ import annotations

from typing import Any

from tether.events.base import Event, _event

__all__ = ["CALL_EVENTS", "CallAttemptFailed", "CallCompleted", "CallFailed", "CallStarted"]


@_event
class CallStarted(Event):
    """The intent of one attempt of a call, committed before the tool runs."""

    n: int
    key: str
    tool: str
    args: dict[str, Any]
    attempt: int
    kind: str = "call"
    compensates: int | None = None


@_event
class CallCompleted(Event):
    """A call's verbatim result. A readonly call has no ``CallStarted``, so it carries key, tool and args."""

    n: int
    result: Any
    attempt: int
    duration: float
    key: str | None = None
    tool: str | None = None
    args: dict[str, Any] | None = None
    kind: str = "call"


@_event
class CallAttemptFailed(Event):
    n: int
    attempt: int
    error_type: str
    message: str
    traceback: str | None
    duration: float
    backoff: float | None = None


@_event
class CallFailed(Event):
    """The call gave up: no attempt is left, or the error is not one to retry."""

    n: int
    reason: str


CALL_EVENTS: frozenset[type[Event]] = frozenset({CallStarted, CallCompleted, CallAttemptFailed, CallFailed})
"""The events that make calls' records (a snapshot keeps a call as the seqs of these)."""
