"""Time travel on a task whose state grows with its calls, on every backend: its full snapshot is
kept once (the newest), the ones before it are cut down to partial snapshots (the state without its
calls, and their count) and partial snapshots are kept on the way, so ``state_at`` and ``fork``
anywhere start from a partial snapshot near the point. Whatever the shape of the calls (one at a
time, parallel, retried, given up), a state read through a partial snapshot equals the fold of the
events up to that point."""

from __future__ import annotations

import logging

import orjson
import pytest

import tether
from tether.events import CallCompleted, CallFailed, Event, ObservationRecorded, RetryRequested, fold
from tether.store import SnapshotRow
from tether.testing.runtime.calls.test_lazy_calls import _failed_attempt, _mixed, _readonly, _started


def _snapshots(log: tether.TaskLog, task_id: str) -> list[SnapshotRow]:
    """The stream's snapshots, oldest first."""
    found: list[SnapshotRow] = []
    at = 10**9
    while (snap := log.store.get_snapshot(log.tenant, task_id, at_most=at)) is not None:
        found.append(snap)
        at = snap.seq - 1
    return found[::-1]


def _is_partial(snap: SnapshotRow) -> bool:
    data = snap.data if isinstance(snap.data, str) else snap.data.decode()
    return "k" in orjson.loads(data.split("\n")[1])


def _every_state_at_is_the_fold(log: tether.TaskLog, task_id: str) -> None:
    events = log.events(task_id)
    for seq in range(1, len(events) + 1):
        at = tether.TaskLog(log.store).state_at(task_id, seq)
        want = fold(events[:seq])
        # What the summary answers before any call's index is read: the count, the calls done and open.
        summary = (len(at.calls), at.calls.completed(), at.calls.open_ordinals(), at.position)
        assert summary == (len(want.calls), want.calls.completed(), want.calls.open_ordinals(), want.position), seq
        assert [at.calls.index_of(c.n) for c in want.calls] == list(range(len(want.calls))), seq
        assert list(at.calls) == list(want.calls), seq
        assert at.calls.statuses() == want.calls.statuses() and at == want, seq


def _appended_then_snapshotted(log: tether.TaskLog, batches: list[list[Event]]) -> str:
    """A task of these appends, made as a run makes them (no snapshot until it stops), then one."""
    state = log.create(type="t")
    version = state.version
    for events in batches:
        version = log.append(state.task_id, events, version, snapshot=False)
    log.snapshot_if_due(state.task_id)
    return state.task_id


PAD = "x" * 4000
"""Results this big make partial snapshots (a few hundred bytes) small beside the calls they span, as
a 500-byte result does at the default ``every=100``: partial snapshots are kept only then."""


def _side_effecting(n: int) -> list[Event]:
    return [_started(n), CallCompleted(n=n, result={"r": PAD, "n": n}, attempt=1, duration=0.1)]


def _done(n: int, attempt: int = 1) -> CallCompleted:
    return CallCompleted(n=n, result=[PAD, n, attempt], attempt=attempt, duration=0.1)


def test_an_accumulating_task_keeps_one_full_snapshot_and_small_partial_ones(store_url: str) -> None:
    log = tether.TaskLog(store_url, snapshots=tether.SnapshotPolicy(every=10, size_ratio=0))
    state = log.create(type="t")
    for n in range(1, 201):
        log.append(state.task_id, [_readonly(n, "x" * 600)], n)
    snaps = _snapshots(log, state.task_id)
    assert [_is_partial(s) for s in snaps] == [True] * (len(snaps) - 1) + [False]
    assert [s.seq for s in snaps] == list(range(10, 201, 10))  # a partial one every ten events, then the full one
    call_bytes = sum(len(row.data) for row in log.store.read_events(log.tenant, state.task_id)[1:])
    assert sum(len(s.data) for s in snaps[:-1]) * 8 <= call_bytes
    _every_state_at_is_the_fold(log, state.task_id)


def test_a_run_keeps_partial_snapshots_on_the_way_and_state_at_any_seq_is_the_fold(store_url: str) -> None:
    log = tether.TaskLog(store_url, snapshots=tether.SnapshotPolicy(every=3))
    task_id = _appended_then_snapshotted(log, [_side_effecting(n) for n in range(1, 31)])
    snaps = _snapshots(log, task_id)
    partials = [s.seq for s in snaps if _is_partial(s)]
    assert partials == list(range(3, 61, 3)) and not _is_partial(snaps[-1]) and snaps[-1].seq == 61
    full = orjson.loads(str(snaps[-1].data).split("\n")[2])
    assert full["o"] == 1  # one call at a time: the calls at any seq are a prefix
    _every_state_at_is_the_fold(log, task_id)


def test_parallel_retried_and_given_up_calls_read_through_partial_snapshots_as_the_fold(store_url: str) -> None:
    log = tether.TaskLog(store_url, snapshots=tether.SnapshotPolicy(every=3))
    # _mixed appends with snapshots on; a run's way (all pending, then one snapshot) comes after.
    task_id = _mixed(log, 24).task_id
    assert not any(_is_partial(s) for s in _snapshots(log, task_id))  # small results: a partial one would weigh
    _every_state_at_is_the_fold(log, task_id)
    batches: list[list[Event]] = [[_started(1)], [_started(2)], [_started(3)]]
    batches += [[_done(n)] for n in (3, 1)]  # parallel calls finishing out of order
    batches += [[_failed_attempt(2, 1), _started(2, 2)], [_done(2, 2)]]  # one retried after the others
    batches += [[_readonly(n, [PAD, n])] for n in range(4, 12)]
    batches += [[_started(12), _failed_attempt(12, 1), CallFailed(n=12, reason="not retryable")]]
    batches += [[_started(13)], [_readonly(14, PAD)], [_done(13)]]
    task_id = _appended_then_snapshotted(log, batches)
    snaps = _snapshots(log, task_id)
    assert sum(_is_partial(s) for s in snaps) >= 5 and not _is_partial(snaps[-1])
    assert "o" not in orjson.loads(str(snaps[-1].data).split("\n")[2])  # out of order: no prefix
    _every_state_at_is_the_fold(log, task_id)


