"""Appends: atomic, optimistic, validated before anything is written."""

from __future__ import annotations

import pytest

import tether
from tether.events import (
    ObservationRecorded,
    OutputSet,
    PlanSet,
    StatusChanged,
    StepCompleted,
    StepStarted,
)
from tether.testing import opens_share


@pytest.fixture
def log(store_url: str) -> tether.TaskLog:
    return tether.TaskLog(store_url)


def test_create_then_append_returns_folded_state(log: tether.TaskLog) -> None:
    state = log.create(type="trip", inputs={"goal": "NYC"}, user_id="u1", session_id="s1")
    assert (state.version, state.status, state.inputs) == (1, tether.Status.PENDING, {"goal": "NYC"})
    assert log.append(state.task_id, [PlanSet(steps=["search", "book"]), StepStarted(name="search")], 1) == 3
    state = log.load(state.task_id)
    assert state.version == 3
    assert [s.status for s in state.plan] == ["running", "pending"]
    assert log.load(state.task_id) == state


def test_create_with_existing_id_conflicts(log: tether.TaskLog) -> None:
    log.create(type="trip", task_id="t-1")
    with pytest.raises(tether.ConflictError):
        log.create(type="trip", task_id="t-1")


def test_stale_expected_version_conflicts_and_writes_nothing(log: tether.TaskLog) -> None:
    state = log.create(type="trip")
    log.append(state.task_id, [OutputSet(output=1)], 1)
    with pytest.raises(tether.ConflictError) as info:
        log.append(state.task_id, [OutputSet(output=2)], 1)
    assert (info.value.expected, info.value.actual) == (1, 2)
    assert log.load(state.task_id).output == 1
    assert log.version(state.task_id) == 2


def test_future_expected_version_conflicts(log: tether.TaskLog) -> None:
    state = log.create(type="trip")
    with pytest.raises(tether.ConflictError):
        log.append(state.task_id, [OutputSet(output=2)], 5)
    assert log.version(state.task_id) == 1


def test_two_logs_racing_one_loses(store_url: str) -> None:
    if not opens_share(store_url):
        store = tether.open_store(store_url)
        a, b = tether.TaskLog(store), tether.TaskLog(store)
    else:
        a, b = tether.TaskLog(store_url), tether.TaskLog(store_url)
    state = a.create(type="trip")
    b.load(state.task_id)
    a.append(state.task_id, [OutputSet(output="a")], 1)
    with pytest.raises(tether.ConflictError):
        b.append(state.task_id, [OutputSet(output="b")], 1)
    assert b.load(state.task_id).output == "a"


def test_batch_is_all_or_nothing_on_invalid_transition(log: tether.TaskLog) -> None:
    state = log.create(type="trip")
    with pytest.raises(tether.InvalidTransition) as info:
        log.append(
            state.task_id,
            [StatusChanged(status="running"), StatusChanged(status="completed"), StatusChanged(status="running")],
            1,
        )
    assert "'completed'" in str(info.value) and "'running'" in str(info.value)
    assert log.version(state.task_id) == 1
    assert log.load(state.task_id).status is tether.Status.PENDING


def test_illegal_first_transition_names_both_states(log: tether.TaskLog) -> None:
    state = log.create(type="trip")
    with pytest.raises(tether.InvalidTransition) as info:
        log.append(state.task_id, [StatusChanged(status="completed")], 1)
    assert (info.value.current, info.value.target) == ("pending", "completed")
    assert log.version(state.task_id) == 1


def test_unserializable_payload_is_refused_before_writing(log: tether.TaskLog) -> None:
    state = log.create(type="trip")
    with pytest.raises(tether.NotSerializableError) as info:
        log.append(state.task_id, [OutputSet(output="ok"), ObservationRecorded(key="k", value={"x": {1, 2}})], 1)
    message = str(info.value)
    assert "ObservationRecorded.value" in message and "set" in message and "x" in message
    assert log.version(state.task_id) == 1


def test_unserializable_inputs_refused_at_create(log: tether.TaskLog) -> None:
    with pytest.raises(tether.NotSerializableError):
        log.create(type="trip", inputs={"when": object()})
    assert log.list() == []


def test_too_large_payload_is_refused(store_url: str) -> None:
    log = tether.TaskLog(store_url, max_event_bytes=1000)
    state = log.create(type="trip")
    with pytest.raises(tether.ValueTooLargeError, match="1,000"):
        log.append(state.task_id, [OutputSet(output="x" * 2000)], 1)
    assert log.version(state.task_id) == 1


def test_unknown_task(log: tether.TaskLog) -> None:
    with pytest.raises(tether.TaskNotFoundError, match="nope"):
        log.append("nope", [OutputSet(output=1)], 1)
    with pytest.raises(tether.TaskNotFoundError):
        log.load("nope")
    with pytest.raises(tether.TaskNotFoundError):
        log.state_at("nope", 1)


def test_not_an_event_and_empty_batch(log: tether.TaskLog) -> None:
    state = log.create(type="trip")
    with pytest.raises(tether.InvalidInputError):
        log.append(state.task_id, [], 1)
    with pytest.raises(tether.InvalidInputError, match="dict"):
        log.append(state.task_id, [{"type": "OutputSet"}], 1)  # type: ignore[list-item]
    assert log.version(state.task_id) == 1


def test_an_observation_with_an_unreadable_as_of_is_refused_before_writing(log: tether.TaskLog) -> None:
    state = log.create(type="trip")
    bad = ObservationRecorded(key="price", value=1, as_of="last tuesday")
    with pytest.raises(tether.InvalidInputError, match="ObservationRecorded"):
        log.append(state.task_id, [bad], 1)
    assert log.version(state.task_id) == 1
    good = ObservationRecorded(key="price", value=1, as_of="2026-11-24T10:00:00+00:00")
    assert log.append(state.task_id, [good], 1) == 2
    assert log.load(state.task_id).observations["price"].as_of is not None


def test_steps_and_position(log: tether.TaskLog) -> None:
    state = log.create(type="trip")
    steps = [f"s{i}" for i in range(1, 10)]
    events: list[tether.events.Event] = [PlanSet(steps=steps)]
    for name in steps[:5]:
        events += [StepStarted(name=name), StepCompleted(name=name)]
    events.append(StepStarted(name="s6"))
    log.append(state.task_id, events, 1)
    state = log.load(state.task_id)
    assert state.position == "step 6 of 9; 1–5 committed"
