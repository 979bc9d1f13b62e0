"""Pruning that frees bytes: a LangGraph thread restated from the checkpoints it keeps.

A thread's events refer back to earlier ones (a list stores the items appended to its parent's value,
an item seen before is a reference), so pruned checkpoints cannot just be cut out of the stream. The
saver instead writes the kept checkpoints again, whole — each value decoded and encoded against a
new, empty view, their writes with them — after a ``ThreadCompacted`` event, and the store replaces
the thread's history with those events in one transaction (``Store.compact``): the old rows are
deleted, and a reader that cached the old history starts over at ``ThreadCompacted``.
"""

from __future__ import annotations

from collections.abc import Sequence

import orjson

from tether.events import Event, Recorded
from tether.integrations._langgraph_log import (
    CheckpointSaved,
    Saved,
    Serde,
    ThreadCompacted,
    ThreadView,
    WritesSaved,
)

__all__ = ["restated"]


def restated(serde: Serde, view: ThreadView, kept: Sequence[Saved], *, reason: str) -> list[Event]:
    """The events of a thread that holds only ``kept`` (checkpoints of ``view``) and their writes,
    each value stored whole (or as a reference to an item or list stated before it in these events)."""
    fresh = ThreadView()
    events: list[Event] = []

    def add(event: Event) -> None:
        events.append(event)
        fresh.apply(Recorded(len(events), 0.0, event))

    add(ThreadCompacted(kept=[[s.ns, s.id] for s in kept], reason=reason))
    for saved in sorted(kept, key=lambda s: s.seq):  # in the order they were first saved
        values = {}
        for channel in saved.versions:
            blob = saved.sources.get(channel)
            if blob is None or blob.kind == "e":
                values[channel] = ["e"]
            else:
                values[channel] = fresh.encode(serde, channel, view.value(serde, blob), None)
        add(
            CheckpointSaved(
                ns=saved.ns,
                id=saved.id,
                parent=saved.parent,  # named as before (LangGraph's parent_config), though not kept
                versions=dict(saved.versions),
                checkpoint=_json(saved.body),
                metadata=_json(saved.metadata),
                values=values,
            )
        )
        by_task: dict[tuple[str, str], list[list[object]]] = {}
        for write in view.ordered_writes(saved.ns, saved.id):
            stored = fresh.encode(serde, write.channel, view.value(serde, write.blob), None)
            by_task.setdefault((write.task_id, write.task_path), []).append([write.idx, write.channel, stored])
        for (task_id, task_path), writes in by_task.items():
            add(WritesSaved(ns=saved.ns, checkpoint_id=saved.id, task_id=task_id, task_path=task_path, writes=writes))
    return events


def _json(data: bytes) -> dict[str, object]:
    loaded: dict[str, object] = orjson.loads(data)
    return loaded
