"""What an event must be to be written: its stored JSON (its fields but those at their default;
refusing what JSON cannot hold, by name) and the cheap checks that let the log fold call events
lazily."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import MISSING, Field, fields
from datetime import datetime
from typing import TYPE_CHECKING, Any

import orjson

from tether.canonical import MAX_DEPTH, check_finite, json_default, unserializable_reason
from tether.errors import InvalidInputError, NotSerializableError, ValueTooLargeError
from tether.events import (
    CALL_EVENTS,
    EVENT_TYPES,
    CallAttemptFailed,
    CallCompleted,
    CallFailed,
    CallStarted,
    DataUpdated,
    DecisionMade,
    Event,
    InputReceived,
    ObservationRecorded,
    OutputSet,
    PatchMarked,
    Recorded,
    SessionRead,
    SessionWritten,
    StatusChanged,
    StepCompleted,
    StepFailed,
    StepStarted,
)

if TYPE_CHECKING:
    from tether.events import Upcasters
    from tether.log.memory import Opened
    from tether.store import EventRow

__all__ = ["DEFERRED", "checked", "decode_row", "decode_rows", "encode_event", "event_fields"]


_Reader = Callable[[Event], dict[str, Any]]
_Readers = tuple[_Reader, _Reader, Callable[[Event], int]]


def _field_reader(cls: type[Event]) -> _Readers:
    """Three functions of an event of ``cls``: the dict of all its fields, in their order (what orjson
    writes for the dataclass itself, without its dataclass path: that looks for a ``__dict__`` a
    slotted event has not, and reads the fields one by one, before it writes them); the dict it is
    stored as, those fields less the ones at their declared default (see :func:`_omitted_when`); and
    how many of the stored fields are ``None``."""
    names = [f.name for f in fields(cls)]  # type: ignore[arg-type]
    # Names are the dataclass's own fields (identifiers), so the generated source is theirs alone; a
    # default is compared as a value of the namespace, never written into the source.
    every: _Reader = eval("lambda e: {" + ", ".join(f"{name!r}: e.{name}" for name in names) + "}", {})
    namespace: dict[str, Any] = {}
    leading: list[str] = []  # the fields always stored before the first that may be left out: one literal
    body: list[str] = []
    counted: list[str] = []
    for i, f in enumerate(fields(cls)):  # type: ignore[arg-type]
        condition = _omitted_when(f, f"d{i}", namespace)
        if condition is None and not body:
            leading.append(f"{f.name!r}: e.{f.name}")
        elif condition is None:
            body.append(f"    d[{f.name!r}] = e.{f.name}")
        else:
            body += [f"    v = e.{f.name}", f"    if not ({condition}):", f"        d[{f.name!r}] = v"]
        if condition != "v is None":  # a None there is stored, as ``null``
            counted.append(f"(e.{f.name} is None)")
    source = ["def stored(e):", "    d = {" + ", ".join(leading) + "}", *body, "    return d"]
    exec("\n".join(source), namespace)
    nones: Callable[[Event], int] = eval(f"lambda e: {' + '.join(counted) or '0'}", {})
    return every, namespace["stored"], nones


def _omitted_when(f: Field[Any], name: str, namespace: dict[str, Any]) -> str | None:
    """The condition on a field's value ``v`` under which it is left out of the stored record, because
    decoding gives that very value back from the field's declared default (``namespace[name]``: what
    the condition compares with); ``None`` for a field always stored. Only a value of the default's
    own type counts (``1`` is stored beside a default ``True``, ``False`` beside ``0``), of a
    container only the empty one its factory (``list``, ``dict``) makes, and a float never (``-0.0``
    equals ``0.0``, and would read back as it)."""
    default = f.default
    if default is MISSING:
        if f.default_factory is list or f.default_factory is dict:
            namespace[name] = f.default_factory
            return f"v.__class__ is {name} and not v"
        return None
    if default is None:
        return "v is None"
    if type(default) is bool:
        return f"v is {default}"
    if type(default) in (int, str):
        namespace[name], namespace[name + "t"] = default, type(default)
        return f"v.__class__ is {name}t and v == {name}"
    return None


class _ByClass(dict[type[Event], _Readers]):
    """Each event class's readers, made when first asked for (``_READERS[cls]``: no call in Python)."""

    def __missing__(self, cls: type[Event]) -> _Readers:
        found = self[cls] = _field_reader(cls)
        return found


