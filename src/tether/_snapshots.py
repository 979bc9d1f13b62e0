"""Snapshots: when to cache a stream's fold, and how one is read back only when it is intact.

One mechanism for every stream: a task's state and tether's own streams' views (a session's)
are stored with a checksum and a schema number, read back only when both hold, and otherwise
rebuilt from the events (a fork with no snapshot of its own uses its parent's).
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import orjson
from pydantic import ValidationError

from tether.errors import ConfigurationError
from tether.model import STATE_SCHEMA_VERSION, CallList, TaskState
from tether.store import SnapshotRow, Store

__all__ = [
    "SnapshotPolicy",
    "checksum",
    "intact_snapshot",
    "parse_state",
    "read_if_intact",
    "snapshot_row",
    "state_data",
]

log = logging.getLogger("tether")

_FAR = 2**62
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
    state that keeps what its events carry (a chat keeping every message) keeps one
    snapshot, its latest, instead of a copy of itself at every size. A state that
    stays about the same size keeps them all, and time travel to any point starts
    from the nearest. Either way the bytes stored per event do not grow with the
    history. ``growth_ratio`` above 1 keeps every snapshot.
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


def checksum(data: str | bytes) -> str:
    raw = data.encode() if isinstance(data, str) else data
    return hashlib.blake2b(raw, digest_size=16).hexdigest()


def snapshot_row(seq: int, schema: int, data: str) -> SnapshotRow:
    """A snapshot as stored: its data with the checksum it is read back against."""
    return SnapshotRow(seq, schema, checksum(data), data)


def read_if_intact(snap: SnapshotRow, read: Callable[[SnapshotRow], _T]) -> _T | None:
    """``read(snap)`` if the snapshot passes its checksum and ``read`` takes it, else ``None``."""
    if checksum(snap.data) != snap.checksum:
        return None
    try:
        return read(snap)
    except ValueError:
        return None


def intact_snapshot(
    store: Store, tenant: str, stream_id: str, upto: int | None, read: Callable[[SnapshotRow], _T]
) -> tuple[SnapshotRow | None, _T | None]:
    """The newest snapshot of a stream at or before ``upto`` that passes its checksum and that
    ``read`` takes (``read`` raises ``ValueError`` naming why not: an unknown schema, a shape
    that does not validate); a fork with none of its own uses its parent's from before the fork
    point."""
    at_most = _FAR if upto is None else upto
    owner = stream_id
    while True:
        snap = store.get_snapshot(tenant, owner, at_most=at_most)
        if snap is None:
            row = store.get_task(tenant, owner)
            if row is None or row.parent_id is None or row.parent_seq is None:
                return None, None
            owner, at_most = row.parent_id, min(at_most, row.parent_seq)
            continue
        if checksum(snap.data) == snap.checksum:
            try:
                return snap, read(snap)
            except ValueError as exc:  # pydantic's ValidationError is one
                reason = str(exc).splitlines()[0]
        else:
            reason = "fails its checksum"
        log.warning("snapshot of stream %s at seq %d %s; rebuilding from events", stream_id, snap.seq, reason)
        at_most = snap.seq - 1


_STATUS_CODES = {"intended": "i", "completed": "c", "failed": "f"}
_CODE_STATUS = {code: status for status, code in _STATUS_CODES.items()}


def state_data(state: TaskState) -> str:
    """A task's state as its snapshot stores it (state schema 2), in lines: the state without its
    calls; the calls' ordinals and statuses; then each call's JSON, one per line.

    A call never read since the state was loaded is written back as the text it was read from,
    so a snapshot costs a dump of the calls that changed, not of all of them; and a load reads
    the calls' records only when they are asked for (:class:`tether.model.CallList`).
    """
    calls = state.calls
    meta = {"n": calls.ordinals(), "s": "".join(_STATUS_CODES[s] for s in calls.statuses())}
    lines = [state.model_dump_json(exclude={"position", "calls"}), orjson.dumps(meta).decode()]
    lines.extend(calls.text(i) for i in range(len(calls)))
    return "\n".join(lines)


def parse_state(snap: SnapshotRow) -> TaskState:
    """A task's state from its snapshot (``ValueError`` naming why it cannot be used)."""
    if snap.schema != STATE_SCHEMA_VERSION:
        raise ValueError(f"has state schema {snap.schema}, current is {STATE_SCHEMA_VERSION}")
    data = snap.data if isinstance(snap.data, str) else snap.data.decode()
    lines = data.split("\n")
    if len(lines) < 2:
        raise ValueError("has no line of calls")
    try:
        state = TaskState.model_validate_json(lines[0])
    except ValidationError as exc:
        raise ValueError(f"does not validate ({exc.error_count()} errors)") from None
    meta = orjson.loads(lines[1])
    ns, codes, texts = meta.get("n"), meta.get("s"), lines[2:]
    if not isinstance(ns, list) or not isinstance(codes, str) or not len(ns) == len(codes) == len(texts):
        raise ValueError(f"lists {len(texts)} calls that its ordinals and statuses do not match")
    try:
        status = [_CODE_STATUS[code] for code in codes]
    except KeyError as exc:
        raise ValueError(f"has an unknown call status code {exc}") from None
    calls = CallList(stored=(ns, status, list(texts)))
    return state.model_copy(update={"calls": calls})
