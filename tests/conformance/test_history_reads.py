"""A history read in one pass (``app.history``, the CLI's and the API's) gives what decoding each
stored row on its own gives, for every event type on every backend; a row that cannot be read is
named, as one read alone names it."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

import tether

# Each registers event types of its own: the samples cover them too.
import tether.conversation.messages
import tether.integrations._langgraph_log
import tether.serve.keys
import tether.userstate
from tether.events import (
    EVENT_TYPES,
    CallCompleted,
    CallStarted,
    Event,
    ObservationRecorded,
    SessionWritten,
    StepCompleted,
    StepStarted,
)
from tether.store import EventRow
from tether.timetravel import HistoryCursor

GOLDEN = Path(__file__).parent.parent / "fixtures" / "history_summaries.json"
"""What tether before the one-pass read (b60f4de) said of :func:`samples` in a history, with the
lines since given to the event types that had none (their ``Event.describe``):
``[type, summary, step, boundary]`` per entry, the task's first event first."""


def _value(annotation: str, name: str, full: bool) -> Any:
    """A value for a field of this annotation: long enough to be cut short in a summary."""
    if annotation.endswith(" | None") and not full:
        return None
    base = annotation.removesuffix(" | None")
    if base.startswith("dict"):
        return {"k": "v " * 40, "n": 2}
    if base == "list[int]":
        return [1, 2]
    if base == "list[str]":
        return ["a", "b"]
    if base.startswith("list"):
        return [["a", 1], {"k": "v"}]
    return {"str": f"{name}: " + "word " * 14, "int": 3, "float": 1.25, "bool": True}.get(base, {"é": "any " * 20})


def samples() -> list[Event]:
    """Every registered event type, with its optional fields set and with them left out, and
    the cases whose summaries branch on a value."""
    events: list[Event] = []
    for name in sorted(EVENT_TYPES):
        cls = EVENT_TYPES[name]
        for full in (True, False):
            kwargs = {
                f.name: _value(str(f.type), f.name, full)
                for f in dataclasses.fields(cls)  # type: ignore[arg-type]
                if full or (f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING)
            }
            events.append(cls(**kwargs))
    events += [
        CallStarted(n=1, key="k", tool="undo", args={}, attempt=1, kind="compensation", compensates=2),
        CallCompleted(n=1, result="short", attempt=1, duration=0.5, tool=None),
        SessionWritten(session_id="s", s=1, first=3, last=2, roles=[]),
        SessionWritten(session_id="s", s=1, first=3, last=5, roles=["user", "assistant"]),
    ]
    return events


def _stored(app: tether.App, events: list[Event]) -> str:
    task_id = app.log.create(type="samples", task_id="samples").task_id
    rows = [
        EventRow(i + 2, type(e).__name__, type(e).version, 1_800_000_000.0 + i / 7, app.log.encode(e))
        for i, e in enumerate(events)
    ]
    app.store.append(app.tenant, task_id, rows, 1)
    return task_id


def _golden(history: list[tether.HistoryEntry]) -> list[list[Any]]:
    expected: list[list[Any]] = json.loads(GOLDEN.read_text(encoding="utf-8"))
    assert len(history) == len(expected)
    return expected  # times in UTC, whatever the machine's zone: the same words everywhere


def test_history_equals_each_row_decoded_alone_for_every_event_type(store_url: str) -> None:
    app = tether.App(store_url)
    events = samples()
    assert {type(e) for e in events} == set(EVENT_TYPES.values())
    task_id = _stored(app, events)
    history = app.history(task_id)
    alone = [app.log.decode(row) for row in app.store.read_events(app.tenant, task_id)]
    assert [h.event for h in history] == [r.event for r in alone] == [alone[0].event, *events]
    assert [(h.seq, h.at, h.type) for h in history] == [(r.seq, r.time, r.event.event_type) for r in alone]
    assert [[h.type, h.summary, h.step, h.boundary] for h in history] == _golden(history)
    built = [tether.HistoryEntry(**{f.name: getattr(h, f.name) for f in dataclasses.fields(h)}) for h in history]
    assert history == built


