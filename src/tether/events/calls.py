"""Tool calls: the intent of each attempt, its verbatim result, a failed attempt, and the give-up."""

from __future__ import annotations

from typing import Any

from tether.events.base import Event, define_event

__all__ = [
    "CALL_EVENTS",
    "CallAttemptFailed",
    "CallCompleted",
    "CallFailed",
    "CallInDoubt",
    "CallStarted",
    "in_doubt_key",
]


@define_event
class CallStarted(Event):
    """The intent of one attempt of a call, committed before the tool runs."""

    n: int
    key: str
    tool: str
    args: dict[str, Any]
    attempt: int
    kind: str = "call"
    compensates: int | None = None


@define_event
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


@define_event
class CallAttemptFailed(Event):
    n: int
    attempt: int
    error_type: str
    message: str
    traceback: str | None
    duration: float
    backoff: float | None = None


@define_event
class CallFailed(Event):
    """The call gave up: no attempt is left, or the error is not one to retry."""

    n: int
    reason: str


@define_event
class CallInDoubt(Event):
    """A run met a call that started and never recorded its result (its process stopped inside it),
    and the tool says a person decides (``on_unknown="raise"``): the task waits for that person
    (``awaiting_input``, for the key :func:`in_doubt_key` gives), and no worker takes it up until
    the call is settled (``app.resolve_call``, ``tether resolve``)."""

    n: int
    key: str
    tool: str


def in_doubt_key(n: int) -> str:
    """The key a task waits on while its call ``n`` is in doubt (``tether.`` keys are tether's own)."""
    return f"tether.call-{n}"


def in_doubt_call(key: str) -> int | None:
    """The call a task waiting on ``key`` has in doubt, or ``None`` for a wait of the task's own."""
    prefix, _, n = key.partition("tether.call-")
    return int(n) if not prefix and n.isdigit() else None


CALL_EVENTS: frozenset[type[Event]] = frozenset({CallStarted, CallCompleted, CallAttemptFailed, CallFailed})
"""The events that make calls' records (a snapshot keeps a call as the seqs of these)."""
