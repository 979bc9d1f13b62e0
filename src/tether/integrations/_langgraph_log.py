"""What a LangGraph thread looks like in tether: its events, how a value is encoded against what the
thread already holds, and the fold that reads them back.

A thread is one internal stream (type ``tether.langgraph``, id ``langgraph:{thread_id}``) holding
every namespace of the thread (the graph's and its subgraphs'). Three events, all facts:

- ``CheckpointSaved``: one checkpoint, and the value of every channel whose version changed in
  it, and only those. A list that grew by appending (``add_messages``) stores only the new items.
- ``WritesSaved``: one task's pending writes against a checkpoint.
- ``CheckpointsDeleted``: checkpoints that ``delete_for_runs`` took away.
- ``ThreadCompacted``: ``prune`` deleted the history before it; the events after it restate the
  checkpoints it kept, whole.

Reading a thread back (its view folded from its stream, a checkpoint's values and writes, the
tenant's threads) is here too, below the saver: ``TetherSaver`` and its commands (``_langgraph_cli``)
both read through it. This module imports nothing from LangGraph (so ``tether history`` can decode
a thread's events without it); values are encoded by the saver's serializer, passed in.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import hashlib
import operator
from collections import OrderedDict
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

import orjson

from tether.errors import InvalidInputError
from tether.events import Recorded
from tether.events.langgraph import CheckpointSaved, CheckpointsDeleted, ThreadCompacted, WritesSaved
from tether.integrations._gc import no_cycle_collection
from tether.log.streams import Stream
from tether.store import TaskFilter

if TYPE_CHECKING:
    from tether.log import TaskLog

__all__ = [
    "THREAD_TYPE",
    "Blob",
    "CheckpointSaved",
    "CheckpointsDeleted",
    "NeedsHistory",
    "Serde",
    "ThreadCompacted",
    "ThreadView",
    "WritesSaved",
    "list_threads",
    "read_thread",
    "register_plain_msgpack",
    "register_send",
    "stream_id",
]

THREAD_TYPE = "tether.langgraph"
_PREFIX = "langgraph:"


def stream_id(thread_id: str) -> str:
    return f"{_PREFIX}{thread_id}"


def thread_of(stream: str) -> str:
    return stream.removeprefix(_PREFIX)


class Serde(Protocol):
    """The part of LangGraph's ``SerializerProtocol`` this module uses."""

    def dumps_typed(self, obj: Any) -> tuple[str, bytes]: ...

    def loads_typed(self, data: tuple[str, bytes]) -> Any: ...


# ----------------------------------------------------------------------------- encoding

_SERDE_KEY = "__serde__"


def encode_item(serde: Serde, value: Any) -> Any:
    kind, data = serde.dumps_typed(value)
    text = base64.b64encode(data).decode()
    return text if kind == "msgpack" else [kind, text]


def decode_item(serde: Serde, item: Any) -> Any:
    """An item decoded: msgpack as its base64 (as stored in events) or its bytes (as read from a
    snapshot), or ``[kind, base64]``."""
    if isinstance(item, str):
        return serde.loads_typed(("msgpack", binascii.a2b_base64(item)))
    if isinstance(item, bytes):
        return serde.loads_typed(("msgpack", item))
    return serde.loads_typed((item[0], binascii.a2b_base64(item[1])))


_PLAIN_MSGPACK: list[type] = []  # serializers whose "msgpack" is msgpack and nothing more (see decode_items)


def register_plain_msgpack(cls: type, samples: list[Any]) -> bool:
    """Let threads decode many msgpack items of a ``cls`` serializer in one call: an array of the
    items' bytes, which such a serializer reads as the list of their values (LangGraph's
    ``JsonPlusSerializer``: ``loads_typed`` is one ``unpackb`` with its extension hook).

    Only if it holds for ``samples`` (values of the kinds threads keep) with the installed version:
    a serializer that did more than unpack (revived values after it) would decode a list otherwise
    than its items one by one, silently. Whether ``cls`` is registered."""
    serde = cls()
    try:
        items = [serde.dumps_typed(value) for value in samples]
        if any(kind != "msgpack" for kind, _ in items):
            return False
        array = b"\xdd" + len(items).to_bytes(4, "big") + b"".join(data for _, data in items)
        plain = serde.loads_typed(("msgpack", array)) == [serde.loads_typed(item) for item in items]
    except Exception:  # a version this code does not know: each item is decoded alone
        plain = False
    if plain and cls not in _PLAIN_MSGPACK:
        _PLAIN_MSGPACK.append(cls)
    return plain and cls in _PLAIN_MSGPACK