def test_a_fork_reads_its_parents_history_then_its_own(store_url: str) -> None:
    app = tether.App(store_url)
    state = app.log.create(type="chat", task_id="parent")
    app.log.append("parent", [ObservationRecorded(key=f"k{i}", value=i) for i in range(5)], state.version)
    app.log.fork("parent", 4, new_id="fork")
    parent, forked = app.history("parent"), app.history("fork")
    assert [(h.seq, h.summary) for h in forked[:4]] == [(h.seq, h.summary) for h in parent[:4]]
    assert [h.type for h in forked[4:]] == ["TaskForked"]


def test_the_api_body_of_every_event_type_is_its_fields_as_json(store_url: str) -> None:
    from tether.serve._json import entries_json, jsonable, utc

    app = tether.App(store_url)
    history = app.history(_stored(app, samples()))
    bodies = entries_json(history)
    for entry, body in zip(history, bodies, strict=True):
        data = entry.event.to_dict()
        assert body == {
            "seq": entry.seq,
            "at": utc(entry.at),  # UTC with its offset, as every time the API writes
            "type": entry.type,
            "summary": entry.summary,
            "actor": data.get("actor"),
            "step": entry.step,
            "boundary": entry.boundary,
            "data": jsonable(data),
        }


@pytest.mark.parametrize(
    ("data", "error", "match"),
    [
        ('{"outcome": 1}', tether.UnknownEventTypeError, r"stored OutputSet \(schema 1\) does not match its class"),
        ("[1, 2]", tether.UnknownEventTypeError, r"stored OutputSet \(schema 1\) does not match its class"),
        ("{not json", tether.InvalidInputError, r"event #3 \(OutputSet\) holds invalid JSON"),
    ],
)
def test_a_row_that_cannot_be_read_is_named(store_url: str, data: str, error: type[Exception], match: str) -> None:
    if data == "{not json" and store_url.startswith("postgresql"):
        pytest.skip("PostgreSQL keeps events as jsonb: it refuses invalid JSON on the way in")
    app = tether.App(store_url)
    task_id = app.log.create(type="chat").task_id
    rows = [EventRow(2, "OutputSet", 1, 1.0, '{"output": 1}'), EventRow(3, "OutputSet", 1, 1.0, data)]
    app.store.append(app.tenant, task_id, rows, 1)
    _, good, bad = app.history(task_id)  # listing reads the rows; an entry decodes its own when read
    assert (good.type, good.summary, bad.type, bad.seq) == ("OutputSet", "output 1", "OutputSet", 3)
    for read in ("event", "summary"):
        with pytest.raises(error, match=match):
            getattr(bad, read)
    with pytest.raises(error, match=match):
        app.log.events(task_id)


def test_upcasters_that_read_every_record_themselves_read_the_history_too(store_url: str) -> None:
    class Loud(tether.events.Upcasters):
        def decode(self, type_name: str, version: int, data: dict[str, Any]) -> Event:
            if type_name == "ObservationRecorded":
                data = {**data, "key": data["key"].upper()}
            return super().decode(type_name, version, data)

    app = tether.App(store_url)
    state = app.log.create(type="chat", task_id="loud")
    app.log.append("loud", [ObservationRecorded(key="price", value=3)], state.version)
    app.log.upcasters = Loud()
    assert app.log.events("loud")[-1].event.key == "PRICE"  # type: ignore[attr-defined]
    entry = app.history("loud")[-1]
    assert entry.summary == "observed PRICE = 3" and entry.event.key == "PRICE"  # type: ignore[attr-defined]


