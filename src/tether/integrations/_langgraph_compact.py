"""Pruning that frees bytes: a LangGraph thread restated from the checkpoints it keeps.

A thread's events refer back to earlier ones (a list stores the items appended to its parent's value,
an item seen before is a reference), so pruned checkpoints cannot just be cut out of the stream. The
saver instead writes the kept checkpoints again, whole — each value decoded and encoded against a
new, empty view, their writes with them — after a ``ThreadCompacted`` event, and the store replaces
the thread's history with those events in one transaction (``Store.compact``): the old rows are
deleted, and a reader that cached the old history starts over at ``ThreadCompacted``.
"""

from __future__ import annotations

import binascii
from collections.abc import Callable, Sequence
from typing import Any

import orjson

from tether.errors import InvalidInputError
from tether.events import Event, Recorded
from tether.integrations._langgraph_log import (
    Blob,
    CheckpointSaved,
    Saved,
    Serde,
    ThreadCompacted,
    ThreadView,
    WritesSaved,
    item_key,
)

__all__ = ["READABLE_SCHEMAS", "SNAPSHOT_SCHEMA", "restated", "snapshot_data", "view_of_snapshot"]


def restated(serde: Serde, view: ThreadView, kept: Sequence[Saved], *, reason: str) -> list[Event]:
    """The events of a thread that holds only ``kept`` (checkpoints of ``view``) and their writes,
    each value stored whole (or as a reference to an item or list stated before it in these events)."""
    fresh = ThreadView()
    events: list[Event] = []

    def add(event: Event) -> None:
        fresh.begin()
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


# ----------------------------------------------------------------------------- snapshots

SNAPSHOT_SCHEMA = 3
"""The schema of the thread snapshots :func:`snapshot_data` writes, bytes: a line of JSON, ``{"created_at",
"lists", "items", "checkpoints", "writes"}``, then the bytes of the items the serializer stored as
msgpack, one after another, as they are (a reader decodes no text to get them). Every item is stored
once, with its key (so a reader need not hash it again), and as ``"#key"`` in the values. ``items`` is
``{"keys", "sizes", "other"}``: the msgpack items' keys and sizes in the order of their bytes, and the
others ``{key: [kind, base64]}``.
Schema 2 (the same JSON, all of it: the msgpack items one base64 text in ``items["msgpack"]``, each
padded with zero bytes to a multiple of three) and schema 1 (each item inline the first time, base64
as in the events) are still read; a snapshot of any other schema is not (the thread is folded from
its events)."""
READABLE_SCHEMAS = (1, 2, SNAPSHOT_SCHEMA)
_NAMESPACES = 8  # a snapshot keeps the newest checkpoint of this many namespaces ("" among them)


def snapshot_data(view: ThreadView, created_at: float | None) -> tuple[bytes, set[str]]:
    """What a cold read of the thread needs, as a snapshot: the newest checkpoint of the graph's
    namespace (and of the few namespaces written last), those holding the lists writers extend
    (``ThreadView.last_list``), and their writes, each value restated from its stored items (no
    decoding) and each item stored once. Its size is the state's, however long the history.
    ``created_at`` is the thread's (its index row's): a thread deleted and started again under the
    same id is another thread, whose readers pass over this snapshot.
    Returns the snapshot and the keys of the items it holds (what the next events may refer to)."""
    latest = [saved for ns in view.ids if (saved := view.latest(ns)) is not None]
    others = sorted((s for s in latest if s.ns != ""), key=lambda s: s.id, reverse=True)[: _NAMESPACES - 1]
    kept = {(s.ns, s.id): s for s in [*others, *(s for s in latest if s.ns == "")]}
    lists: dict[str, list[str]] = {}
    for name, (ref, _) in view.last_list.items():
        owner = view.checkpoints.get((ref[0], ref[1]))
        if owner is not None:
            kept[(owner.ns, owner.id)] = owner
            lists[name] = ref
    restater = _Restater(view.key_of)
    checkpoints, writes = [], []
    for saved in sorted(kept.values(), key=lambda s: s.seq):
        values = {c: restater.value(saved.sources[c]) if c in saved.sources else ["e"] for c in saved.versions}
        checkpoints.append(
            {"ns": saved.ns, "id": saved.id, "parent": saved.parent, "versions": saved.versions,
             "checkpoint": _json(saved.body), "metadata": _json(saved.metadata), "values": values}
        )  # fmt: skip
        restater.emitted_in(saved)
    for saved in sorted(kept.values(), key=lambda s: s.seq):
        by_task: dict[tuple[str, str], list[list[object]]] = {}
        for write in view.ordered_writes(saved.ns, saved.id):
            stored = restater.value(write.blob)
            by_task.setdefault((write.task_id, write.task_path), []).append([write.idx, write.channel, stored])
        for (task_id, task_path), items in by_task.items():
            writes.append(
                {"ns": saved.ns, "checkpoint_id": saved.id, "task_id": task_id, "task_path": task_path, "writes": items}
            )
    table, msgpack = restater.table()
    data = {"created_at": created_at, "lists": lists, "items": table, "checkpoints": checkpoints, "writes": writes}
    return orjson.dumps(data) + b"\n" + msgpack, restater.keys()