def decode_items(serde: Serde, items: list[Any]) -> list[Any]:
    """Items decoded, as :func:`decode_item` decodes each: in one call when they are all msgpack and
    the serializer is registered with :func:`register_plain_msgpack` (each item's per-call cost is
    most of a small message's), else one by one (also when the one call fails: then each raises,
    or not, as it would alone)."""
    if len(items) > 1 and type(serde) in _PLAIN_MSGPACK and not any(type(i) is list for i in items):
        parts = [i if type(i) is bytes else binascii.a2b_base64(i) for i in items]
        array = b"\xdd" + len(parts).to_bytes(4, "big") + b"".join(parts)  # msgpack's array 32 header
        try:
            # LangGraph's own decoding (its msgpack hook, the values' constructors): thousands of objects
            # that the view keeps or hands out, which collections on the way would only walk.
            with no_cycle_collection():
                decoded = serde.loads_typed(("msgpack", array))
        except Exception:  # each item is decoded again, alone, and raises as it would
            decoded = None
        if type(decoded) is list and len(decoded) == len(parts):
            return decoded
    return [decode_item(serde, item) for item in items]


def encode_json(serde: Serde, value: dict[str, Any]) -> dict[str, Any]:
    """``value`` as it is (JSON, queryable in the database) when JSON keeps it whole, else serialized."""
    try:
        if orjson.loads(orjson.dumps(value)) == value:
            return value
    except (TypeError, orjson.JSONEncodeError):
        pass
    return {_SERDE_KEY: encode_item(serde, value)}


def decode_json(serde: Serde, data: bytes) -> Any:
    value = orjson.loads(data)
    if isinstance(value, dict) and _SERDE_KEY in value and len(value) == 1:
        return decode_item(serde, value[_SERDE_KEY])
    return value


# ----------------------------------------------------------------------------- the fold


class Blob:
    """One stored value: whole, items appended to ``base``, or a dict of values."""

    __slots__ = ("base", "fields", "item", "items", "kind", "length", "objects", "tip")

    def __init__(
        self,
        kind: str,
        item: Any = None,
        items: list[Any] | None = None,
        base: Blob | None = None,
        fields: dict[str, Blob] | None = None,
    ) -> None:
        self.kind = kind  # "f", "l", "a", "d", "s", "v" or "e"
        self.item = item
        self.items = items or []
        self.base = base
        self.fields = fields
        self.length: int = len(self.items) + (base.length if base is not None else 0)
        self.objects: list[Any] | None = None  # this segment's items decoded, once per process
        self.tip: Blob | None = None  # a blob whose value starts with this one's (see ThreadView.value)

    @property
    def is_list(self) -> bool:
        return self.kind in ("l", "a")


def item_key(item: Any) -> str:
    """The key an item is referred to by: a hash of its type and bytes (as stored, in base64)."""
    if isinstance(item, bytes):
        item = base64.b64encode(item).decode()
    text = item if isinstance(item, str) else f"{item[0]}:{item[1]}"
    return base64.urlsafe_b64encode(hashlib.blake2b(text.encode(), digest_size=12).digest()).decode()


class Saved:
    """A checkpoint as the fold keeps it; ``body`` (the checkpoint but its id, versions and values)
    and ``metadata`` are JSON, decoded per read, so every reader gets dicts of its own."""

    __slots__ = ("body", "id", "metadata", "ns", "parent", "seq", "sources", "versions")

    def __init__(
        self,
        seq: int,
        ns: str,
        id: str,
        parent: str | None,
        versions: dict[str, Any],
        body: bytes,
        metadata: bytes,
        sources: dict[str, Blob],
    ) -> None:
        self.seq = seq
        self.ns = ns
        self.id = id
        self.parent = parent
        self.versions = versions
        self.body = body
        self.metadata = metadata
        self.sources = sources


