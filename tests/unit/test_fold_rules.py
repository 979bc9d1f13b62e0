"""One fold test per event type — and a test that fails when an event type is added without one."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tether import events
from tether.events import (
    _RULES,
    CallAttemptFailed,
    CallCompleted,
    CallFailed,
    CallInDoubt,
    CallStarted,
    CancelRequested,
    DataMigrated,
    DataUpdated,
    DecisionMade,
    Event,
    FailureRecorded,
    InputReceived,
    InputRejected,
    InputRequested,
    InputTimedOut,
    ObservationRecorded,
    OutputSet,
    PatchMarked,
    PhaseChanged,
    PlanSet,
    Recorded,
    RetryRequested,
    RunTraced,
    SessionRead,
    SessionWritten,
    SleepScheduled,
    StatusChanged,
    StepCompleted,
    StepFailed,
    StepStarted,
    TaskArchived,
    TaskCreated,
    TaskForked,
    UsageRecorded,
    fold,
)
from tether.model import TaskState
from tether.model.status import Status


def state_after(*events: Event, phases: dict[str, list[str]] | None = None) -> TaskState:
    created = TaskCreated(type="t", task_id="t1", tenant="default", phases=phases, phase="a" if phases else None)
    records = [Recorded(i, 1_000.0 + i, e) for i, e in enumerate([created, *events], start=1)]
    return fold(records)


RUNNING = StatusChanged(status="running")
FAILED_CALL = [
    CallStarted(n=1, key="k1", tool="pay", args={"x": 1}, attempt=1),
    CallAttemptFailed(n=1, attempt=1, error_type="ValueError", message="no", traceback=None, duration=0.1),
    CallFailed(n=1, reason="no attempts left"),
]
FAILURE = FailureRecorded(exception_type="ValueError", message="no", tool="pay", call_key="k1")

# event type -> (events leading up to it and the event, what the state must show afterwards)
EXAMPLES: dict[type[Event], tuple[list[Event], Callable[[TaskState], bool]]] = {
    StatusChanged: ([RUNNING], lambda s: s.status is Status.RUNNING),
    PlanSet: ([PlanSet(steps=["a", "b"])], lambda s: [p.name for p in s.plan] == ["a", "b"]),
    StepStarted: ([StepStarted(name="a")], lambda s: s.plan[0].status == "running"),
    StepCompleted: ([StepStarted(name="a"), StepCompleted(name="a")], lambda s: s.plan[0].status == "completed"),
    StepFailed: ([StepStarted(name="a"), StepFailed(name="a", error="boom")], lambda s: s.plan[0].error == "boom"),
    CallStarted: (FAILED_CALL[:1], lambda s: s.call(1) is not None and s.call(1).status == "intended"),
    CallCompleted: (
        [*FAILED_CALL[:1], CallCompleted(n=1, result={"ok": 1}, attempt=1, duration=0.1)],
        lambda s: s.call(1).status == "completed" and s.call(1).result == {"ok": 1},
    ),
    CallAttemptFailed: (FAILED_CALL[:2], lambda s: s.call(1).attempts[0].error_type == "ValueError"),
    CallFailed: (FAILED_CALL, lambda s: s.call(1).status == "failed"),
    DecisionMade: (
        [DecisionMade(name="flight", choice="BA117", rationale="cheapest")],
        lambda s: s.decisions[0].choice == "BA117",
    ),
    ObservationRecorded: (
        [ObservationRecorded(key="price", value=420, source="quote")],
        lambda s: s.observations["price"].value == 420,
    ),
    DataUpdated: ([DataUpdated(fields={"n": 2})], lambda s: s.data == {"n": 2}),
    DataMigrated: ([DataMigrated(data={"n": 3}, from_version=1, to_version=2)], lambda s: s.data_version == 2),
    InputRequested: ([InputRequested(key="ok", prompt="sure?")], lambda s: s.waiting is not None),
    # A call in doubt leaves the task waiting on the call's own key, with what to do in the prompt.
    CallInDoubt: (
        [RUNNING, *FAILED_CALL[:1], CallInDoubt(n=1, key="t1:1:pay:x", tool="pay")],
        lambda s: s.waiting is not None
        and s.waiting.key == "tether.call-1"
        and "t1:1:pay:x" in (s.waiting.prompt or "")
        and "--not-happened" in (s.waiting.prompt or ""),
    ),
    # An answer clears the matching wait (and only that one).
    InputReceived: (
        [InputRequested(key="ok"), InputReceived(key="ok", value=True)],
        lambda s: s.waiting is None and s.received == {"ok": True},
    ),
    InputRejected: (
        [InputReceived(key="ok", value="maybe"), InputRequested(key="ok"), InputRejected(key="ok", reason="bad")],
        lambda s: "ok" not in s.received and s.waiting is not None,
    ),
    InputTimedOut: ([InputRequested(key="ok"), InputTimedOut(key="ok")], lambda s: s.waiting is None),
    # The wake-up time goes on the status change that suspends the task, not on the plan to sleep.
    SleepScheduled: (
        [RUNNING, SleepScheduled(until=2_000.0)],
        lambda s: s.wake_at is None and s.status is Status.RUNNING and s.version == 3,
    ),
    CancelRequested: ([CancelRequested(reason="user")], lambda s: s.cancel_reason == "user"),
    PhaseChanged: ([PhaseChanged(phase="b")], lambda s: s.phase == "b"),
    OutputSet: ([OutputSet(output=[1, 2])], lambda s: s.output == [1, 2]),
    FailureRecorded: ([*FAILED_CALL, FAILURE], lambda s: s.failure is not None and s.failure.tool == "pay"),
    # A fork does not inherit its parent's failure (or output, or status).
    TaskForked: (
        [
            RUNNING,
            *FAILED_CALL,
            FAILURE,
            StatusChanged(status="failed"),
            TaskForked(task_id="f1", parent_task_id="t1", at=5),
        ],
        lambda s: s.task_id == "f1" and s.failure is None and s.status is Status.PENDING and s.parent is not None,
    ),
    TaskArchived: ([TaskArchived(task_id="t1~1", successor="t1")], lambda s: s.superseded_by == "t1"),
    SessionRead: (
        [SessionRead(s=1, session_id="chat", upto=4)],
        lambda s: (s.session_id, s.session_version) == ("chat", 4),
    ),
    SessionWritten: (
        [StepStarted(name="a"), SessionWritten(s=1, session_id="chat", first=5, last=6, roles=["user", "assistant"])],
        lambda s: s.plan[0].messages == (5, 6) and s.session_version == 6,
    ),
    PatchMarked: ([PatchMarked(name="tone")], lambda s: s.version == 2),
    # Two reports for one call add up; a field one of them leaves out is the other's.
    UsageRecorded: (
        [
            UsageRecorded(call=1, input_tokens=10, output_tokens=2, model="m"),
            UsageRecorded(call=1, input_tokens=5, cost=0.25),
        ],
        lambda s: s.usage[1]["input_tokens"] == 15
        and s.usage[1]["output_tokens"] == 2
        and s.usage[1]["cost"] == 0.25
        and s.usage[1]["model"] == "m",
    ),
    RunTraced: (
        [RunTraced(origin="00-" + "a" * 32 + "-" + "b" * 16 + "-01", run="00-" + "a" * 32 + "-" + "c" * 16 + "-01")],
        lambda s: s.trace is not None and s.trace["run"].endswith("c" * 16 + "-01"),
    ),
    RetryRequested: (
        [
            RUNNING,
            *FAILED_CALL,
            StepStarted(name="pay"),
            StepFailed(name="pay", error="no"),
            FAILURE,
            StatusChanged(status="failed"),
            RetryRequested(failure_type="ValueError", failure_message="no", retired=[5, 7], calls=[1]),
        ],
        lambda s: s.status is Status.PENDING
        and s.failure is None
        and s.call(1).status == "intended"
        and s.call(1).retried_after == 1
        and s.plan[0].status == "running",
    ),
}


def test_every_event_type_with_a_fold_rule_has_a_fold_test() -> None:
    missing = sorted(t.__name__ for t in _RULES if t not in EXAMPLES)
    assert not missing, f"event types folded but not tested here: {missing}"


def test_every_task_event_type_has_a_fold_rule() -> None:
    """An event type added to any module of ``tether.events`` without a rule is caught here, before a
    task that records it fails to load (and then the test above asks for its fold test). The types
    are taken from the registry every event class joins when it is defined, so one the package
    forgot to export is caught too; other streams' events (a conversation's, in its room; a LangGraph
    thread's, in ``tether.events.langgraph``; an ADK artifact's, in ``tether.events.adk``) are not
    folded into a task."""
    other_streams = {"tether.events.langgraph", "tether.events.adk"}
    registered = [
        t
        for t in events.EVENT_TYPES.values()
        if t.__module__.startswith("tether.events.") and t.__module__ not in other_streams
    ]
    exported = [getattr(events, name) for name in events.__all__]
    types = [t for t in exported if isinstance(t, type) and issubclass(t, Event) and t is not Event]
    assert len(types) >= 29
    assert sorted(t.__name__ for t in registered) == sorted(t.__name__ for t in types), "export every task event"
    missing = sorted(t.__name__ for t in registered if t not in _RULES and t is not TaskCreated)  # starts a fold
    assert not missing, f"event types without a fold rule: {missing}"


@pytest.mark.parametrize("event_type", list(EXAMPLES), ids=lambda t: t.__name__)
def test_fold_rule(event_type: type[Event]) -> None:
    events, holds = EXAMPLES[event_type]
    assert type(events[-1]) is event_type
    phases = {"a": ["b"], "b": []} if event_type is PhaseChanged else None
    state = state_after(*events, phases=phases)
    assert holds(state), state


def test_an_answer_for_another_key_leaves_the_wait() -> None:
    state = state_after(InputRequested(key="approve"), InputReceived(key="later", value=1))
    assert state.waiting is not None and state.waiting.key == "approve"


def test_calls_open_out_of_order_and_stay_in_ordinal_order() -> None:
    state = state_after(
        CallCompleted(n=3, result="c", attempt=1, duration=0.0, key="k3", tool="t", args={}),
        CallCompleted(n=1, result="a", attempt=1, duration=0.0, key="k1", tool="t", args={}),
        CallStarted(n=2, key="k2", tool="t", args={}, attempt=1),
    )
    assert [c.n for c in state.calls] == [1, 2, 3]
    assert state.call(2) is not None and state.call(2).status == "intended" and state.call(4) is None
