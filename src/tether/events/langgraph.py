"""The events of a LangGraph thread (an internal stream, ``langgraph:{thread_id}``), kept with tether's
other events so any reader of a store can decode them (``tether history langgraph:ID``) without
LangGraph installed. The saver that writes them is ``tether.integrations.langgraph``."""

from __future__ import annotations

import dataclasses
from typing import Any

from tether.events.base import Event, define_event

__all__ = ["CheckpointSaved", "CheckpointsDeleted", "ThreadCompacted", "WritesSaved"]


@define_event
class CheckpointSaved(Event):
    """A checkpoint of namespace ``ns``; ``values`` holds only the channels whose version changed.

    A value is ``["f", item]`` (a whole value), ``["l", [items]]`` (a whole list, item by item),
    ``["a", [items]]`` (the items appended to the parent checkpoint's value of that channel),
    ``["a", [items], [ns, checkpoint_id, channel]]`` (appended to that checkpoint's value of that
    channel, or to that key of a dict value there, with ``[ns, checkpoint_id, channel, key]``: a
    subgraph starting from its parent's messages), ``["d", {key: value}]`` (a dict whose entries are
    encoded the same way: a graph's input, a Send's argument), ``["s", node, value]`` (a LangGraph
    ``Send`` to ``node``, its argument encoded the same way), ``["v", [values]]`` (a list whose
    entries are encoded values: a step's Sends) or ``["e"]`` (the channel is empty).

    An item is the serializer's bytes in base64 (a string when the serializer's type is
    ``msgpack``, else ``[type, base64]``), or ``"#" + key``: the same item stored by an earlier
    event of the thread (its key is a hash of its bytes). A message a node returns is stored in
    its write; the checkpoint that appends it to the conversation refers to it.
    """

    ns: str
    id: str
    parent: str | None
    versions: dict[str, Any]
    checkpoint: dict[str, Any]
    metadata: dict[str, Any]
    values: dict[str, list[Any]] = dataclasses.field(default_factory=dict)

    def describe(self) -> str:
        step = self.metadata.get("step") if isinstance(self.metadata, dict) else None
        source = self.metadata.get("source") if isinstance(self.metadata, dict) else None
        where = f" in {self.ns}" if self.ns else ""
        made = ", ".join(str(x) for x in (source and f"source {source}", step is not None and f"step {step}") if x)
        changed = f"; changed {', '.join(sorted(self.values))}" if self.values else ""
        return f"checkpoint {self.id}{where}" + (f" ({made})" if made else "") + changed


@define_event
class WritesSaved(Event):
    """Writes of task ``task_id`` against checkpoint ``checkpoint_id``: ``[idx, channel, value]`` each,
    the value encoded as in :class:`CheckpointSaved` (a list may append to a checkpoint's value)."""

    ns: str
    checkpoint_id: str
    task_id: str
    task_path: str
    writes: list[list[Any]]

    def describe(self) -> str:
        channels = sorted({str(w[1]) for w in self.writes if isinstance(w, list) and len(w) > 1})
        return f"writes of task {self.task_id} to {', '.join(channels) or 'nothing'} at checkpoint {self.checkpoint_id}"


@define_event
class CheckpointsDeleted(Event):
    """Checkpoints (``[ns, id]`` pairs) and their writes taken away by ``reason``."""

    checkpoints: list[list[str]]
    reason: str

    def describe(self) -> str:
        return f"{len(self.checkpoints)} checkpoint(s) deleted ({self.reason})"


@define_event
class ThreadCompacted(Event):
    """The thread's history before this event was deleted (``prune``, to free its bytes): the events
    after it restate the ``kept`` checkpoints (``[ns, id]`` pairs) whole, with their writes."""

    kept: list[list[str]]
    reason: str

    def describe(self) -> str:
        return f"history before this compacted ({self.reason}); {len(self.kept)} checkpoint(s) kept whole"