@dataclasses.dataclass(slots=True)
class Write:
    task_id: str
    idx: int
    channel: str
    blob: Blob
    task_path: str


_FLAT_CACHE = 16
_SEND: list[type] = []  # LangGraph's Send, once the saver registers it (this module imports no LangGraph)


def register_send(cls: type) -> None:
    """Let threads store a ``Send`` (a task's packet: a node and the state it is sent) as ``["s", node,
    arg]``, its arg encoded against what the thread holds, instead of its bytes whole."""
    if cls not in _SEND:
        _SEND.append(cls)


def _is_send(value: Any) -> bool:
    return bool(_SEND) and type(value) is _SEND[0] and getattr(value, "timeout", None) is None


def _has_list(value: dict[Any, Any]) -> bool:
    """Whether a dict holds a non-empty list, at any depth of dicts (a Send's arg holds the state)."""
    return any((type(v) is list and v) or (type(v) is dict and _has_list(v)) for v in value.values())


def _starts_with(serde: Serde, value: list[Any], start: list[Any]) -> bool:
    """Whether ``value`` begins with ``start``'s items as they are stored: each the very object (what
    LangGraph hands back: one identity test each, in C), or one the serializer stores as the same
    bytes. ``==`` alone is not enough: it takes ``1`` for ``1.0`` and ``True``, and an appended delta
    over such a start would bring the old items back in place of the new."""
    n = len(start)
    if len(value) < n:
        return False
    head = value[:n]
    if all(map(operator.is_, head, start)):
        return True
    same = zip(head, start, strict=True)
    return head == start and all(a is b or encode_item(serde, a) == encode_item(serde, b) for a, b in same)


class NeedsHistory(Exception):  # noqa: N818 - a signal inside the saver, never raised to a user
    """A view read from a snapshot lacks what was asked (an older checkpoint, a namespace it did not
    keep, an item or list an event refers to): the caller folds the whole stream instead."""


