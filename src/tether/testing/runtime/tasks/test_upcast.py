"""Records stored in an older shape are migrated on read."""

from __future__ import annotations

import orjson
import pytest

import tether
from tether.events import CancelRequested, InputReceived, ObservationRecorded, Upcasters
from tether.store import EventRow


def _store_old_observation(log: tether.TaskLog) -> str:
    state = log.create(type="chat")
    # Schema 0 of ObservationRecorded called the key "name" and had no source.
    old = orjson.dumps({"name": "price", "value": 420}).decode()
    log.store.append(log.tenant, state.task_id, [EventRow(2, "ObservationRecorded", 0, 1.0, old)], 1)
    log.forget(state.task_id)
    return state.task_id


def test_old_record_is_read_back_migrated(store_url: str) -> None:
    upcasters = Upcasters()

    @upcasters.register("ObservationRecorded", 0)
    def name_became_key(data: dict[str, object]) -> dict[str, object]:
        data = dict(data)
        data["key"] = data.pop("name")
        return data

    log = tether.TaskLog(store_url, upcasters=upcasters)
    task_id = _store_old_observation(log)
    event = log.events(task_id)[1].event
    assert event == ObservationRecorded(key="price", value=420)
    assert log.load(task_id).observations["price"].value == 420


def test_old_record_without_upcaster_names_both_versions(store_url: str) -> None:
    log = tether.TaskLog(store_url, upcasters=Upcasters())
    task_id = _store_old_observation(log)
    with pytest.raises(tether.SchemaVersionError) as info:
        log.load(task_id)
    assert (info.value.found, info.value.supported) == (0, 1)


def test_newer_record_is_refused(store_url: str) -> None:
    log = tether.TaskLog(store_url)
    state = log.create(type="chat")
    log.store.append(log.tenant, state.task_id, [EventRow(2, "OutputSet", 9, 1.0, '{"output": 1}')], 1)
    log.forget(state.task_id)
    with pytest.raises(tether.SchemaVersionError, match="upgrade tether"):
        log.load(state.task_id)


def test_unknown_event_type_is_a_clear_error(store_url: str) -> None:
    log = tether.TaskLog(store_url)
    state = log.create(type="chat")
    log.store.append(log.tenant, state.task_id, [EventRow(2, "Teleported", 1, 1.0, "{}")], 1)
    log.forget(state.task_id)
    with pytest.raises(tether.UnknownEventTypeError, match="Teleported"):
        log.load(state.task_id)


def test_events_stored_before_the_actor_field_still_load(store_url: str) -> None:
    """``actor`` came later to the write actions' events, at the same schema version: a record
    written without it loads with ``actor=None`` and reads as it did."""
    log = tether.TaskLog(store_url)
    state = log.create(type="chat")
    waiting = orjson.dumps({"key": "ok", "prompt": "go?"}).decode()
    answered = orjson.dumps({"key": "ok", "value": True}).decode()  # as stored before ``actor``
    cancelled = orjson.dumps({"reason": "changed my mind"}).decode()
    rows = [
        EventRow(2, "StatusChanged", 1, 1.0, '{"status": "running"}'),
        EventRow(3, "InputRequested", 1, 1.0, waiting),
        EventRow(4, "InputReceived", 1, 1.0, answered),
        EventRow(5, "CancelRequested", 1, 1.0, cancelled),
    ]
    log.store.append(log.tenant, state.task_id, rows, 1)
    log.forget(state.task_id)
    events = [r.event for r in log.events(state.task_id)]
    assert events[3] == InputReceived(key="ok", value=True) and events[3].actor is None
    assert events[4] == CancelRequested(reason="changed my mind") and events[4].actor is None
    loaded = log.load(state.task_id)
    assert loaded.received == {"ok": True} and loaded.cancel_reason == "changed my mind"
    assert [h.summary for h in tether.App(log.store).history(state.task_id)][-2:] == [
        "received 'ok' = true",
        "cancellation requested: changed my mind",
    ]
