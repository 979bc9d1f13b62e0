"""An event's stored JSON: every field, in the class's order, as orjson writes the dataclass itself."""

from __future__ import annotations

import dataclasses
import math

import orjson
import pytest
from pydantic import BaseModel

from tether.errors import NotSerializableError
from tether.events import EVENT_TYPES, Event
from tether.log.encoding import encode_event


class _Point(BaseModel):
    x: int


@pytest.mark.parametrize("cls", sorted(EVENT_TYPES.values(), key=lambda c: c.__name__), ids=lambda c: c.__name__)
def test_every_event_type_encodes_as_its_dataclass(cls: type[Event]) -> None:
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