class ThreadView:
    """Everything of one thread, folded from its events: checkpoints by namespace, their writes,
    and where each channel value lives. Values are decoded lazily, each stored item once.

    A view read from a snapshot (``partial``) holds the checkpoints the snapshot kept (each
    namespace's newest and those holding the lists writers extend) and what came after; whatever
    it lacks raises :class:`NeedsHistory` rather than being taken for absent.
    """

    def __init__(self) -> None:
        self._reset()

    def _reset(self) -> None:
        self.partial = False
        self.floor = ""  # partial: the newest checkpoint id the snapshot held (any id above is newer)
        self.version = 0
        self.checkpoints: dict[tuple[str, str], Saved] = {}
        self.gone: dict[tuple[str, str], Saved] = {}  # deleted, still the base of values stored after them
        self.ids: dict[str, list[str]] = {}  # ns -> checkpoint ids in the order they were saved
        self._newest: dict[str, str] = {}  # ns -> its largest checkpoint id
        self.writes: dict[tuple[str, str], dict[tuple[str, int], Write]] = {}
        self.items: dict[str, Any] = {}  # item key -> the item as first stored
        self.key_of: dict[int, str] = {}  # id(item) -> its key, for every item a value of the view holds
        self._objects: dict[str | bytes, Any] = {}  # a list item (as stored) -> its object, decoded once
        self._index: dict[tuple[str, str, Any], Blob] = {}  # (ns, channel, version) -> the newest blob
        self.last_list: dict[str, tuple[list[str], Blob]] = {}  # channel -> the newest list stored, and its ref
        self._flat: OrderedDict[int, tuple[Blob, list[Any]]] = OrderedDict()
        self.staged: dict[str, Any] = {}  # item key -> item, stored by the event being built (see begin)
        # The checkpoint the event being built starts from (a checkpoint's parent, the one a task's
        # writes are against): its lists are what a Send's state most likely extends.
        self.context: Saved | None = None
        # The items an event may refer to (None: all): those of the snapshot this view last wrote and
        # those stored after it, so a reader of that snapshot holds every item the next events name.
        self.recent: set[str] | None = None

    # -- folding ------------------------------------------------------------------------
    def read(self, stream: Stream) -> None:
        """Fold what the thread's ``stream`` holds past this view's version."""
        with no_cycle_collection():
            for rec in stream.read(after=self.version):
                self.apply(rec)

    def apply(self, rec: Recorded) -> None:
        ev = rec.event
        if self.partial and isinstance(ev, CheckpointsDeleted):
            raise NeedsHistory("a deletion: the checkpoints it names may be older than the snapshot")
        if isinstance(ev, CheckpointSaved):
            self._saved(rec.seq, ev)
        elif isinstance(ev, WritesSaved):
            self._writes(ev)
        elif isinstance(ev, ThreadCompacted):
            self._reset()  # what came before is gone: the events after it restate what was kept
        elif isinstance(ev, CheckpointsDeleted):
            touched: set[str] = set()
            for ns, cid in ev.checkpoints:
                saved = self.checkpoints.pop((ns, cid), None)
                if saved is not None:
                    touched.add(ns)
                    self.gone[(ns, cid)] = saved
                self.writes.pop((ns, cid), None)
            for ns in touched:
                self.ids[ns] = [cid for cid in self.ids[ns] if (ns, cid) in self.checkpoints]
                self._newest.pop(ns, None)
                if self.ids[ns]:
                    self._newest[ns] = max(self.ids[ns])
        self.version = rec.seq

    def _saved(self, seq: int, ev: CheckpointSaved) -> None:
        parent = self.find(ev.ns, ev.parent) if ev.parent else None
        if self.partial and ev.parent and parent is None:
            raise NeedsHistory(f"checkpoint {ev.id} follows {ev.parent}, which the snapshot did not keep")
        versions = ev.versions
        parent_versions = parent.versions if parent is not None else {}
        sources: dict[str, Blob] = {}
        for channel, version in versions.items():
            stored = ev.values.get(channel)
            blob: Blob | None
            if stored is not None:
                base = parent.sources.get(channel) if parent is not None else None
                blob = self.blob(stored, base, f"checkpoint {ev.id}, channel {channel!r}")
                if blob.is_list:
                    self.last_list[channel] = ([ev.ns, ev.id, channel], blob)
                for name, field in (blob.fields or {}).items():
                    if field.is_list:
                        self.last_list[name] = ([ev.ns, ev.id, channel, name], field)
            elif parent is not None and parent_versions.get(channel) == version and channel in parent.sources:
                blob = parent.sources[channel]
            else:
                blob = self._index.get((ev.ns, channel, version))
            if blob is not None:
                sources[channel] = blob
                self._index[(ev.ns, channel, version)] = blob
            elif self.partial:
                raise NeedsHistory(f"checkpoint {ev.id} keeps channel {channel!r} from before the snapshot")
        body = orjson.dumps(ev.checkpoint)
        saved = Saved(seq, ev.ns, ev.id, ev.parent, versions, body, orjson.dumps(ev.metadata), sources)
        key = (ev.ns, ev.id)
        if key in self.checkpoints:  # the same checkpoint saved again (a retried put): the newer stands
            self.ids[ev.ns].remove(ev.id)
        self.checkpoints[key] = saved
        self.ids.setdefault(ev.ns, []).append(ev.id)
        if ev.id > self._newest.get(ev.ns, ""):
            self._newest[ev.ns] = ev.id

    def blob(self, stored: list[Any], base: Blob | None, where: str) -> Blob:
        """The blob a stored value stands for; ``base`` is what a bare append extends (the parent's value)."""
        kind = stored[0]
        if kind == "f":
            return Blob("f", item=self._intern(stored[1], where))
        if kind == "l":
            return Blob("l", items=self._interned(stored[1], where))
        if kind == "e":
            return Blob("e")
        if kind == "d":
            return Blob("d", fields={k: self.blob(v, None, f"{where}[{k!r}]") for k, v in stored[1].items()})
        if kind == "s":
            if not isinstance(stored[1], str) or len(stored) != 3:
                raise InvalidInputError(f"{where}: a Send is stored as ['s', node, arg], got {stored!r:.80}")
            return Blob("s", item=stored[1], fields={"": self.blob(stored[2], None, f"{where} (Send arg)")})
        if kind == "v":
            return Blob("v", fields={str(i): self.blob(v, None, f"{where}[{i}]") for i, v in enumerate(stored[1])})
        if kind == "a":
            if len(stored) > 2:
                base = self._referred(stored[2])
            if base is None or not base.is_list:
                if self.partial:
                    raise NeedsHistory(f"{where} appends to a list from before the snapshot")
                raise InvalidInputError(f"{where} appends to a list this thread does not hold; its log is incomplete")
            return Blob("a", items=self._interned(stored[1], where), base=base)
        raise InvalidInputError(f"{where}: unknown value kind {kind!r}")

    def referred(self, ref: list[str]) -> Blob | None:
        """The value a reference ``[ns, checkpoint_id, channel(, key)]`` names, if the view holds it."""
        return self._referred(ref)

    def _referred(self, ref: list[str]) -> Blob | None:
        owner = self.find(ref[0], ref[1])
        blob = owner.sources.get(ref[2]) if owner is not None else None
        if blob is not None and len(ref) > 3:
            blob = (blob.fields or {}).get(ref[3])
        return blob

    def _interned(self, stored: list[Any], where: str) -> list[Any]:
        """A list's items, each as :meth:`_intern` gives it; the references among them (all of a
        snapshot's) looked up in one pass."""
        get = self.items.get
        found = [get(item[1:]) if type(item) is str and item.startswith("#") else None for item in stored]
        if None in found:  # an item stored here, or a reference this view cannot resolve
            return [
                item if item is not None else self._intern(raw, where) for item, raw in zip(found, stored, strict=True)
            ]
        return found

    def _intern(self, item: Any, where: str) -> Any:
        """An item as stored the first time: a reference is looked up, anything else remembered."""
        if isinstance(item, str) and item.startswith("#"):
            found = self.items.get(item[1:])
            if found is None:
                if self.partial:
                    raise NeedsHistory(f"{where} refers to an item from before the snapshot")
                raise InvalidInputError(f"{where} refers to item {item}, which this thread does not hold")
            return found
        key = item_key(item)
        self.items.setdefault(key, item)
        self.key_of[id(item)] = key
        if self.recent is not None:
            self.recent.add(key)
        return item

    def _writes(self, ev: WritesSaved) -> None:
        if not self.holds_writes_of(ev.ns, ev.checkpoint_id):
            raise NeedsHistory(f"writes to checkpoint {ev.checkpoint_id}, which the snapshot did not keep")
        table = self.writes.setdefault((ev.ns, ev.checkpoint_id), {})
        for idx, channel, stored in ev.writes:
            key = (ev.task_id, idx)
            # A task's regular writes are kept once (a retried put_writes repeats them); its special
            # writes (errors, interrupts, resumes: negative idx) are replaced by the newest.
            blob = self.blob(stored, None, f"write {idx} of task {ev.task_id}")  # its items, for what refers to them
            if idx >= 0 and key in table:
                continue
            table[key] = Write(ev.task_id, idx, channel, blob, ev.task_path)

    def holds_writes_of(self, ns: str, checkpoint_id: str) -> bool:
        """Whether the view holds every write to the checkpoint: a partial view those of the ones it
        kept and of any newer than its snapshot (their writes may be stored before them)."""
        return not self.partial or (ns, checkpoint_id) in self.checkpoints or checkpoint_id > self.floor

    # -- encoding, against what the thread holds ----------------------------------------------
    def begin(self) -> None:
        """Start building an event: an item it stores twice is stored once, then referred to; one an
        event built before and never stored (its append was refused) is not referred to."""
        self.staged = {}
        self.context = None

    def encode(self, serde: Serde, channel: str, value: Any, base: Blob | None) -> list[Any]:
        """A value as stored: a list that starts with a list the thread holds stores only what follows.

        Tried both, the shorter rest wins: the parent checkpoint's value of the channel (``base``;
        a bare ``"a"`` needs no reference), and the newest list stored for a channel (or input key)
        of that name (a subgraph's first checkpoint starts from its parent's messages). Items
        compare with ``==``; the ones LangGraph passes back are the very objects the saver handed
        out, so the comparison is an identity check in C and costs next to nothing. A dict with
        lists in it (a graph's input) is stored entry by entry, so its lists can be referred to.
        """
        if type(value) is dict and _has_list(value):
            if all(type(k) is str for k in value):
                return ["d", {k: self.encode(serde, k, v, None) for k, v in value.items()}]
        if _is_send(value):
            # A Send carries the whole state (create_react_agent sends it once per tool call): its lists
            # are stored as what they add to the lists the thread holds, as a checkpoint's are.
            return ["s", value.node, self.encode(serde, channel, value.arg, None)]
        if type(value) is list and any(map(_is_send, value)):  # the tasks channel: this step's Sends
            return ["v", [self.encode(serde, channel, v, None) for v in value]]
        if type(value) is not list:
            return ["f", self.item(serde, value)]
        candidates: list[tuple[Blob, list[str] | None]] = [(base, None)] if base is not None else []
        context = self.context
        near = context.sources.get(channel) if context is not None else None
        if near is not None and near is not base and context is not None:
            candidates.append((near, [context.ns, context.id, channel]))
        newest = self.last_list.get(channel)
        if newest is not None and newest[1] is not base and newest[1] is not near:
            candidates.append((newest[1], newest[0]))
        best: tuple[list[Any], list[str] | None] | None = None
        for blob, ref in candidates:
            if blob.is_list and len(value) >= blob.length:
                start = self._list(serde, blob)
                if _starts_with(serde, value, start) and (best is None or len(value) - len(start) < len(best[0])):
                    best = (value[len(start) :], ref)
        if best is None:
            return ["l", [self.item(serde, item) for item in value]]
        rest, ref = best
        appended = [self.item(serde, item) for item in rest]
        return ["a", appended] if ref is None else ["a", appended, ref]

    def item(self, serde: Serde, value: Any) -> Any:
        """One item as stored: its bytes, or a reference to the same bytes stored before in this thread."""
        item = encode_item(serde, value)
        key = item_key(item)
        if (key in self.items and (self.recent is None or key in self.recent)) or key in self.staged:
            return f"#{key}"
        self.staged[key] = item
        return item

    # -- reading ------------------------------------------------------------------------
    def find(self, ns: str, checkpoint_id: str) -> Saved | None:
        """A checkpoint, deleted or not (a deleted one may still hold the start of a later value)."""
        key = (ns, checkpoint_id)
        return self.checkpoints.get(key) or self.gone.get(key)

    def newest(self) -> str | None:
        """The largest checkpoint id the thread holds, of any namespace."""
        return max(self._newest.values(), default=None)

    def latest(self, ns: str) -> Saved | None:
        newest = self._newest.get(ns)
        return self.checkpoints[(ns, newest)] if newest is not None else None

    def values(self, serde: Serde, saved: Saved) -> dict[str, Any]:
        """A checkpoint's channel values, decoded (its empty channels left out)."""
        return {channel: self.value(serde, blob) for channel, blob in saved.sources.items() if blob.kind != "e"}

    def pending_writes(self, serde: Serde, saved: Saved) -> list[tuple[str, str, Any]]:
        """A checkpoint's pending writes, decoded: (task id, channel, value), in LangGraph's order."""
        return [(w.task_id, w.channel, self.value(serde, w.blob)) for w in self.ordered_writes(saved.ns, saved.id)]

    def value(self, serde: Serde, blob: Blob) -> Any:
        """A fresh copy of a stored value (a list is a new list; its items are shared, decoded once)."""
        if blob.kind == "f":
            return decode_item(serde, blob.item)
        if blob.kind == "d":
            return {k: self.value(serde, v) for k, v in (blob.fields or {}).items()}
        if blob.kind == "v":
            return [self.value(serde, v) for v in (blob.fields or {}).values()]
        if blob.kind == "s":
            arg = self.value(serde, (blob.fields or {})[""])
            return _SEND[0](blob.item, arg) if _SEND else {"node": blob.item, "arg": arg}
        flat, fresh = self._whole(serde, blob)
        return flat if fresh else list(flat)

    def _list(self, serde: Serde, blob: Blob) -> list[Any]:
        """The whole list a list blob stands for (not to be changed: it may be the cached one)."""
        return self._whole(serde, blob)[0]

    def _whole(self, serde: Serde, blob: Blob) -> tuple[list[Any], bool]:
        """The whole list a list blob stands for, and whether it is a new list no one else holds
        (a slice of its tip's: reading a history newest first, ``value`` hands it out uncopied, so
        each checkpoint's list is copied once, not three times).

        Walks the appends back to a whole list, or to a blob whose list is cached; every blob on the
        way is a prefix of this one, so it remembers this one as its ``tip`` and its own list is
        then a slice of the tip's, without walking again (reading a history newest first is linear).
        """
        segments: list[Blob] = []
        start: list[Any] = []
        current: Blob | None = blob
        while current is not None:
            hit = self._cached(current)
            if hit is not None:
                if current is blob:
                    return hit
                start = hit[0]
                break
            segments.append(current)
            current = current.base if current.kind == "a" else None
        self._decode(serde, [s for s in segments if s.objects is None])
        flat = list(start)
        for segment in reversed(segments):
            flat.extend(segment.objects or ())
        for segment in segments:
            segment.tip = blob
        self._flat[id(blob)] = (blob, flat)
        while len(self._flat) > _FLAT_CACHE:
            self._flat.popitem(last=False)
        return flat, False

    def _decode(self, serde: Serde, segments: list[Blob]) -> None:
        """Decode the segments' items, each once per thread (the same message in several lists is
        one object), those not decoded before all in one call."""
        objects = self._objects
        new = {item: None for s in segments for item in s.items if type(item) is not list and item not in objects}
        objects.update(zip(new, decode_items(serde, list(new)), strict=True))
        for segment in segments:
            segment.objects = [objects[i] if type(i) is not list else decode_item(serde, i) for i in segment.items]

    def _cached(self, blob: Blob) -> tuple[list[Any], bool] | None:
        """The blob's whole list from the cache (``False``: the cached list itself) or sliced from
        its tip's (``True``: a new list)."""
        hit = self._flat.get(id(blob))
        if hit is not None and hit[0] is blob:
            self._flat.move_to_end(id(blob))
            return hit[1], False
        tip = blob.tip
        if tip is not None:
            hit = self._flat.get(id(tip))
            if hit is not None and hit[0] is tip:
                self._flat.move_to_end(id(tip))  # keep the tip: reading a history newest first slices it
                return hit[1][: blob.length], True
        return None

    def ordered_writes(self, ns: str, checkpoint_id: str) -> list[Write]:
        """A checkpoint's writes in ``writes_sort_key`` order: (task_path, task_id, idx)."""
        table = self.writes.get((ns, checkpoint_id))
        if not table:
            return []
        return sorted(table.values(), key=lambda w: (w.task_path, w.task_id, w.idx))