_READERS = _ByClass()


def event_fields(event: Event) -> dict[str, Any]:
    """The dict of an event's fields, in their order (what ``Event.to_dict`` gives, faster)."""
    fields_of, _, _ = _READERS[type(event)]
    return fields_of(event)


def encode_event(event: Event, max_bytes: int) -> str:
    """The stored JSON of an event: its fields but those at their declared default, which decoding
    gives back (so a record written with every field, as tether wrote them before, decodes alike);
    raises before anything is written if it cannot be stored."""
    _, reader, nones = _READERS[type(event)]
    try:
        data = orjson.dumps(reader(event), default=json_default)
    except TypeError as exc:
        raise NotSerializableError(_explain_unserializable(event, exc)) from None
    # orjson writes a NaN or an infinity as ``null``: refuse them, by name. Each field that is None
    # stored writes one ``null`` too, and anything else that reads "null" (a nested None, a word in a
    # text) only adds to the count: as many as the None fields stored means none of them is a number.
    # (``count``, not ``in``: ``bytes.__contains__`` tries its operand as an int first, and raises and
    # clears a TypeError each time.)
    nulls = data.count(b"null")
    if nulls and nulls != nones(event):
        check_finite(event, type(event).__name__)
    if len(data) > max_bytes:
        raise ValueTooLargeError(
            f"{type(event).__name__} encodes to {len(data):,} bytes, over the limit of {max_bytes:,} (max_event_bytes)"
        )
    return data.decode()


# Events whose fold cannot fail once these cheap checks pass, or (a status move) once the head's
# light state has taken it (``heads.LIGHT``): appends of them are folded lazily. Every other event
# (phase moves, plans, a cancel, a retry) is folded before it is written.
DEFERRED: dict[type[Event], Callable[[Any], bool]] = {
    CallStarted: lambda e: isinstance(e.key, str) and isinstance(e.tool, str) and isinstance(e.args, dict),
    CallCompleted: lambda e: e.key is None or (isinstance(e.key, str) and isinstance(e.args, dict)),
    CallAttemptFailed: lambda e: isinstance(e.error_type, str),
    CallFailed: lambda e: True,
    ObservationRecorded: lambda e: isinstance(e.key, str) and (e.as_of is None or _iso(e.as_of)),
    DecisionMade: lambda e: isinstance(e.name, str),
    DataUpdated: lambda e: isinstance(e.fields, dict),
    StepStarted: lambda e: isinstance(e.name, str),
    StepCompleted: lambda e: isinstance(e.name, str),
    StepFailed: lambda e: isinstance(e.name, str),
    InputReceived: lambda e: isinstance(e.key, str),
    OutputSet: lambda e: True,
    StatusChanged: lambda e: isinstance(e.status, str),
    PatchMarked: lambda e: isinstance(e.name, str),
    SessionRead: lambda e: isinstance(e.session_id, str) and type(e.upto) is int and type(e.s) is int,
    SessionWritten: lambda e: isinstance(e.session_id, str) and type(e.first) is int and type(e.last) is int,
}


def _iso(value: Any) -> bool:
    """Whether ``value`` is an ISO 8601 timestamp the fold can read."""
    if not isinstance(value, str):
        return False
    try:
        datetime.fromisoformat(value)
    except ValueError:
        return False
    return True