def test_a_cursor_reads_what_is_new_and_carries_the_open_step_over(
    store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = tether.App(store_url)
    state = app.log.create(type="chat", task_id="t")
    version = app.log.append("t", [StepStarted(name="a"), ObservationRecorded(key="k", value=1)], state.version)
    reads: list[int] = []
    read_events = app.store.read_events

    def spied(*args: Any, **kwargs: Any) -> Any:
        reads.append(kwargs.get("after", 0))
        return read_events(*args, **kwargs)

    monkeypatch.setattr(app.store, "read_events", spied)
    cursor = HistoryCursor("t", after=2)
    first = cursor.read(app.log)
    assert [(e.seq, e.step, e.boundary) for e in first] == [(3, "a", None)] and cursor.read(app.log) == []
    more = [ObservationRecorded(key="k", value=2), StepCompleted(name="a"), StepStarted(name="b")]
    app.log.append("t", more, version)
    second = cursor.read(app.log)
    assert [(e.seq, e.step, e.boundary) for e in second] == [
        (4, "a", None),
        (5, "a", "after step 1"),
        (6, "b", "before step 2"),
    ]
    assert reads == [0, 2, 2]  # the whole history once, then only from the last row read on
    whole = app.history("t")
    assert first + second == whole[2:] and [e.summary for e in second] == [e.summary for e in whole[3:]]
    app.log.fork("t", 5, new_id="fork")  # a fork's cursor reads its parent's part, then its own
    assert [(e.seq, e.type, e.step) for e in HistoryCursor("fork", after=4).read(app.log)] == [
        (5, "StepCompleted", "a"),
        (6, "TaskForked", None),
    ]


def test_a_cursor_starts_over_when_the_history_is_replaced(store_url: str) -> None:
    app = tether.App(store_url)
    version = app.log.create(type="chat", task_id="t").version
    steps = [StepStarted(name="a"), ObservationRecorded(key="k", value=1), StepCompleted(name="a")]
    version = app.log.append("t", [*steps, StepStarted(name="b"), ObservationRecorded(key="k", value=2)], version)
    cursor = HistoryCursor("t")
    assert len(cursor.read(app.log)) == 6 and not cursor.replaced
    version = app.log.rewind("t", 3, archive_id="t~1").version  # step "a" open again, step "b" gone
    app.log.append("t", [ObservationRecorded(key="k", value=3), StepCompleted(name="a")], version)
    again = cursor.read(app.log)
    assert cursor.replaced and again == app.history("t")  # the whole new history, its steps its own
    marks = [(e.seq, e.step, e.boundary) for e in again[3:]]
    assert marks == [(4, "a", None), (5, "a", None), (6, "a", "after step 1")]
    assert cursor.read(app.log) == [] and not cursor.replaced
    app.store.delete_task(app.tenant, "t")  # and made again under its id: as long a history, its own
    version = app.log.create(type="chat", task_id="t").version
    app.log.append("t", [ObservationRecorded(key="other", value=i) for i in range(5)], version)
    assert cursor.read(app.log) == app.history("t") and cursor.replaced


def test_a_cursor_tells_a_history_made_again_in_the_same_instant(store_url: str, monkeypatch: Any) -> None:
    """Under a frozen clock (a test's), a task deleted and made again has rows at the same times:
    the last row read is told from its namesake by what it says too, not by its seq, type and time."""
    import time

    monkeypatch.setattr(time, "time", lambda: 1_000_000.0)
    app = tether.App(store_url)
    version = app.log.create(type="chat", task_id="t").version
    app.log.append("t", [ObservationRecorded(key="k", value=1)], version)
    cursor = HistoryCursor("t")
    assert len(cursor.read(app.log)) == 2
    app.store.delete_task(app.tenant, "t")
    version = app.log.create(type="chat", task_id="t", inputs={"q": "new"}).version
    app.log.append("t", [ObservationRecorded(key="k", value=2)], version)
    assert cursor.read(app.log) == app.history("t") and cursor.replaced
