"""The Redis backend's key layout, how its records are packed into Redis values, and the server's
persistence settings as tether reads them.

Keys (``P`` the store's prefix, ``T`` the tenant, ``I`` a task id, each escaped by :func:`escape`)::

    P:{T:I}:r      HASH  the task's index row (TaskRow's fields; a missing field is None) and
                         ``base``, the seq before its own first event
    P:{T:I}:e      LIST  its own events, oldest first: element i is seq base + 1 + i
    P:{T:I}:s      HASH  seq -> snapshot
    P:{T:I}:k      SET   the ids of its forks (a stream they read cannot be deleted or compacted)
    P:{T}:tasks    ZSET  task id -> created_at: listing, newest first
    P:{T}:due      ZSET  task id -> when a claim may take it (only tasks a claim may ever take)
    P:{T}:held     SET   the ids of tasks whose lease has an owner
    P:{T}:exp      ZSET  task id -> when its keys expire (ms), for the tasks whose keys carry one
    P:{T}:L:<key>  HASH  one idempotency key of the ledger
    P:chg          pub/sub channel: every commit that may wake a waiter publishes on it

Every key of one task carries the hash tag ``{T:I}``, so a task's own operations touch one slot.
A finished task's row also holds ``x``, when it expires, under a store opened with ``ttl``: its four
keys carry that expiry (or a fork's later one) together, and ``exp`` lets listings prune the
tenant's indexes of it (``_redis_lua.py``, ``settle`` and ``PRUNE``).
"""

from __future__ import annotations

import re
import struct
from collections.abc import Sequence
from dataclasses import fields
from typing import Any

from tether.errors import ConfigurationError, StoreCorruptError
from tether.store.base import EventRow, LedgerRow, SnapshotRow, TaskRow

__all__ = [
    "ROW_FIELDS",
    "TYPE_CODES",
    "check_prefix",
    "decode_text",
    "escape",
    "number",
    "pack_event",
    "pack_row",
    "pack_snapshot",
    "unpack_event",
    "unpack_ledger",
    "unpack_row",
    "unpack_snapshot",
]

_SPECIAL = re.compile(r"[%:{}]")
_SEP = b"\x1f"
_BINARY = b"\x1e"  # ends a snapshot's checksum when its data is bytes (text: _SEP)
_FORMAT = b"\x01"  # leads every event element since this format; the first format's led by a digit
_AT = struct.Struct("<d")
_BYTES = [bytes((i,)) for i in range(0x80)]

TYPE_CODES = (
    "ArtifactSaved", "CallAttemptFailed", "CallCompleted", "CallFailed", "CallInDoubt", "CallStarted",
    "CancelRequested", "CheckpointSaved", "CheckpointsDeleted", "DataMigrated", "DataUpdated", "DecisionMade",
    "FailureRecorded", "InputReceived", "InputRejected", "InputRequested", "InputTimedOut", "KeyCreated",
    "KeyRevoked", "KeysOpened", "MessageAdded", "MessageRemoved", "MessagesCleared", "ObservationRecorded",
    "OutputSet", "PatchMarked", "PhaseChanged", "PlanSet", "RetryRequested", "RunTraced", "SessionClosed",
    "SessionOpened", "SessionRead", "SessionWritten", "SleepScheduled", "StatusChanged", "StepCompleted",
    "StepFailed", "StepStarted", "SummaryAdded", "SummaryWithdrawn", "TaskArchived", "TaskCreated",
    "TaskForked", "ThreadCompacted", "UsageRecorded", "UserChanged", "UserCreated", "WritesSaved",
)  # fmt: skip
"""The event types an element names by one byte, its code: its place here plus one. Stored elements
carry the codes, so a name is only ever added at the end (up to 127); any other type is spelled out."""
_TYPE_CODE = {name: code for code, name in enumerate(TYPE_CODES, 1)}
_PREFIX = re.compile(r"[A-Za-z0-9_.\-]{1,64}")

ROW_FIELDS = tuple(f.name for f in fields(TaskRow) if f.name not in ("task_id", "tenant"))
_INTS = frozenset({"version", "parent_seq", "lease_token", "calls_done"})
_FLOATS = frozenset({"created_at", "updated_at", "lease_expires", "wake_at"})


def escape(part: str) -> str:
    """``part`` with ``%``, ``:``, ``{`` and ``}`` percent-escaped: a tenant or task id that holds
    them can neither end a hash tag early nor run into the next part of a key.

    Example:
        >>> escape("a:b{c}")
        'a%3Ab%7Bc%7D'
    """
    return _SPECIAL.sub(lambda m: f"%{ord(m.group()):02X}", part)


def check_prefix(prefix: str) -> str:
    """The key prefix, refused unless it is 1-64 letters, digits, ``_``, ``.`` or ``-``."""
    if not isinstance(prefix, str) or not _PREFIX.fullmatch(prefix):
        raise ConfigurationError(
            f"Redis option prefix={prefix!r} is not a valid key prefix; expected 1-64 letters, digits, '_', '.' or '-'"
        )
    return prefix


def number(value: float | int) -> str:
    """A number as the scripts store and compare it (``repr`` keeps every bit of a float)."""
    return str(value) if isinstance(value, int) else repr(float(value))