def test_readonly_calls_opened_out_of_order_read_through_partial_snapshots_as_the_fold(store_url: str) -> None:
    log = tether.TaskLog(store_url, snapshots=tether.SnapshotPolicy(every=2))
    task_id = _appended_then_snapshotted(log, [[_readonly(n, [PAD, n])] for n in (1, 2, 4, 3, 5, 6, 8, 7)])
    snaps = _snapshots(log, task_id)
    assert sum(_is_partial(s) for s in snaps) >= 3
    assert "o" not in orjson.loads(str(snaps[-1].data).split("\n")[2])
    _every_state_at_is_the_fold(log, task_id)


def test_a_call_retried_after_later_calls_reads_through_partial_snapshots_as_the_fold(store_url: str) -> None:
    log = tether.TaskLog(store_url, snapshots=tether.SnapshotPolicy(every=4))
    state = log.create(type="t")
    version = state.version

    def add(*events: Event) -> None:
        nonlocal version
        version = log.append(state.task_id, list(events), version, snapshot=False)

    add(tether.events.StatusChanged(status=tether.Status.RUNNING))
    add(_started(1))
    add(_failed_attempt(1, 1))
    add(CallFailed(n=1, reason="gave up"))
    for n in range(2, 6):
        add(_readonly(n, [PAD, n]))
    add(tether.events.StatusChanged(status=tether.Status.FAILED, reason="call 1"))
    add(RetryRequested(failure_type="CallFailed", failure_message="call 1 gave up", actor="ops"))
    add(tether.events.StatusChanged(status=tether.Status.RUNNING))
    add(_started(1, 2))
    add(_done(1, 2))
    log.snapshot_if_due(state.task_id)
    assert sum(_is_partial(s) for s in _snapshots(log, state.task_id)) >= 2
    _every_state_at_is_the_fold(log, state.task_id)


def test_a_fork_and_a_rewind_between_partial_snapshots_read_as_the_fold(store_url: str) -> None:
    log = tether.TaskLog(store_url, snapshots=tether.SnapshotPolicy(every=5))
    task_id = _appended_then_snapshotted(log, [_side_effecting(n) for n in range(1, 21)])
    events = log.events(task_id)
    fork = tether.TaskLog(log.store).fork(task_id, 24, new_id="f")
    assert fork == tether.TaskLog(log.store).load("f")
    assert list(fork.calls) == list(fold(events[:24]).calls)  # call 12 open: its intent, not its result
    version = log.append("f", [CallCompleted(n=12, result="the fork's", attempt=1, duration=0.1)], fork.version)
    assert tether.TaskLog(log.store).load("f").call(12).result == "the fork's"  # type: ignore[union-attr]
    assert version == 26
    _every_state_at_is_the_fold(log, "f")
    log.rewind(task_id, 17, archive_id="old")
    _every_state_at_is_the_fold(log, task_id)
    _every_state_at_is_the_fold(log, "old")


def test_partial_snapshots_without_an_intact_full_snapshot_are_passed_over(
    store_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    log = tether.TaskLog(store_url, snapshots=tether.SnapshotPolicy(every=5))
    task_id = _appended_then_snapshotted(log, [_side_effecting(n) for n in range(1, 21)])
    full = _snapshots(log, task_id)[-1]
    assert sum(_is_partial(s) for s in _snapshots(log, task_id)) >= 6
    log.store.put_snapshot(log.tenant, task_id, SnapshotRow(full.seq, full.schema, "0" * 32, full.data))
    with caplog.at_level(logging.WARNING, logger="tether"):
        at = tether.TaskLog(log.store).state_at(task_id, full.seq - 1)
        assert not caplog.records  # a partial snapshot's calls are read when first needed
        assert list(at.calls) == list(fold(log.events(task_id, upto=full.seq - 1)).calls)
    assert len(caplog.records) == 1  # one warning: the partial snapshot's calls came from events instead
    assert "reading its calls from events" in caplog.records[0].getMessage()
    _every_state_at_is_the_fold(log, task_id)
    assert tether.TaskLog(log.store).load(task_id) == fold(log.events(task_id))


def test_a_call_open_across_a_partial_snapshot_while_later_ones_finish_reads_through_it_without_falling_back(
    store_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Call 1 opens, calls 2 and 3 (readonly) finish, a partial snapshot is kept, then call 1 finishes and no
    call follows: the calls at the partial snapshot are call 1's intent and calls 2 and 3, read from the full snapshot
    (not rebuilt from the events)."""
    log = tether.TaskLog(store_url, snapshots=tether.SnapshotPolicy(every=4, size_ratio=0))
    big = PAD * 5  # a partial snapshot spans four events here: results this big keep it
    batches: list[list[Event]] = [[_started(1)], [_readonly(2, big)], [_readonly(3, big)], [_done(1)]]
    batches += [[ObservationRecorded(key="k", value=i)] for i in range(8)]  # no call after call 1
    task_id = _appended_then_snapshotted(log, batches)
    assert 4 in [s.seq for s in _snapshots(log, task_id) if _is_partial(s)]
    with caplog.at_level(logging.WARNING, logger="tether"):
        _every_state_at_is_the_fold(log, task_id)
    assert not caplog.records  # every partial snapshot's calls came from the full snapshot's index
