"""An event's stored JSON: its fields in the class's order, as orjson writes the dataclass itself,
less those at their declared default; records that carry every field (as tether stored them
before) read alike."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import MISSING
from pathlib import Path

import orjson
import pytest
from pydantic import BaseModel

from tether.errors import NotSerializableError
from tether.events import (
    DEFAULT_UPCASTERS,
    EVENT_TYPES,
    CallStarted,
    Event,
    InputRequested,
    RetryRequested,
    SessionWritten,
)
from tether.log.encoding import decode_row, decode_rows, encode_event
from tether.store import EventRow


class _Point(BaseModel):
    x: int


@pytest.mark.parametrize("cls", sorted(EVENT_TYPES.values(), key=lambda c: c.__name__), ids=lambda c: c.__name__)
def test_every_event_type_encodes_as_its_dataclass(cls: type[Event]) -> None:
    """With no field at its default, every field is stored."""
    names = [f.name for f in dataclasses.fields(cls)]  # type: ignore[arg-type]
    values = [{"i": i, "nested": [None, 1.5, "text"]} for i in range(len(names))]
    event = cls(**dict(zip(names, values, strict=True)))
    data = encode_event(event, 1 << 20)
    assert data == orjson.dumps(event).decode()
    assert list(orjson.loads(data)) == names  # every field, in the class's order


def test_a_model_inside_an_event_is_stored_as_its_json_and_an_unknown_object_is_refused() -> None:
    cls = EVENT_TYPES["ObservationRecorded"]
    assert orjson.loads(encode_event(cls(key="p", value=_Point(x=3)), 1 << 20))["value"] == {"x": 3}
    with pytest.raises(NotSerializableError, match=r"ObservationRecorded\.value"):
        encode_event(cls(key="p", value=object()), 1 << 20)


@pytest.mark.parametrize("cls", sorted(EVENT_TYPES.values(), key=lambda c: c.__name__), ids=lambda c: c.__name__)
@pytest.mark.parametrize("number", [math.nan, math.inf, -math.inf])
def test_a_nan_or_infinity_is_refused_beside_none_fields(cls: type[Event], number: float) -> None:
    """orjson writes a NaN as ``null``, as it writes a None field: the refusal must not take one for the
    other, whichever field holds the number and however many others are None."""
    names = [f.name for f in dataclasses.fields(cls)]  # type: ignore[arg-type]
    for name in names:
        for nested in (number, {"deep": [None, number]}):
            event = cls(**{other: None for other in names} | {name: nested})
            with pytest.raises(NotSerializableError, match=name):
                encode_event(event, 1 << 20)


def test_none_fields_and_the_word_null_are_stored() -> None:
    cls = EVENT_TYPES["CallCompleted"]
    event = cls(n=1, result={"text": "null and void", "none": None}, attempt=1, duration=0.5)
    assert orjson.loads(encode_event(event, 1 << 20))["result"] == {"text": "null and void", "none": None}


GOLDEN = Path(__file__).parent.parent / "fixtures" / "events_with_every_field.json"
"""Records as tether stored them before it left out fields at their defaults (every field, as orjson
writes the dataclass): a task with calls readonly and not, a retried attempt, a wait and its answer, a
failure and the compensation it ran; a conversation in tether's shape and a provider's."""


def _decoded(row: EventRow) -> Event:
    """The event of ``row``, read both ways the log reads one; they agree."""
    fast = decode_rows([row], lambda r: decode_row(r, DEFAULT_UPCASTERS))[0].event
    assert decode_row(row, DEFAULT_UPCASTERS).event == fast
    return fast


def _required(cls: type[Event]) -> list[str]:
    return [f.name for f in dataclasses.fields(cls) if f.default is MISSING and f.default_factory is MISSING]  # type: ignore[arg-type]


@pytest.mark.parametrize("cls", sorted(EVENT_TYPES.values(), key=lambda c: c.__name__), ids=lambda c: c.__name__)
def test_fields_at_their_default_are_left_out_and_read_back(cls: type[Event]) -> None:
    """Each event type: with its defaults as they are, only the fields without one are stored, and
    the record reads back as the event."""
    event = cls(**{name: {"i": i} for i, name in enumerate(_required(cls))})
    data = encode_event(event, 1 << 20)
    assert list(orjson.loads(data)) == _required(cls)
    assert _decoded(EventRow(1, cls.event_type, cls.version, 0.0, data, None)) == event


def test_only_the_defaults_own_value_of_its_own_type_is_left_out() -> None:
    """``0`` for a default ``False`` would read back as ``False``: stored. So is a non-empty list where
    the default is an empty one, and any value but the default's."""
    cases = [
        (InputRequested(key="k", again=False), {"key": "k"}),
        (InputRequested(key="k", again=0), {"key": "k", "again": 0}),  # type: ignore[arg-type]
        (InputRequested(key="k", timeout_at=0.0), {"key": "k", "timeout_at": 0.0}),
        (
            RetryRequested(failure_type="E", failure_message="m", after_n=0),
            {"failure_type": "E", "failure_message": "m"},
        ),
        (
            RetryRequested(failure_type="E", failure_message="m", after_n=False, shift=2),  # type: ignore[arg-type]
            {"failure_type": "E", "failure_message": "m", "after_n": False, "shift": 2},
        ),
        (
            CallStarted(n=1, key="k", tool="t", args={}, attempt=1, kind="call"),
            {"n": 1, "key": "k", "tool": "t", "args": {}, "attempt": 1},
        ),
        (CallStarted(n=1, key="k", tool="t", args={}, attempt=1, kind="compensation", compensates=0), None),
        (
            SessionWritten(s=1, session_id="s", first=1, last=2, roles=[]),
            {"s": 1, "session_id": "s", "first": 1, "last": 2},
        ),
        (SessionWritten(s=1, session_id="s", first=1, last=2, roles=["user"]), None),
    ]
    for event, stored in cases:
        data = encode_event(event, 1 << 20)
        assert orjson.loads(data) == (stored if stored is not None else event.to_dict())
        back = _decoded(EventRow(1, event.event_type, event.version, 0.0, data, None))
        assert back == event and all(type(getattr(back, k)) is type(v) for k, v in event.to_dict().items())


def test_records_stored_with_every_field_read_as_before() -> None:
    """Each golden record decodes to the event whose every-field JSON it is; stored again now, it
    leaves out only fields at their defaults, reads back as the same event, and is shorter."""
    old_bytes = new_bytes = 0
    for _, seq, type_name, schema, at, data in orjson.loads(GOLDEN.read_bytes()):
        event = _decoded(EventRow(seq, type_name, schema, at, data, None))
        every = orjson.loads(data)
        if type_name == "MessageAdded" and every["format"] is not None:
            every["role"] = ""  # version 2 reads a provider's shape's role from the original
        assert orjson.loads(orjson.dumps(event)) == every  # the golden row is the event, every field
        again = encode_event(event, 1 << 20)
        left_out = set(orjson.loads(data)) - set(orjson.loads(again))
        defaults = {f.name: f for f in dataclasses.fields(event)}  # type: ignore[arg-type]
        assert all(
            defaults[name].default is not MISSING or defaults[name].default_factory is not MISSING for name in left_out
        )
        assert _decoded(EventRow(seq, type_name, type(event).version, at, again, None)) == event
        old_bytes, new_bytes = old_bytes + len(data), new_bytes + len(again)
    assert new_bytes < 0.8 * old_bytes, (new_bytes, old_bytes)