def view_of_snapshot(data: str | bytes, seq: int, created_at: float, schema: int = SNAPSHOT_SCHEMA) -> ThreadView:
    """The (partial) view a snapshot of ``schema`` at ``seq`` of the thread created at ``created_at``
    holds; ``ValueError`` if it is not one (or is another thread's of the same id)."""
    if schema not in READABLE_SCHEMAS:
        raise ValueError(f"thread snapshot of schema {schema}, not one of {READABLE_SCHEMAS}")
    try:
        loaded, read_items = _parts(data, schema)
        if loaded["created_at"] != created_at:
            raise ValueError("a snapshot of an earlier thread of this id (deleted since)")
        view = ThreadView()
        if read_items is not None:
            view.items = read_items()
            view.key_of = {id(item): key for key, item in view.items.items()}
        for fields in loaded["checkpoints"]:
            view.apply(Recorded(seq, 0.0, CheckpointSaved(**fields)))
        for fields in loaded["writes"]:
            view.apply(Recorded(seq, 0.0, WritesSaved(**fields)))
        lists = {}
        for name, ref in loaded["lists"].items():
            blob = view.referred(ref)
            if blob is None or not blob.is_list:
                raise ValueError(f"its list {name!r} names {ref}, which it does not hold")
            lists[name] = (ref, blob)
    except (KeyError, TypeError, AttributeError, InvalidInputError, orjson.JSONDecodeError) as exc:
        raise ValueError(f"not a thread snapshot of schema {schema}: {exc}") from None
    view.last_list = lists
    view.floor = view.newest() or ""
    view.partial = True
    view.version = seq
    return view


def _parts(data: str | bytes, schema: int) -> tuple[Any, Callable[[], dict[str, Any]] | None]:
    """A snapshot's JSON, and what reads its items table (``None``: schema 1 has none)."""
    if schema < 3:
        loaded = orjson.loads(data)
        return loaded, (lambda: _items_read_v2(loaded["items"])) if schema == 2 else None
    raw = data if isinstance(data, bytes) else data.encode()
    end = raw.index(b"\n")  # the JSON line holds none (JSON writes a newline in a string as \n)
    loaded = orjson.loads(memoryview(raw)[:end])
    return loaded, lambda: _items_read(loaded["items"], raw, end + 1)


def _items_read(stored: dict[str, Any], data: bytes, start: int) -> dict[str, Any]:
    """A schema 3 snapshot's items, as the view holds them (key -> msgpack bytes, or [kind, base64]):
    the msgpack ones are ``data``'s bytes from ``start`` on."""
    keys, sizes = stored["keys"], stored["sizes"]
    if len(keys) != len(sizes):
        raise ValueError(f"{len(keys)} item keys for {len(sizes)} sizes")
    items: dict[str, Any] = dict(stored["other"])
    for key, size in zip(keys, sizes, strict=True):
        items[key] = data[start : start + size]
        start += size
    if start != len(data):
        raise ValueError(f"items ending at byte {start} of a snapshot of {len(data)}")
    return items


