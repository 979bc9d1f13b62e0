"""A loaded state's calls are read from their events when asked for, on every backend: what a
load gives equals the full fold, whatever order calls, snapshots and loads came in, and a
result is stored once (in its event, not again in the snapshot)."""
# mypy: disable-error-code="no-untyped-call"

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tether
from tether.errors import TetherError
from tether.events import CallAttemptFailed, CallCompleted, CallFailed, CallStarted, Event, fold
from tether.model import CallList

MARK = "only-in-the-event"


def _key(n: int) -> str:
    return f"t:{n}:tool:{n:016x}"


def _readonly(n: int, result: Any) -> CallCompleted:
    return CallCompleted(n=n, result=result, attempt=1, duration=0.01, key=_key(n), tool="search", args={"i": n})


def _started(n: int, attempt: int = 1) -> CallStarted:
    return CallStarted(n=n, key=_key(n), tool="book", args={"i": n}, attempt=attempt)


def _failed_attempt(n: int, attempt: int) -> CallAttemptFailed:
    return CallAttemptFailed(
        n=n, attempt=attempt, error_type="TimeoutError", message="slow", traceback=None, duration=0.5, backoff=0.1
    )


def _mixed(log: tether.TaskLog, calls: int) -> tether.TaskState:
    """A task whose calls take every shape: readonly, side-effecting, retried, given up, and
    parallel ones opened and finished out of order."""
    state = log.create(type="t")
    version = state.version

    def add(*events: Event) -> None:
        nonlocal version
        version = log.append(state.task_id, list(events), version)

    n = 0
    while n < calls:
        shape = n % 4
        if shape == 0:
            n += 1
            add(_readonly(n, {"i": n, "text": f"{MARK}-{n}"}))
        elif shape == 1:
            n += 1
            add(_started(n))
            add(_failed_attempt(n, 1), _started(n, 2))
            add(CallCompleted(n=n, result=f"{MARK}-{n}", attempt=2, duration=0.2))
        elif shape == 2:
            n += 1
            add(_started(n), _failed_attempt(n, 1), CallFailed(n=n, reason="not retryable"))
        else:  # three parallel calls: opened in order, finished in reverse
            first = n + 1
            n += 3
            add(*(_started(i) for i in range(first, n + 1)))
            for i in range(n, first - 1, -1):
                add(CallCompleted(n=i, result=[MARK, i], attempt=1, duration=0.05))
    return log.load(state.task_id)


def test_a_loaded_states_calls_equal_the_folded_ones(store_url: str) -> None:
    log = tether.TaskLog(store_url, snapshots=tether.SnapshotPolicy(every=10**9))
    state = _mixed(log, 40)
    log.write_snapshot(state.task_id, state)
    events = log.events(state.task_id)
    folded = fold(events)
    # Every way of reading: by index from either end, slices, reversed, iteration, the ordinal.
    reads = [
        lambda calls: [calls[i] for i in range(len(calls))],
        lambda calls: [calls[-i] for i in range(1, len(calls) + 1)][::-1],
        lambda calls: list(calls[3:17]) + list(calls[::5]),
        lambda calls: list(reversed(calls))[::-1],
        lambda calls: list(calls),
    ]
    expected = [read(folded.calls) for read in reads]
    for read, want in zip(reads, expected, strict=True):
        fresh = tether.TaskLog(log.store).load(state.task_id)
        assert isinstance(fresh.calls, CallList)
        assert read(fresh.calls) == want
        assert fresh == folded == state
    fresh = tether.TaskLog(log.store).load(state.task_id)
    assert [fresh.call(n) for n in range(1, 41)] == [folded.call(n) for n in range(1, 41)]
    assert fresh.position == folded.position and fresh.calls.completed() == folded.calls.completed()
    assert fresh.calls.statuses() == [call.status for call in folded.calls]


def test_a_result_is_stored_once(store_url: str) -> None:
    log = tether.TaskLog(store_url, snapshots=tether.SnapshotPolicy(every=10**9))
    state = _mixed(log, 12)
    log.write_snapshot(state.task_id, state)
    snap = log.store.get_snapshot(log.tenant, state.task_id, at_most=state.version)
    assert snap is not None and MARK not in str(snap.data)
    in_events = sum(MARK in str(row.data) for row in log.store.read_events(log.tenant, state.task_id))
    assert in_events == state.calls.completed() > 5  # each result, once, in its call's last event


def test_loading_reads_no_call_and_reading_calls_reads_them_by_page(store_url: str) -> None:
    log = tether.TaskLog(store_url, snapshots=tether.SnapshotPolicy(every=10**9))
    state = log.create(type="t")
    for n in range(1, 601):
        log.append(state.task_id, [_readonly(n, f"r{n}")], n)
    log.write_snapshot(state.task_id, log.load(state.task_id))
    store = log.store
    reads: list[tuple[int, int | None]] = []
    real = store.read_events

    def counted(tenant: str, task_id: str, *, after: int = 0, upto: int | None = None) -> list[Any]:
        reads.append((after, upto))
        return real(tenant, task_id, after=after, upto=upto)

    store.read_events = counted  # type: ignore[method-assign]
    try:
        fresh = tether.TaskLog(store).load(state.task_id)
        loading = list(reads)
        assert len(fresh.calls) == 600 and fresh.position == "no plan; 600 calls committed"
        assert reads == loading  # counting and the position read no call
        assert fresh.calls[299].result == "r300"
        one = reads[len(loading) :]
        assert len(one) == 1 and one[0][0] <= 300 and one[0][1] is not None and one[0][1] < 400  # a few, not all
        del reads[:]
        assert [call.result for call in fresh.calls] == [f"r{n}" for n in range(1, 601)]
        assert 2 <= len(reads) <= 4  # pages of calls, not one read per call
    finally:
        del store.read_events


