"""The event log: tasks and tether's own streams over a :class:`~tether.store.Store`.

:class:`TaskLog` is the one way events reach a store and state comes back from it: it checks and
stages appends (``staging``), encodes them (``encoding``), keeps the index row of each task
(``heads``), remembers what it folded (``memory``) and keeps snapshots (``snapshots``,
``snapshot_keeping``). :class:`Stream` is an internal stream (a conversation, user state,
a LangGraph thread) on the same log, and :func:`retry_on_conflict` is the one loop that retries a
write which lost a race for a version.
"""

from __future__ import annotations

from tether.log.conflicts import retry_on_conflict
from tether.log.streams import Stream, append_together
from tether.log.tasklog import SnapshotPolicy, TaskLog, checksum

__all__ = ["SnapshotPolicy", "Stream", "TaskLog", "append_together", "checksum", "retry_on_conflict"]
