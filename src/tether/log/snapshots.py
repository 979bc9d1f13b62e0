"""Snapshots: when to cache a stream's fold, and how one is read back only when it is intact.

One mechanism for every stream: a task's state and tether's own streams' views (a session's)
are stored with a checksum and a schema number, read back only when both hold, and otherwise
rebuilt from the events (a fork with no snapshot of its own uses its parent's).
"""

from __future__ import annotations

import hashlib
import logging
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple, TypeVar

import orjson
from pydantic import ValidationError

from tether.errors import ConfigurationError, InvalidInputError
from tether.model import STATE_SCHEMA_VERSION, TaskState
from tether.model.calls import CallList, CallReader, Prefix
from tether.store import SnapshotRow, Store

__all__ = [
    "NOT_IN_STATE_LINE",
    "PARTIAL_SHARE",
    "CallsLine",
    "SnapshotPolicy",
    "checksum",
    "first_lines_intact",
    "intact_snapshot",
    "matches",
    "newest_calls",
    "parse_state",
    "partial_data",
    "partial_of",
    "read_if_intact",
    "snapshot_row",
    "state_data",
    "summary_line",
]

log = logging.getLogger("tether")

_FAR = 2**62
PARTIAL_SHARE = 8
"""A partial snapshot is kept only when it is at most an eighth of the bytes of the call events it
spans: partial snapshots add at most an eighth to what a task stores."""
NOT_IN_STATE_LINE: set[str] = {"position", "calls"}
"""What a snapshot's first line leaves out of a state: its calls (the second line's), and its
position (computed from the rest)."""
_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
class SnapshotPolicy:
    """When to cache the fold as a snapshot, and which earlier snapshots to keep.

    A snapshot is written once ``every`` events have been appended since the last
    one *and* those events' bytes reach ``size_ratio`` times the last snapshot's
    size. The second rule keeps snapshots of a growing state from being written
    more often than the state changes; ``size_ratio=0`` means "exactly every K".

    When a new snapshot is written, the one before it is dropped if the state grew
    by at least ``growth_ratio`` times the bytes of the events between the two: a
    state that keeps what its events carry (a chat keeping every message; a task
    keeping its calls, which a snapshot holds by reference to their events) keeps one
    snapshot, its latest, instead of a copy of itself at every size. A state that
    stays about the same size keeps them all, and time travel to any point starts
    from the nearest. Either way the bytes stored per event do not grow with the
    history. ``growth_ratio`` above 1 keeps every snapshot.

    A task whose calls accumulate also keeps *partial* snapshots (its state without its calls, a
    few hundred bytes) where its earlier snapshots were and at every seq that is a multiple of
    ``every``, when each is at most an eighth of the call events it spans: time travel to any
    point reads the partial snapshot before it, the calls of the latest full snapshot as they
    stood then, and at most ``every`` events (see ``tether.log.snapshot_keeping``).
    """

    every: int = 100
    size_ratio: float = 1.0
    growth_ratio: float = 0.5

    def __post_init__(self) -> None:
        if self.every < 1:
            raise ConfigurationError(f"SnapshotPolicy.every must be at least 1, got {self.every}")
        if self.size_ratio < 0:
            raise ConfigurationError(f"SnapshotPolicy.size_ratio must be >= 0, got {self.size_ratio}")
        if self.growth_ratio < 0:
            raise ConfigurationError(f"SnapshotPolicy.growth_ratio must be >= 0, got {self.growth_ratio}")

    def due(self, events: int, size_since: int, last_size: int) -> bool:
        """A snapshot is due: ``events`` events of ``size_since`` bytes were appended since the last
        snapshot, which is ``last_size`` bytes."""
        return events >= self.every and size_since >= self.size_ratio * last_size

    def replaces_last(self, grown: int, kept: int, size_since: int) -> bool:
        """The new snapshot replaces the one before: the state grew by what the events between carried.

        ``grown`` is how many bytes the new snapshot is larger; ``kept``, the bytes of the events
        between that the state keeps by reference (its calls', see ``state_data``); ``size_since``,
        the bytes of all the events between.
        """
        return grown + kept >= self.growth_ratio * size_since