# ----------------------------------------------------------------------------- threads


def read_thread(log: TaskLog, thread_id: str) -> ThreadView:
    """A thread's view, folded from its whole stream (empty when there is no such thread)."""
    view = ThreadView()
    view.read(Stream(log, stream_id(thread_id), THREAD_TYPE))
    return view


def list_threads(
    log: TaskLog, serde: Serde, view_of: Callable[[str], ThreadView], *, limit: int
) -> list[dict[str, Any]]:
    """The tenant's threads, most recently written first: how many checkpoints and events each holds,
    its namespaces, and its newest checkpoint of the graph's own namespace (and that one's step).
    ``view_of`` gives a thread's view by its id."""
    rows = log.store.list_tasks(log.tenant, TaskFilter(type=THREAD_TYPE), limit=limit)
    infos = []
    for row in sorted(rows, key=lambda r: r.updated_at, reverse=True):
        thread_id = thread_of(row.task_id)
        view = view_of(thread_id)
        latest = view.latest("")
        infos.append(
            {
                "thread_id": thread_id,
                "checkpoints": len(view.checkpoints),
                "namespaces": sorted(ns for ns, ids in view.ids.items() if ids),
                "latest": latest.id if latest is not None else None,
                "step": decode_json(serde, latest.metadata).get("step") if latest is not None else None,
                "events": row.version,
                "updated_at": row.updated_at,
            }
        )
    return infos
