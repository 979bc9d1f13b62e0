"""Properties of the fold and of the state's JSON form."""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

import tether
from tether.events import (
    CallAttemptFailed,
    CallCompleted,
    CallStarted,
    DataUpdated,
    DecisionMade,
    Event,
    FailureRecorded,
    InputReceived,
    InputRequested,
    ObservationRecorded,
    OutputSet,
    PlanSet,
    Recorded,
    StepCompleted,
    StepStarted,
    TaskCreated,
    apply,
    fold,
)

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**53), 2**53)
    | st.text(max_size=20)
    | st.floats(allow_nan=False, allow_infinity=False),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=12,
)
names = st.sampled_from(["search", "pick", "book", "email"])


@st.composite
def call_events(draw: st.DrawFn, n: int) -> list[Event]:
    key = f"t:{n}:tool:abc"
    if draw(st.booleans()):
        return [CallCompleted(n=n, result=draw(json_values), attempt=1, duration=0.01, key=key, tool="tool", args={})]
    events: list[Event] = [CallStarted(n=n, key=key, tool="tool", args={"a": draw(json_values)}, attempt=1)]
    if draw(st.booleans()):
        events += [
            CallAttemptFailed(
                n=n, attempt=1, error_type="TimeoutError", message="slow", traceback=None, duration=0.5, backoff=0.25
            ),
            CallStarted(n=n, key=key, tool="tool", args={"a": 1}, attempt=2),
        ]
    events.append(CallCompleted(n=n, result=draw(json_values), attempt=len(events) // 2 + 1, duration=0.02))
    return events


@st.composite
def histories(draw: st.DrawFn) -> list[Recorded]:
    events: list[Event] = [TaskCreated(type="t", task_id="t", tenant="default", inputs={"x": draw(json_values)})]
    calls = 0
    for _ in range(draw(st.integers(0, 25))):
        kind = draw(st.integers(0, 8))
        if kind == 0:
            events.append(PlanSet(steps=draw(st.lists(names, max_size=4))))
        elif kind == 1:
            events.append(StepStarted(name=draw(names)))
        elif kind == 2:
            events.append(StepCompleted(name=draw(names)))
        elif kind == 3:
            calls += 1
            events += draw(call_events(calls))
        elif kind == 4:
            events.append(DecisionMade(name=draw(names), choice=draw(json_values), rationale="because"))
        elif kind == 5:
            events.append(
                ObservationRecorded(
                    key=draw(names), value=draw(json_values), source="s", as_of="2026-01-02T03:04:05+00:00"
                )
            )
        elif kind == 6:
            events.append(DataUpdated(fields={draw(names): draw(json_values)}))
        elif kind == 7:
            events += [InputRequested(key="ok", prompt="?", timeout_at=5.0), InputReceived(key="ok", value=True)]
        else:
            events += [
                OutputSet(output=draw(json_values)),
                FailureRecorded(exception_type="E", message="m", traceback="tb", input={"a": 1}),
            ]
    return [Recorded(i + 1, 1_700_000_000.0 + i * 0.25, e) for i, e in enumerate(events)]


@settings(max_examples=150, deadline=None)
@given(histories())
def test_state_survives_a_json_round_trip(history: list[Recorded]) -> None:
    state = fold(history)
    assert tether.TaskState.model_validate_json(state.model_dump_json()) == state


@settings(max_examples=150, deadline=None)
@given(histories(), st.data())
def test_fold_is_pure_and_snapshot_plus_tail_equals_whole(history: list[Recorded], data: Any) -> None:
    cut = data.draw(st.integers(1, len(history)))
    prefix = fold(history[:cut])
    frozen = copy.deepcopy(prefix.model_dump())
    whole = fold(history)
    assert fold(history[cut:], prefix) == whole
    assert prefix.model_dump() == frozen  # folding on from it changed nothing
    restored = tether.TaskState.model_validate_json(prefix.model_dump_json())
    assert fold(history[cut:], restored) == whole


@settings(max_examples=150, deadline=None)
@given(histories())
def test_one_batch_equals_one_event_at_a_time(history: list[Recorded]) -> None:
    # A batch skips building observations a later event of the batch replaces; nothing else may differ.
    state = None
    for rec in history:
        state = apply(state, rec)
    assert fold(history) == state


def test_apply_does_not_touch_its_input() -> None:
    created = apply(None, Recorded(1, 1.0, TaskCreated(type="t", task_id="t", tenant="d")))
    after = apply(created, Recorded(2, 2.0, ObservationRecorded(key="k", value=[1])))
    assert created.observations == {} and created.version == 1
    assert after.observations["k"].value == [1] and after.version == 2


def test_calls_record_attempts_and_results() -> None:
    history = [
        TaskCreated(type="t", task_id="t", tenant="d"),
        CallStarted(n=1, key="t:1:pay:h", tool="pay", args={"amount": 5}, attempt=1),
        CallAttemptFailed(
            n=1, attempt=1, error_type="TimeoutError", message="slow", traceback="tb", duration=1.0, backoff=0.5
        ),
        CallStarted(n=1, key="t:1:pay:h", tool="pay", args={"amount": 5}, attempt=2),
        CallCompleted(n=1, result={"ok": True}, attempt=2, duration=0.1),
    ]
    state = fold(Recorded(i + 1, 10.0 + i, e) for i, e in enumerate(history))
    call = state.calls[0]
    assert (call.status, call.result, len(call.attempts)) == ("completed", {"ok": True}, 2)
    assert call.attempts[0].error_type == "TimeoutError" and call.attempts[0].backoff == 0.5
    assert call.attempts[1].duration == 0.1