_CRC = "crc32:"


def checksum(data: str | bytes) -> str:
    """The checksum a snapshot is stored with: ``crc32:{length}:{crc}`` of its bytes (UTF-8 for text).

    A CRC, not a cryptographic hash: a snapshot is a cache, and its checksum guards it against
    damage (a bad disk, a stray or torn write), not forgery; whoever can write a snapshot can write
    the events it is rebuilt from. CRC-32 catches every error burst of up to 32 bits and all but one
    in 2**32 of the others, the length every truncation; the reader pays for it on every cold load,
    over the whole state. Snapshots stored with the earlier checksum stay readable (:func:`matches`).
    """
    raw = data.encode() if isinstance(data, str) else data
    return f"{_CRC}{len(raw)}:{zlib.crc32(raw):08x}"


def matches(data: str | bytes, stored: str) -> bool:
    """Whether ``data`` has the checksum ``stored``: this version's (:func:`checksum`), or the BLAKE2b
    (128 bits, in hex) that snapshots written before it carry."""
    if stored.startswith(_CRC):
        return checksum(data) == stored
    raw = data.encode() if isinstance(data, str) else data
    return len(stored) == 32 and hashlib.blake2b(raw, digest_size=16).hexdigest() == stored


def snapshot_row(seq: int, schema: int, data: str | bytes) -> SnapshotRow:
    """A snapshot as stored: its data with the checksum it is read back against."""
    return SnapshotRow(seq, schema, checksum(data), data)


def read_if_intact(snap: SnapshotRow, read: Callable[[SnapshotRow], _T]) -> _T | None:
    """``read(snap)`` if the snapshot passes its checksum and ``read`` takes it, else ``None``."""
    if not matches(snap.data, snap.checksum):
        return None
    try:
        return read(snap)
    except ValueError:
        return None


def intact_snapshot(
    store: Store,
    tenant: str,
    stream_id: str,
    upto: int | None,
    read: Callable[[SnapshotRow, str], _T],
    intact: Callable[[SnapshotRow], bool] | None = None,
) -> tuple[SnapshotRow | None, _T | None]:
    """The newest snapshot of a stream at or before ``upto`` that passes its checksum (or
    ``intact(snapshot)``, when given) and that ``read(snapshot, owner)`` takes (``read`` raises
    ``ValueError`` naming why not: an unknown schema, a shape that does not validate); a fork with
    none of its own uses its parent's from before the fork point (``owner`` is the stream the
    snapshot belongs to)."""
    at_most = _FAR if upto is None else upto
    owner = stream_id
    warned: set[str] = set()
    while True:
        snap = store.get_snapshot(tenant, owner, at_most=at_most)
        if snap is None:
            row = store.get_task(tenant, owner)
            if row is None or row.parent_id is None or row.parent_seq is None:
                return None, None
            owner, at_most = row.parent_id, min(at_most, row.parent_seq)
            continue
        if intact(snap) if intact is not None else matches(snap.data, snap.checksum):
            try:
                return snap, read(snap, owner)
            except ValueError as exc:  # pydantic's ValidationError is one
                reason = str(exc).splitlines()[0]
        else:
            reason = "fails its checksum"
        if reason not in warned:  # once per reason: a corrupted full snapshot spoils every partial one before it
            warned.add(reason)
            log.warning("snapshot of stream %s at seq %d %s; rebuilding from events", stream_id, snap.seq, reason)
        at_most = snap.seq - 1


