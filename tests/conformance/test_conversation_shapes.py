"""Messages in the providers' own shapes, as tether's session stream holds them: converting to an event
is pure and carries its origin, and records stored before shapes still load (the kit's
tether.testing.runtime.sessions.test_conversation_shapes checks storing and rendering them on every
backend)."""

from __future__ import annotations

import dataclasses
import time

import pytest

import tether
from tether.conversation import MessageAdded, SummaryAdded, fold_view, to_event
from tether.events import Recorded
from tether.store import EventRow, SnapshotRow


@pytest.fixture
def app(store_url: str) -> tether.App:
    return tether.App(store_url)


def test_to_event_is_pure_and_origin_is_carried(app: tether.App) -> None:
    message = {"role": "user", "content": [{"type": "text", "text": "hi"}]}
    event = to_event(message)
    assert event == to_event(message) and event.format == "openai" and event.original == message
    assert event.original is not message and event.origin is None
    marked = dataclasses.replace(event, origin="task-1:3")
    view = fold_view([Recorded(2, time.time(), marked), Recorded(3, time.time(), SummaryAdded("s", 2, 2, "task-1:4"))])
    assert view.summary is not None and view.summary.origin == "task-1:4"
    chat = app.session("s1")
    chat._stream.append([marked], chat.view().version)
    (stored,) = chat.messages()
    assert stored.origin == "task-1:3" and stored.format == "openai" and stored.original == message


def test_records_stored_before_shapes_still_load(app: tether.App) -> None:
    chat = app.session("s1")
    store, tenant = app.log.store, app.log.tenant
    old = [
        EventRow(
            2,
            "MessageAdded",
            1,
            time.time(),
            '{"role": "user", "content": "old", "tool_calls": null, "tool_call_id": null, "name": null, '
            '"meta": {"channel": "web"}}',
        ),
        EventRow(3, "SummaryAdded", 1, time.time(), '{"text": "before", "covers_from": 2, "covers_to": 2}'),
        EventRow(4, "MessageAdded", 1, time.time(), '{"role": "assistant", "content": "still here"}'),
    ]
    store.append(tenant, chat._stream.id, old, 1)
    stale = '{"session_id": "s1", "recent": [{"seq": 4, "role": "assistant", "content": "x", "at": 0, "bogus": 1}]}'
    store.put_snapshot(tenant, chat._stream.id, SnapshotRow(4, 1, tether.log.checksum(stale), stale))
    fresh = app.session("s1")
    assert [(m.content, m.format, m.meta) for m in fresh.messages()] == [
        ("old", "tether", {"channel": "web"}),
        ("still here", "tether", {}),
    ]
    assert fresh.messages()[0].original == {"role": "user", "content": "old", "channel": "web"}
    assert fresh.window(1000).to_openai() == [
        {"role": "system", "content": "Summary of the earlier conversation:\nbefore"},
        {"role": "assistant", "content": "still here"},
    ]
    assert isinstance(to_event({"role": "user", "content": "x"}), MessageAdded)