def _items_read_v2(stored: dict[str, Any]) -> dict[str, Any]:
    """A schema 2 snapshot's items, as the view holds them (key -> msgpack bytes, or [kind, base64])."""
    keys, sizes = stored["keys"], stored["sizes"]
    if len(keys) != len(sizes):
        raise ValueError(f"{len(keys)} item keys for {len(sizes)} sizes")
    data = binascii.a2b_base64(stored["msgpack"])
    items: dict[str, Any] = dict(stored["other"])
    start = 0
    for key, size in zip(keys, sizes, strict=True):
        items[key] = data[start : start + size]
        start += size + -size % 3
    if start != len(data):
        raise ValueError(f"items of {start} bytes in all, stored as {len(data)}")
    return items


class _Restater:
    """Values restated from a view's stored items: each item once in ``table`` (its key -> the item
    as stored), ``"#key"`` in the values, and a list that extends one restated before as what it
    adds (``["a", items, ref]``)."""

    def __init__(self, key_of: dict[int, str]) -> None:
        self._key_of = key_of  # the view's: id(item) -> its key (an item it does not know is hashed)
        self._seen: dict[int, str] = {}  # id(item) -> its key (the view holds every item: ids stay unique)
        self._emitted: dict[int, list[str]] = {}  # id(list blob) -> where a snapshot event stated it
        self._read: dict[str, bytes] = {}  # key -> msgpack bytes (an item read from a snapshot)
        self._stored: dict[str, str] = {}  # key -> msgpack base64 (an item as the events store it)
        self._other: dict[str, Any] = {}  # key -> [kind, base64], for the others

    def item(self, item: Any) -> str:
        key = self._seen.get(id(item))
        if key is None:
            key = self._seen[id(item)] = self._key_of.get(id(item)) or item_key(item)
            if isinstance(item, list):
                self._other.setdefault(key, item)
            elif isinstance(item, bytes):
                self._read.setdefault(key, item)
            elif key not in self._read:
                self._stored.setdefault(key, item)
        return f"#{key}"

    def keys(self) -> set[str]:
        return {*self._read, *self._stored, *self._other}

    def table(self) -> tuple[dict[str, Any], bytes]:
        """The items restated, as a schema 3 snapshot stores them: the JSON's ``items`` and the msgpack
        items' bytes."""
        parts = [*self._read.values(), *map(binascii.a2b_base64, self._stored.values())]
        sizes = [len(part) for part in parts]
        return {"keys": [*self._read, *self._stored], "sizes": sizes, "other": self._other}, b"".join(parts)

    def value(self, blob: Blob) -> list[Any]:
        fields = blob.fields or {}
        if blob.kind == "f":
            return ["f", self.item(blob.item)]
        if blob.kind == "e":
            return ["e"]
        if blob.kind == "d":
            return ["d", {k: self.value(v) for k, v in fields.items()}]
        if blob.kind == "s":
            return ["s", blob.item, self.value(fields[""])]
        if blob.kind == "v":
            return ["v", [self.value(v) for v in fields.values()]]
        segments: list[Blob] = []
        current: Blob | None = blob
        ref = None
        while current is not None:
            ref = self._emitted.get(id(current))
            if ref is not None:
                break
            segments.append(current)
            current = current.base if current.kind == "a" else None
        items = [self.item(i) for segment in reversed(segments) for i in segment.items]
        return ["a", items, ref] if ref is not None else ["l", items]

    def emitted_in(self, saved: Saved) -> None:
        """Remember the lists a checkpoint just restated holds, for later values to extend."""
        for channel, blob in saved.sources.items():
            if blob.is_list:
                self._emitted.setdefault(id(blob), [saved.ns, saved.id, channel])
            for name, field in (blob.fields or {}).items() if blob.kind == "d" else ():
                if field.is_list:
                    self._emitted.setdefault(id(field), [saved.ns, saved.id, channel, name])