def state_data(state: TaskState) -> str:
    """A task's state as its snapshot stores it (state schema 2), in three lines: the state without
    its calls; a summary of its calls (:func:`summary_line`); then the calls as their ordinals,
    statuses and the seqs of the events that made each (``{"n": [1, 2, ...], "s": "ccf...",
    "e": ["4", "5,7", ...]}``), which a load parses only when something needs them.

    A call's record — its result above all — is stored once, in its events; a load reads a
    call's events when the call is first read (:class:`tether.model.CallList`). Raises
    ``InvalidInputError`` for a state whose calls were not folded from events (nothing names
    the events that made them).
    """
    calls = state.calls
    seqs = calls.event_seqs()
    if not all(seqs):
        missing = next(n for n, made in zip(calls.ordinals(), seqs, strict=True) if not made)
        raise InvalidInputError(
            f"call #{missing} of task {state.task_id!r} was not folded from events: "
            "a snapshot stores a call as the events that made it"
        )
    first = state.model_dump_json(exclude=NOT_IN_STATE_LINE) + "\n" + summary_line(calls, "c")
    meta: dict[str, object] = {"h": checksum(first), "n": calls.ordinals(), "s": calls.status_codes().decode()}
    meta["e"] = seqs
    if calls.in_order():
        meta["o"] = 1
    return first + "\n" + orjson.dumps(meta).decode()


_SUMS_FIRST = '{"h":"'


def first_lines_intact(snap: SnapshotRow) -> bool:
    """Whether a task snapshot's state and summary are intact, without reading its index: a full
    snapshot's third line starts with the checksum of the two before it (``"h"``); the checksum of
    the whole (the row's) is checked when the index is read. Any other snapshot: the whole's."""
    data = _text(snap)
    _, two = _breaks(data)
    if two > 0 and data.startswith(_SUMS_FIRST, two + 1):  # no copy of the index
        start = two + 1 + len(_SUMS_FIRST)
        return matches(data[:two], data[start : data.find('"', start)])
    return matches(data, snap.checksum)


def summary_line(calls: CallList, key: str) -> str:
    """What a load knows of a state's calls before it reads their index (``key``: ``"c"`` in a full
    snapshot, ``"k"`` in a partial one; :meth:`CallList.split`): their count, the last ordinal of those
    but the trailing calls not completed (``"z"``), which of those are not completed (``"m"``),
    the trailing ones with their status and seqs (``"t"``), and whether they are in order (``"o"``).
    A fold of later events goes on from there without the index, unless it changes an earlier call.
    """
    split = calls.split()
    meta: dict[str, object] = {key: split.size, "z": split.last, "m": split.open, "t": split.tail}
    if split.ordered:
        meta["o"] = 1
    return orjson.dumps(meta).decode()


def partial_data(state: TaskState, calls: CallList) -> str:
    """A *partial* snapshot of a task's state: the state without its calls, then the summary of its
    calls (:func:`summary_line`, with their count as ``"k"``: the fold's marks give a state without
    them, and them). The calls are those of a later full snapshot of the same stream
    (``state_data``) as they stood at its seq; see :mod:`tether.log.snapshot_keeping`."""
    return state.model_dump_json(exclude=NOT_IN_STATE_LINE) + "\n" + summary_line(calls, "k")


def partial_of(data: str, calls: CallList) -> str:
    """A full snapshot's ``data`` cut down to a partial one (its first line, not copying the rest),
    given its calls."""
    return data[: data.find("\n")] + "\n" + summary_line(calls, "k")


class CallsLine(NamedTuple):
    """A full snapshot's line of its calls' index, parsed."""

    ordinals: list[int]
    codes: bytearray
    """Each call's status code (``c``, ``i``, ``f``)."""
    seqs: list[str]
    """The seqs of the events that made each call."""
    in_order: bool
    """Whether the calls are in order (``CallList.in_order``)."""


def newest_calls(store: Store, tenant: str, owner: str) -> tuple[int, CallsLine] | None:
    """The seq and calls line of stream ``owner``'s newest snapshot, if it is a full one, intact and
    of the current schema: what its partial snapshots take their calls from."""
    snap = store.get_snapshot(tenant, owner, at_most=_FAR)
    if snap is None or snap.schema != STATE_SCHEMA_VERSION or not matches(snap.data, snap.checksum):
        return None
    _, second, third = _lines(snap)
    try:
        meta = orjson.loads(third or second)
        return None if "k" in meta else (snap.seq, _calls_line(meta))
    except (ValueError, TypeError):
        return None


