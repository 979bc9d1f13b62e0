"""A task's conversation: what it read of its session, and what it wrote to it."""

from __future__ import annotations

import dataclasses

from tether.events.base import Event, define_event

__all__ = ["SessionRead", "SessionWritten"]


@define_event
class SessionRead(Event):
    """The task read its conversation (``ctx.session``) as it stood at session version ``upto``.

    ``s`` is the conversation operation's ordinal in the task (like a call's ``n``): a
    replay gives read ``s`` exactly what it saw the first time.
    """

    s: int
    session_id: str
    upto: int


@define_event
class SessionWritten(Event):
    """The task appended session events ``first``..``last`` (messages, or a summary) as operation ``s``."""

    s: int
    session_id: str
    first: int
    last: int
    roles: list[str] = dataclasses.field(default_factory=list)
    """The roles of the messages written (``summary`` for a compaction), for history and ``show``."""
