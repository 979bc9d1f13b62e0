"""Where a task stands, read off its index row alone (``app.get``, ``app.list_tasks``), equals what
the whole fold says, on every backend: for any interleaving of calls (readonly, started, completed,
failed, started again), steps, plans, outputs, waits and answers, status moves, failures and
retries, appended by two logs in turn (two processes), with snapshots read in between."""
# mypy: disable-error-code="arg-type,unused-ignore"

from __future__ import annotations

import itertools
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tether
from tether.errors import InvalidTransition
from tether.events import (
    CallAttemptFailed,
    CallCompleted,
    CallFailed,
    CallStarted,
    CancelRequested,
    Event,
    FailureRecorded,
    InputReceived,
    InputRequested,
    OutputSet,
    PlanSet,
    RetryRequested,
    StatusChanged,
    StepCompleted,
    StepFailed,
    StepStarted,
)
from tether.log.heads import read_head, row_head_of
from tether.model.status import Status, check_status


def _moves(current: Status, target: Status) -> bool:
    try:
        check_status(current, target)
    except InvalidTransition:
        return False
    return True


ALLOWED = {current: frozenset(t for t in Status if _moves(current, t)) for current in Status}
"""The status machine, as its own check answers: each status -> the statuses it may move to."""

_ids = itertools.count()
STEPS = ["a", "b", "c"]

op = st.tuples(
    st.sampled_from(
        [
            "readonly",
            "start",
            "complete",
            "fail_attempt",
            "give_up",
            "plan",
            "step_start",
            "step_done",
            "step_fail",
            "output",
            "ask",
            "answer",
            "status",
            "failure",
            "retry",
            "cancel",
        ]
    ),
    st.integers(0, 5),
)


class _Model:
    """Just enough of a task to make events the log accepts."""

    def __init__(self) -> None:
        self.status = Status.PENDING
        self.opened: list[int] = []

    def event(self, name: str, k: int) -> Event | None:
        n_new = (max(self.opened) if self.opened else 0) + 1
        some = self.opened[k % len(self.opened)] if self.opened else None
        if name == "readonly":
            self.opened.append(n_new)
            return CallCompleted(n=n_new, result={"r": k}, attempt=1, duration=0.0, key=f"k{n_new}", tool="t", args={})
        if name == "start":
            n = n_new if some is None or k % 2 else some
            if n == n_new:
                self.opened.append(n)
            return CallStarted(n=n, key=f"k{n}", tool="t", args={"k": k}, attempt=k + 1)
        if some is None and name in ("complete", "fail_attempt", "give_up"):
            return None
        if name == "complete":
            return CallCompleted(n=some, result=[k], attempt=k + 1, duration=0.1)  # type: ignore[arg-type]
        if name == "fail_attempt":
            return CallAttemptFailed(
                n=some,
                attempt=k + 1,
                error_type="E",
                message="m",
                traceback=None,
                duration=0.1,  # type: ignore[arg-type]
            )
        if name == "give_up":
            return CallFailed(n=some, reason="gave up")  # type: ignore[arg-type]
        if name == "plan":
            return PlanSet(steps=STEPS[: k % 3 + 1])
        if name in ("step_start", "step_done", "step_fail"):
            step = STEPS[k % 3]
            if name == "step_fail":
                return StepFailed(name=step, error="boom")
            return StepStarted(name=step) if name == "step_start" else StepCompleted(name=step)
        if name == "output":
            return OutputSet(output={"answer": k, "items": list(range(k))})
        if name == "ask":
            return InputRequested(key=f"q{k % 2}", prompt=f"question {k}", schema={"type": "integer"})
        if name == "answer":
            return InputReceived(key=f"q{k % 2}", value=k)
        if name == "status":
            allowed = sorted(ALLOWED[self.status], key=lambda s: s.value)
            if not allowed:
                return None
            self.status = allowed[k % len(allowed)]
            wake = 1e9 + k if self.status in (Status.SLEEPING, Status.AWAITING_INPUT) else None
            return StatusChanged(status=self.status.value, wake_at=wake)
        if name == "failure":
            return FailureRecorded(exception_type="ValueError", message=f"bad {k}", step="a", tool="t", call_key="k1")
        if name == "retry":
            if self.status is not Status.FAILED:
                return None
            self.status = Status.PENDING
            return RetryRequested(failure_type="E", failure_message="m", calls=self.opened[: k % 3])
        if name == "cancel":
            return CancelRequested(reason=f"stop {k}")
        raise AssertionError(name)


def _check(log: tether.TaskLog, task_id: str) -> None:
    row = log.store.get_task(log.tenant, task_id)
    assert row is not None
    state = tether.TaskLog(log.store).load(task_id)  # a fresh log: the snapshot and the events after it
    assert read_head(row) == row_head_of(state)
    assert (row.version, datetime.fromtimestamp(row.updated_at, UTC)) == (state.version, state.updated_at)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=st.lists(op, max_size=30), batch=st.integers(1, 3), other_at=st.integers(2, 7))