def _calls_line(meta: object) -> CallsLine:
    """A calls line, checked (``ValueError`` naming what is wrong)."""
    if not isinstance(meta, dict):
        raise ValueError("has no calls line of ordinals, statuses and event seqs")
    ns, codes, seqs = meta.get("n"), meta.get("s"), meta.get("e")
    if not isinstance(ns, list) or not isinstance(codes, str) or not isinstance(seqs, list):
        raise ValueError("has no calls line of ordinals, statuses and event seqs")
    if not len(ns) == len(codes) == len(seqs):
        raise ValueError(f"lists {len(ns)} ordinals, {len(codes)} statuses and {len(seqs)} calls' events")
    if codes.count("c") + codes.count("i") + codes.count("f") != len(codes):  # three scans in C, no string made
        raise ValueError(f"has an unknown call status code {codes.strip('icf')[0]!r}")
    return CallsLine(ns, bytearray(codes.encode()), seqs, meta.get("o") == 1)


def _lines(snap: SnapshotRow) -> tuple[str, str, str]:
    """A task snapshot's three lines: the state, the summary of its calls (in a snapshot written
    before summaries: its calls' index, or a partial snapshot's count), and the calls' index ("" if none)."""
    data = _text(snap)
    one, two = _breaks(data)
    if one < 0:
        return data, "", ""
    if two < 0:
        return data[:one], data[one + 1 :], ""
    return data[:one], data[one + 1 : two], data[two + 1 :]


def _text(snap: SnapshotRow) -> str:
    return snap.data if isinstance(snap.data, str) else snap.data.decode()


def _breaks(data: str) -> tuple[int, int]:
    """Where a snapshot's first and second line breaks are (-1: none)."""
    one = data.find("\n")
    return one, (data.find("\n", one + 1) if one >= 0 else -1)


def parse_state(
    snap: SnapshotRow,
    reader: Callable[[TaskState], CallReader],
    later: Callable[[], CallsLine | None],
    rebuild: Callable[[int], CallList],
) -> TaskState:
    """A task's state from its snapshot (``ValueError`` naming why it cannot be used); its calls are
    read when asked for, by ``reader(state)``. A partial snapshot's calls come from ``later()``: the
    calls line of a later full snapshot of its stream.

    A snapshot with a summary of its calls (:func:`summary_line`) gives a state whose calls' index
    is parsed when first needed (:class:`~tether.model.calls.Prefix`); should it not be usable then
    (a later full snapshot gone or corrupted), the calls are ``rebuild(seq)``: folded from events.
    A snapshot written before summaries has its index parsed now.
    """
    if snap.schema != STATE_SCHEMA_VERSION:
        raise ValueError(f"has state schema {snap.schema}, current is {STATE_SCHEMA_VERSION}")
    first, second, third = _lines(snap)  # the third, the calls' index, is parsed when first needed
    try:
        state = TaskState.model_validate_json(first)
        meta = orjson.loads(second)
    except (ValidationError, orjson.JSONDecodeError) as exc:
        why = f"{exc.error_count()} errors" if isinstance(exc, ValidationError) else "not JSON"
        raise ValueError(f"does not validate ({why})") from None
    if isinstance(meta, dict) and "z" in meta:
        return _with_deferred_calls(state, snap, _summary(meta), third, reader(state), later, rebuild)
    count = meta.get("k") if isinstance(meta, dict) else None  # before summaries: a partial one, or the index
    if count is not None and (not isinstance(count, int) or isinstance(count, bool) or count < 0):
        raise ValueError(f"is a partial snapshot with a count of calls of {count!r}, not a whole number")
    if count == 0:
        return state
    calls = _indexed_calls(snap, second if count is None else "", reader(state), later)
    if count is not None and len(calls) != count:
        raise ValueError(
            f"is a partial snapshot of {count} calls, and the later full snapshot had {len(calls)} by then"
        )
    return state.model_copy(update={"calls": calls}) if calls else state