def test_a_call_of_a_rewound_task_is_refused_not_read_from_the_new_branch(store_url: str) -> None:
    log = tether.TaskLog(store_url, snapshots=tether.SnapshotPolicy(every=10**9))
    state = _mixed(log, 8)
    log.write_snapshot(state.task_id, state)
    held = tether.TaskLog(log.store).load(state.task_id)
    log.rewind(state.task_id, 3, archive_id=f"{state.task_id}-old")
    with pytest.raises(TetherError, match="rewound or deleted since this state was loaded"):
        held.calls[5]


@st.composite
def interleavings(draw: st.DrawFn) -> list[tuple[str, Any]]:
    """Appends of call events (parallel calls finishing in any order), snapshots, loads and runs
    stopping (the log puts the calls' records away), in any order."""
    ops: list[tuple[str, Any]] = []
    open_: list[int] = []
    n = 0
    for _ in range(draw(st.integers(1, 30))):
        kind = draw(st.integers(0, 6))
        if kind == 0:
            n += 1
            ops.append(("append", [_readonly(n, draw(st.integers(-(2**53), 2**53)))]))
        elif kind == 1:
            n += 1
            open_.append(n)
            ops.append(("append", [_started(n)]))
        elif kind == 2 and open_:
            i = open_.pop(draw(st.integers(0, len(open_) - 1)))
            result = {"r": draw(st.text(max_size=5))}
            ops.append(("append", [CallCompleted(n=i, result=result, attempt=1, duration=0.1)]))
        elif kind == 3 and open_:
            i = open_[draw(st.integers(0, len(open_) - 1))]
            ops.append(("append", [_failed_attempt(i, 1), _started(i, 2)]))
        elif kind == 4:
            ops.append(("snapshot", None))
        elif kind == 5:
            ops.append(("stop", None))
        else:
            ops.append(("load", draw(st.integers(0, 10**6))))
    return ops


_counter = iter(range(10**9))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=interleavings())
def test_any_interleaving_of_appends_and_snapshots_loads_as_the_full_fold(
    store_url: str, ops: list[tuple[str, Any]]
) -> None:
    log = tether.TaskLog(store_url, snapshots=tether.SnapshotPolicy(every=3, size_ratio=0))
    try:  # one store (and its connections) per example, closed with it: 40 of them at once were too many
        state = log.create(type="t", task_id=f"h{next(_counter)}")
        version = state.version
        for op, arg in ops:
            if op == "append":
                version = log.append(state.task_id, arg, version)
            elif op == "snapshot":
                log.write_snapshot(state.task_id, log.load(state.task_id))
            elif op == "stop":  # a run of the task stops: what the log keeps reads its calls back
                log.hold(state.task_id)
                log.load(state.task_id)  # folded by the run, its records read
                log.release(state.task_id)
                assert log.load(state.task_id) == fold(log.events(state.task_id))
            else:
                events = log.events(state.task_id)
                fresh = tether.TaskLog(log.store)
                assert fresh.load(state.task_id) == fold(events)
                seq = 1 + arg % len(events)
                at = fresh.state_at(state.task_id, seq)
                assert list(at.calls) == list(fold(events[:seq]).calls) and at == fold(events[:seq])
                log = tether.TaskLog(log.store, snapshots=log.snapshots)  # appends go on from a loaded state
                log.load(state.task_id)
        assert tether.TaskLog(log.store).load(state.task_id) == fold(log.events(state.task_id))
    finally:
        log.store.close()


def test_the_calls_of_a_retried_task_read_back_as_the_fold_made_them(store_url: str) -> None:
    """A retry changes the calls it sends to run again (a fresh round of attempts): a call read from
    its events takes the retry's part too."""
    app = tether.App(store_url)
    bug = {"on": True}
    ran: list[int] = []

    @app.tool(retry=tether.Retry(max_attempts=1))
    def charge(i: int) -> str:
        ran.append(i)
        if bug["on"] and i == 2:
            raise RuntimeError("card declined")
        return f"charged {i}"

    @app.task
    def pay(ctx: tether.TaskContext) -> list[str]:
        return [ctx.call(charge, i) for i in range(4)]

    failed = app.run(pay, task_id="pay")
    assert failed.status is tether.Status.FAILED
    bug["on"] = False
    done = app.retry("pay")
    assert done.status is tether.Status.COMPLETED and ran == [0, 1, 2, 2, 3]
    log = app.log
    state = log.load("pay")
    log.write_snapshot("pay", state)
    events = log.events("pay")
    fresh = tether.TaskLog(log.store).load("pay")
    assert list(fresh.calls) == list(fold(events).calls) == list(state.calls)
    assert any(call.retried_after for call in fresh.calls)  # the retry's part came with the events
