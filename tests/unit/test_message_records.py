"""``MessageAdded`` version 2: a message in a provider's shape is stored as its shape and its original
alone (tether's role and the empty content are read from the original); records version 1 wrote
read as they did, on every backend; a tether that knows only version 1 refuses version 2's records
by name."""

from __future__ import annotations

import time
from typing import Any

import orjson
import pytest

import tether
from tether.conversation import SESSION_TYPE, Message, MessageAdded, SessionOpened, stream_id, to_event
from tether.errors import SchemaVersionError
from tether.events import DEFAULT_UPCASTERS, Upcasters
from tether.log.encoding import encode_event
from tether.log.streams import Stream
from tether.store import EventRow

ITEMS: list[dict[str, Any]] = [
    {"role": "developer", "content": "Answer in one line."},
    {"role": "user", "content": [{"type": "input_text", "text": "Where is order A-1?"}]},
    {"type": "function_call", "call_id": "c1", "name": "lookup", "arguments": '{"id": "A-1"}'},
    {"type": "function_call_output", "call_id": "c1", "output": "lost"},
    {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Lost.", "annotations": []}]},
]
ROLES = ["system", "user", "assistant", "tool", "assistant"]
"""tether's role of each item: what version 1 stored beside it."""


def _version_1(item: dict[str, Any], role: str) -> str:
    """The record version 1 wrote of ``item`` (its fields at their defaults left out, as it left them)."""
    return orjson.dumps({"role": role, "content": "", "format": "openai_responses", "original": item}).decode()


def _read(app: tether.App, session_id: str) -> list[tuple[Any, ...]]:
    return [_said(m) for m in app.session(session_id).messages()]


def _said(m: Message) -> tuple[Any, ...]:
    """What a message says (not when it was stored)."""
    return (m.seq, m.role, m.content, m.tool_calls, m.answers, m.format, m.original)


def test_a_message_in_a_providers_shape_is_stored_as_its_original_alone() -> None:
    for item in ITEMS:
        event = to_event(item, "openai_responses")
        assert orjson.loads(encode_event(event, 1 << 20)) == {"format": "openai_responses", "original": item}
    assert orjson.loads(encode_event(to_event({"role": "user", "content": "hi"}), 1 << 20)) == {
        "role": "user",
        "content": "hi",
    }  # tether's own form keeps its fields


def test_records_of_version_1_read_as_those_of_version_2(store_url: str) -> None:
    app = tether.App(store_url)
    app.session("now").add_many(ITEMS, format="openai_responses")
    app.session("before")  # made: its SessionOpened is seq 1
    rows = [
        EventRow(seq, "MessageAdded", 1, time.time(), _version_1(item, role))
        for seq, (item, role) in enumerate(zip(ITEMS, ROLES, strict=True), 2)
    ]
    app.log.store.append(app.log.tenant, stream_id("before"), rows, 1)
    assert [m[1] for m in _read(app, "before")] == ROLES
    assert _read(app, "before") == _read(app, "now")
    windows = [app.session(s).window(10_000, keep_last=0).messages for s in ("before", "now")]
    assert [_said(m) for m in windows[0]] == [_said(m) for m in windows[1]]


def test_a_log_with_upcasters_of_its_own_still_reads_version_1() -> None:
    """An application's own upcasters (``TaskLog(upcasters=...)``) do not stand in the way of tether's."""
    log = tether.TaskLog("memory://", upcasters=Upcasters())
    stream = Stream(log, stream_id("before"), SESSION_TYPE)
    stream.create(SessionOpened(session_id="before"), user_id=None, session_id="before")
    log.store.append(log.tenant, stream.id, [EventRow(2, "MessageAdded", 1, 0.0, _version_1(ITEMS[3], "tool"))], 1)
    assert stream.read(after=1)[0].event == to_event(ITEMS[3], "openai_responses")


def test_a_tether_that_knows_version_1_refuses_a_record_of_version_2(monkeypatch: pytest.MonkeyPatch) -> None:
    stored = encode_event(to_event(ITEMS[3], "openai_responses"), 1 << 20)
    monkeypatch.setattr(MessageAdded, "version", 1)
    with pytest.raises(SchemaVersionError, match="MessageAdded has schema version 2, newer than this tether knows"):
        DEFAULT_UPCASTERS.decode("MessageAdded", 2, orjson.loads(stored))