def _indexed_calls(snap: SnapshotRow, line: str, read: CallReader, later: Callable[[], CallsLine | None]) -> CallList:
    """The calls a snapshot stands for, from its own index ``line`` (checked against the row's
    checksum), or, for a partial snapshot, from its stream's later full snapshot as they stood at
    its seq (``ValueError`` naming why they cannot be)."""
    if line:
        if not matches(snap.data, snap.checksum):  # its first lines are checked at load, by their own
            raise ValueError("fails its checksum")
        own = _calls_line(orjson.loads(line))
        return CallList(stored=(own.ordinals, own.codes, own.seqs, read, None), ordered=own.in_order)
    full = later()
    if full is None:
        raise ValueError("is a partial snapshot, and its stream has no later full snapshot to take its calls from")
    stored = (full.ordinals, full.codes, full.seqs, read, None)
    return CallList(stored=stored, ordered=full.in_order).upto(snap.seq)


class _Summary(NamedTuple):
    """A summary line (:func:`summary_line`), parsed."""

    calls: int
    """How many calls (not ``count``: a tuple's own method has that name)."""
    last: int
    opened: list[int]
    tail: list[tuple[int, str, str]]
    """The trailing calls: ordinal, status code (``i`` or ``f``), the seqs of their events."""
    ordered: bool


def _summary(meta: dict[str, object]) -> _Summary:
    """A summary line (:func:`summary_line`), checked (``ValueError`` naming what is wrong)."""
    count = meta.get("c", meta.get("k"))
    last, opened, tail = meta.get("z"), meta.get("m"), meta.get("t")
    if not isinstance(count, int) or not isinstance(last, int) or count < 0:
        raise ValueError(f"has a summary of its calls with a count of {count!r} and a last ordinal of {last!r}")
    if not isinstance(opened, list) or not isinstance(tail, list) or len(tail) > count:
        raise ValueError("has a summary of its calls without their open and trailing calls")
    trailing: list[tuple[int, str, str]] = []
    for item in tail:
        if not (isinstance(item, list) and len(item) == 3 and isinstance(item[0], int) and item[1] in ("i", "f")):
            raise ValueError(f"has a trailing call {item!r} that is not [ordinal, 'i' or 'f', seqs]")
        trailing.append((item[0], item[1], str(item[2])))
    return _Summary(count, last, opened, trailing, meta.get("o") == 1)


def _with_deferred_calls(
    state: TaskState,
    snap: SnapshotRow,
    summary: _Summary,
    line: str,
    read: CallReader,
    later: Callable[[], CallsLine | None],
    rebuild: Callable[[int], CallList],
) -> TaskState:
    """``state`` with the calls a summary describes: the trailing ones at once, the others (the
    prefix) from the snapshot's own index ``line`` or a later full snapshot's, when first needed."""
    count, last, opened, tail, ordered = summary
    if count == 0:
        return state
    first = count - len(tail)
    tail_ns = [n for n, _, _ in tail]

    def resolve() -> CallList:
        read(())  # reading no call checks that the stream is still the one loaded
        try:
            calls = _indexed_calls(snap, line, read, later)
            if len(calls) != count or calls.ordinals()[first:] != tail_ns:
                raise ValueError(f"sums up {count} calls, and its calls' index has {len(calls)} by then")
        except ValueError as exc:  # pydantic's and orjson's errors are ones
            log.warning("snapshot at seq %d %s; reading its calls from events", snap.seq, str(exc).splitlines()[0])
            return rebuild(snap.seq).first(first)
        return calls.first(first)

    stored = (tail_ns, bytearray(code.encode()[0] for _, code, _ in tail), [s for _, _, s in tail], read, None)
    calls = CallList(stored=stored, ordered=True, prefix=Prefix(first, last, opened, ordered, resolve))
    return state.model_copy(update={"calls": calls})
