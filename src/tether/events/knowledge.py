"""What a task learns: its decisions, its observations of the world, its typed data, and the
inputs people give it (asked for, received, rejected, timed out)."""

from __future__ import annotations

from typing import Any

from tether.events.base import Event, define_event

__all__ = [
    "DataMigrated",
    "DataUpdated",
    "DecisionMade",
    "InputReceived",
    "InputRejected",
    "InputRequested",
    "InputTimedOut",
    "ObservationRecorded",
]


@define_event
class DecisionMade(Event):
    name: str
    choice: Any
    rationale: str
    alternatives: list[Any] | None = None


@define_event
class ObservationRecorded(Event):
    key: str
    value: Any
    source: str | None = None
    as_of: str | None = None


@define_event
class DataUpdated(Event):
    """Changed fields of the task's typed data (only those that changed)."""

    fields: dict[str, Any]
    data_version: int | None = None


@define_event
class DataMigrated(Event):
    """The task's typed data rewritten by upcasters to a newer model version (replaces it whole)."""

    data: dict[str, Any]
    from_version: int | None
    to_version: int


@define_event
class InputRequested(Event):
    key: str
    prompt: str | None = None
    schema: dict[str, Any] | None = None
    timeout_at: float | None = None
    again: bool = False
    """The question asked once more by the same wait: its task had stopped waiting on it (a fork or a
    rewind of a task cancelled while it waited), and a run waits on it anew."""


@define_event
class InputReceived(Event):
    key: str
    value: Any
    actor: str | None = None
    """Who answered (an API key's name, a user name), when the caller said."""


@define_event
class InputRejected(Event):
    """An answer sent before the task asked did not fit the wait's schema when it asked: discarded."""

    key: str
    reason: str


@define_event
class InputTimedOut(Event):
    """Nobody answered before the wait's timeout: the task sees ``InputTimeout`` at that point."""

    key: str