def decode_text(value: bytes | None) -> str | bytes | None:
    """A stored JSON payload: text, as the SQL stores return it (bytes only if it is not UTF-8)."""
    if value is None:
        return None
    try:
        return value.decode()
    except UnicodeDecodeError:
        return value


def _as_bytes(data: str | bytes) -> bytes:
    return data.encode() if isinstance(data, str) else data


def _varint(value: int) -> bytes:
    """A non-negative int in 7-bit groups, low first, the high bit set on all but the last."""
    if value < 0x80:
        if value < 0:
            raise ValueError(f"a varint is not negative, got {value}")
        return _BYTES[value]
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _read_varint(value: bytes, at: int) -> tuple[int, int]:
    """The varint at ``value[at]`` and the offset after it."""
    result = shift = 0
    while True:
        byte = value[at]
        at += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, at
        shift += 7


def pack_event(event: EventRow, fence: int | None) -> bytes:
    """One event as its list element: the format byte, ``at`` as an IEEE double (every bit kept),
    varints of the schema, of fence + 1 (0: none) and of the type's code (0: its name follows,
    ended by 0x1f), then the payload. The seq is the element's place in the list (see the layout)."""
    code = _TYPE_CODE.get(event.type, 0)
    head = _FORMAT + _AT.pack(event.at) + _varint(event.schema) + _varint(0 if fence is None else fence + 1)
    head += _BYTES[code] if code else b"\x00" + event.type.encode() + _SEP
    return head + _as_bytes(event.data)


def unpack_event(value: bytes, seq: int) -> EventRow:
    """The event a list element holds; ``seq`` is the one its place in the list gives it."""
    if value[:1] != _FORMAT:
        return _unpack_first_format(value, seq)
    (when,) = _AT.unpack_from(value, 1)
    schema, pos = _read_varint(value, 9)
    fenced, pos = _read_varint(value, pos)
    code, pos = value[pos], pos + 1
    if code:
        type_ = TYPE_CODES[code - 1]
    else:
        end = value.index(_SEP, pos)
        type_, pos = value[pos:end].decode(), end + 1
    payload = decode_text(value[pos:])
    assert payload is not None
    return EventRow(seq, type_, schema, when, payload, fenced - 1 if fenced else None)


def _unpack_first_format(value: bytes, seq: int) -> EventRow:
    """An element of the first format: seq, type, schema, at and fence as text, each ended by 0x1f."""
    stored_seq, type_, schema, at, fence, data = value.split(_SEP, 5)
    payload = decode_text(data)
    assert payload is not None
    if int(stored_seq) != seq:  # a checked fact, not an assertion: stored data is read here
        raise StoreCorruptError(f"Redis: an event stored as seq {int(stored_seq)} was read at seq {seq}")
    return EventRow(seq, type_.decode(), int(schema), float(at), payload, int(fence) if fence else None)


def pack_snapshot(snapshot: SnapshotRow) -> bytes:
    """``schema \\x1f checksum`` and the data after a separator that says its type: ``\\x1f`` text
    (UTF-8), ``\\x1e`` bytes (a checksum holds neither)."""
    data = snapshot.data
    if isinstance(data, bytes):
        return f"{snapshot.schema}\x1f{snapshot.checksum}".encode() + _BINARY + data
    return f"{snapshot.schema}\x1f{snapshot.checksum}\x1f".encode() + data.encode()


def unpack_snapshot(seq: int, value: bytes) -> SnapshotRow:
    schema, rest = value.split(_SEP, 1)
    text, binary = rest.find(_SEP), rest.find(_BINARY)
    if binary >= 0 and (text < 0 or binary < text):
        return SnapshotRow(seq, int(schema), rest[:binary].decode(), rest[binary + 1 :])
    checksum, data = rest.split(_SEP, 1)
    payload = decode_text(data)
    assert payload is not None
    return SnapshotRow(seq, int(schema), checksum.decode(), payload)


def pack_row(row: TaskRow, **changes: Any) -> list[str]:
    """The row's field/value pairs, flat, for ``HSET`` (``None`` fields left out), with ``changes``."""
    values = {name: getattr(row, name) for name in ROW_FIELDS}
    values.update(changes)
    pairs: list[str] = []
    for name, value in values.items():
        if value is None:
            continue
        pairs += [name, number(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else value]
    return pairs


def unpack_row(tenant: str, task_id: str, raw: dict[bytes, bytes]) -> TaskRow | None:
    """The :class:`TaskRow` of an ``HGETALL``; ``None`` for an empty one (no such task)."""
    if not raw:
        return None
    values: dict[str, Any] = {}
    for key, value in raw.items():
        name = key.decode()
        if name in _INTS:
            values[name] = int(value)
        elif name in _FLOATS:
            values[name] = float(value)
        elif name in ROW_FIELDS:
            values[name] = value.decode()
    values.setdefault("user_id", None)
    values.setdefault("session_id", None)
    return TaskRow(task_id=task_id, tenant=tenant, **values)


def unpack_ledger(key: str, reply: Sequence[bytes | None]) -> LedgerRow:
    """A ledger script's reply: ``[status, result, started_at, finished_at, runs]``."""
    status, result, started, finished, runs = reply
    assert status is not None and started is not None and runs is not None
    return LedgerRow(
        key,
        status.decode(),
        decode_text(result),
        float(started),
        None if finished is None else float(finished),
        int(runs),
    )