def checked(task_id: str, event: Event, opened: Opened, opening: set[int]) -> bool:
    """Check an event whose fold is deferred; for a call event, whether its call was opened before it
    (``False`` for any other event). A call event is checked against the calls opened so far: a call
    is opened once (by its intent, or a readonly call's completion), under any unused ordinal
    (parallel calls open in the order they finish); every other call event refers to an opened call."""
    cls = type(event)
    if not DEFERRED[cls](event):
        raise InvalidInputError(f"{cls.__name__} has a field of the wrong type: {event!r}")
    if cls not in CALL_EVENTS:
        return False
    n = event.n  # type: ignore[attr-defined]
    if type(n) is not int or n < 1:
        raise InvalidInputError(f"{cls.__name__} has call ordinal {n!r}; ordinals are integers from 1")
    known = n in opening or opened.has(n)
    if cls is CallStarted:
        opening.add(n)  # a new call, or the next attempt of an open one
    elif cls is CallCompleted and event.key is not None:  # type: ignore[attr-defined]
        if known:
            raise InvalidInputError(f"CallCompleted opens call #{n} of task {task_id!r}, which is already open")
        opening.add(n)
    elif not known:
        raise InvalidInputError(f"{cls.__name__} refers to call #{n}, but task {task_id!r} has no such call")
    return known


def _explain_unserializable(event: Event, exc: Exception) -> str:
    if "Recursion limit" in str(exc):
        return f"{type(event).__name__} cannot be stored as JSON: {unserializable_reason(exc)}"
    for f in fields(event):  # type: ignore[arg-type]
        value = getattr(event, f.name)
        try:
            orjson.dumps(value, default=json_default)
        except TypeError:
            return f"{type(event).__name__}.{f.name} cannot be stored as JSON: {_describe_bad_value(value)} ({exc})"
    return f"{type(event).__name__} cannot be stored as JSON: {exc}"


def _describe_bad_value(value: Any, path: str = "", depth: int = 0) -> str:
    if depth > MAX_DEPTH:
        return f"a value nested more than {MAX_DEPTH} levels deep at {path}"
    if isinstance(value, dict):
        for k, v in value.items():
            if not isinstance(k, str):
                return f"key {k!r} at {path or 'top level'} is a {type(k).__name__}, not a string"
            try:
                orjson.dumps(v, default=json_default)
            except TypeError:
                return _describe_bad_value(v, f"{path}.{k}" if path else str(k), depth + 1)
    if isinstance(value, list | tuple):
        for i, v in enumerate(value):
            try:
                orjson.dumps(v, default=json_default)
            except TypeError:
                return _describe_bad_value(v, f"{path}[{i}]", depth + 1)
    return f"value of type {type(value).__name__} at {path or 'top level'}"


def decode_row(row: EventRow, upcasters: Upcasters) -> Recorded:
    """One row's record, migrated by ``upcasters``; a row of invalid JSON is named by its seq and type."""
    try:
        data = orjson.loads(row.data)
    except orjson.JSONDecodeError as exc:
        raise InvalidInputError(f"event #{row.seq} ({row.type}) holds invalid JSON: {exc}") from None
    return Recorded(row.seq, row.at, upcasters.decode(row.type, row.schema, data))


def decode_rows(rows: Iterable[EventRow], decode: Callable[[EventRow], Recorded]) -> list[Recorded]:
    """Each row's record, in one pass: one stored in its type's current shape (nearly all) is built
    from its JSON straight away; any other goes through ``decode`` (the log's, with its upcasters),
    which migrates it, or names what is wrong with it (a record its class refuses, invalid JSON)."""
    classes = EVENT_TYPES
    loads = orjson.loads
    new = tuple.__new__  # a Recorded without its Python-level __new__
    records: list[Recorded] = []
    append = records.append
    for row in rows:
        seq, type_name, schema, at, data, _ = row
        cls = classes.get(type_name)
        if cls is not None and cls.version == schema:
            try:
                append(new(Recorded, (seq, at, cls(**loads(data)))))
                continue
            except (orjson.JSONDecodeError, TypeError):
                pass  # decode names the row and what is wrong with it
        append(decode(row))
    return records