def test_the_row_says_where_a_task_stands(
    store_url: str, ops: list[tuple[str, int]], batch: int, other_at: int
) -> None:
    first = tether.TaskLog(store_url, snapshots=tether.SnapshotPolicy(every=3, size_ratio=0))
    try:  # one store (and its connections) per example, closed with it: 40 open at once are too many
        other = tether.TaskLog(first.store, snapshots=tether.SnapshotPolicy(every=2, size_ratio=0))
        task_id = f"h{next(_ids)}"
        state = first.create(type="t", task_id=task_id)
        _check(first, task_id)
        model = _Model()
        pending: list[Event] = []
        for i, (name, k) in enumerate(ops):
            event = model.event(name, k)
            if event is None:
                continue
            pending.append(event)
            if len(pending) < batch and i < len(ops) - 1:
                continue
            writer = other if i % other_at == 0 else first  # two processes, each with its own memory
            version = writer.store.get_task(writer.tenant, task_id).version  # type: ignore[union-attr]
            try:
                writer.append(task_id, pending, version)
            except tether.TetherError:
                model = _reset(model, writer.load(task_id))  # refused (an illegal move): nothing written
            pending = []
            _check(first, task_id)
        assert state.task_id == task_id
    finally:
        first.store.close()


def _reset(model: _Model, state: tether.TaskState) -> _Model:
    model.status = state.status
    model.opened = [call.n for call in state.calls]
    return model


@pytest.mark.parametrize("refused", ["opens_again", "unstorable"])
def test_a_refused_append_leaves_the_row_as_the_fold_says(store_url: str, refused: str) -> None:
    """A one-event append moves the log's own head as it is checked: refused, the log forgets it, so
    the next append that writes the head (an output) writes the fold's, not one moved by the refusal."""
    log = tether.TaskLog(store_url)
    task_id = f"r{next(_ids)}"
    version = log.create(type="t", task_id=task_id).version
    version = log.append(task_id, [CallStarted(n=1, key="k1", tool="t", args={}, attempt=1)], version)
    if refused == "opens_again":  # its check fails after the head has counted the call as committed
        bad = CallCompleted(n=1, result=1, attempt=1, duration=0.0, key="k1", tool="t", args={})
    else:  # a result that cannot be stored: refused before the head moves
        bad = CallCompleted(n=1, result=object(), attempt=1, duration=0.0)
    with pytest.raises(tether.TetherError):
        log.append(task_id, [bad], version)
    log.append(task_id, [OutputSet(output="draft")], version)
    _check(log, task_id)
    row = log.store.get_task(log.tenant, task_id)
    assert row is not None and row.calls_done == 0  # call #1 has its intent only


def test_a_refused_group_append_leaves_every_row_as_the_fold_says(store_url: str) -> None:
    """The same for ``append_together``: the first task's one event staged (its head moved) and the
    second's refused, nothing is written and the log forgets both."""
    log = tether.TaskLog(store_url)
    first, second = f"g{next(_ids)}", f"g{next(_ids)}"
    version = log.create(type="t", task_id=first).version
    version = log.append(first, [CallStarted(n=1, key="k1", tool="t", args={}, attempt=1)], version)
    other = log.create(type="t", task_id=second).version
    closes = CallCompleted(n=1, result=1, attempt=1, duration=0.0)
    with pytest.raises(tether.TetherError):
        log.append_together([(first, [closes], version), (second, [CallFailed(n=9, reason="no such call")], other)])
    log.append(first, [OutputSet(output="draft")], version)
    _check(log, first)
    row = log.store.get_task(log.tenant, first)
    assert row is not None and row.calls_done == 0


def test_app_get_and_list_tasks_read_the_row(store_url: str) -> None:
    app = tether.App(store_url)

    @app.tool(readonly=True)
    def search(i: int) -> str:
        return f"result {i}"

    @app.task
    def research(ctx: tether.TaskContext, count: int) -> dict[str, Any]:
        for i in range(count):
            ctx.call(search, i)
        answer = ctx.wait_for_input("go", prompt="go on?")
        return {"count": count, "answer": answer}

    run = app.run(research, 5, task_id="r")
    reads: list[str] = []
    original = app.log.store.read_events

    def read_events(tenant: str, task_id: str, **kwargs: Any) -> Any:
        reads.append(task_id)
        return original(tenant, task_id, **kwargs)

    app.log.store.read_events = read_events  # type: ignore[method-assign]
    fresh = tether.App(app.log.store)
    handle = fresh.get("r")
    assert (handle.status, handle.position, handle.waiting, handle.output) == (
        run.status,
        run.position,
        run.waiting,
        None,
    )
    assert handle.position == "no plan; 5 calls committed" and handle.waiting is not None
    [line] = fresh.list_tasks()
    assert (line.status, line.position, line.waiting_for, line.prompt) == (
        Status.AWAITING_INPUT,
        handle.position,
        "go",
        "go on?",
    )
    assert reads == []  # neither read an event
    app.log.store.read_events = original  # type: ignore[method-assign]
    app.send_input("r", "go", 42)
    done = app.resume("r")
    handle = tether.App(app.log.store).get("r")
    assert (handle.status, handle.output) == (Status.COMPLETED, done.output)
    assert handle.result() == {"count": 5, "answer": 42}
    assert handle.state == app.state("r")  # the full state, loaded when asked for


@pytest.mark.parametrize("kind", ["failed", "cancelled"])
def test_a_handle_of_an_ended_task_explains_itself(store_url: str, kind: str) -> None:
    app = tether.App(store_url)

    @app.task
    def doomed(ctx: tether.TaskContext) -> None:
        if kind == "cancelled":
            ctx.wait_for_input("never")
        raise ValueError("no luck")

    app.run(doomed, task_id="d")
    if kind == "cancelled":
        app.cancel("d", "changed my mind")
    handle = tether.App(app.log.store).get("d")
    with pytest.raises(tether.TaskFailedError) as info:
        handle.result()
    assert ("no luck" if kind == "failed" else "changed my mind") in str(info.value)
    assert handle.failure == app.state("d").failure
