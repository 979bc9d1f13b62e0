"""Invariants that once could break with the whole suite green: the store's own contract (not only
through TaskLog), fork by reference, attempt numbering, the ledger after a failure, leases and their
heartbeat, session snapshots, the idempotency key's hash, and cancel under contention."""
# mypy: disable-error-code="arg-type,union-attr"

from __future__ import annotations

import itertools
import statistics
import threading
import time
from typing import Any

import pytest

import tether
from tether.conversation import stream_id
from tether.events import CancelRequested
from tether.log.conflicts import TRIES
from tether.store import EventRow, SnapshotRow, TaskRow
from tether.testing import dump_database


class Stop(BaseException):
    """Stands for a crash."""


@pytest.fixture
def app(store_url: str) -> tether.App:
    return tether.App(store_url)


# ------------------------------------------------------------------ the key's argument hash


# ------------------------------------------------------------------ the store's contract, at the store


def _row(task_id: str, version: int = 1) -> TaskRow:
    now = time.time()
    return TaskRow(task_id, "default", "t", "pending", None, None, now, now, version)


def _event(seq: int) -> EventRow:
    return EventRow(seq, "DecisionMade", 1, time.time(), '{"name":"x","choice":1,"rationale":"r"}')


def test_the_store_refuses_an_expected_version_ahead_or_behind(app: tether.App) -> None:
    store = app.store
    created = '{"type":"t","task_id":"s","tenant":"default"}'
    store.create_task("default", _row("s"), EventRow(1, "TaskCreated", 1, time.time(), created))
    store.append("default", "s", [_event(2)], 1)
    before = [tuple(r) for r in store.read_events("default", "s")]
    for stale in (0, 1, 3, 7):  # behind and ahead of the stream's version 2
        with pytest.raises(tether.ConflictError):
            store.append("default", "s", [_event(stale + 1)], stale)
    # A batch whose seqs do not follow expected_version (a gap) is refused too.
    with pytest.raises((tether.ConflictError, tether.InvalidInputError)):
        store.append("default", "s", [_event(4)], 2)
    with pytest.raises((tether.ConflictError, tether.InvalidInputError)):
        store.append("default", "s", [_event(3), _event(5)], 2)
    assert [tuple(r) for r in store.read_events("default", "s")] == before
    assert store.get_task("default", "s").version == 2


# ------------------------------------------------------------------ fork by reference


def _stored(app: tether.App, store_url: str) -> tuple[int, int]:
    """(rows, bytes) the database physically holds, in every table — not what the store's reads
    show, which join a fork to its parent and would hide events copied into the fork."""
    dump = dump_database(store_url, app.store)
    if isinstance(dump, str):  # SQLite: its SQL dump, one INSERT per row
        rows = [line for line in dump.splitlines() if line.startswith("INSERT INTO")]
        return len(rows), sum(len(line) for line in rows)
    if store_url.startswith("memory://"):
        assert isinstance(dump, dict)
        streams = dump["_tasks"].values()
        records = [r for s in streams for r in (s.row, *s.events, *s.snapshots.values())]
        return len(records), sum(len(repr(r)) for r in records)
    assert isinstance(dump, dict)
    return sum(len(t) for t in dump.values()), sum(len("".join(row)) for t in dump.values() for row in t)


@pytest.mark.tether_requires("dump")
def test_forking_a_large_task_adds_one_row_and_one_small_event(app: tether.App, store_url: str) -> None:
    @app.tool(readonly=True)
    def step(i: int) -> str:
        return "x" * 500

    @app.task
    def long(ctx: tether.TaskContext) -> int:
        for i in range(300):
            ctx.call(step, i)
        return 1

    app.run(long, task_id="big")
    rows_before, bytes_before = _stored(app, store_url)
    tasks_before = len(app.store.list_tasks(app.tenant, tether.store.TaskFilter(), limit=10_000))
    fork = app.fork("big", at=250, new_id="f")
    rows_after, bytes_after = _stored(app, store_url)
    assert len(app.store.list_tasks(app.tenant, tether.store.TaskFilter(), limit=10_000)) == tasks_before + 1
    # The task's row and its TaskForked event (a copy of 250 events would be ~130 kB more).
    assert rows_after - rows_before == 2, (rows_before, rows_after)
    assert bytes_after - bytes_before < 2_000, (bytes_before, bytes_after)
    assert len(fork.state.calls) == app.state_at("big", 250).calls.__len__()


# ------------------------------------------------------------------ attempts and the ledger


def test_a_crash_inside_attempt_two_resumes_at_attempt_three(app: tether.App) -> None:
    attempts: list[int] = []
    crash = {"on": True}

    @app.tool(retry=tether.Retry(max_attempts=5, backoff=0))
    def flaky() -> str:
        attempt = tether.current_call().attempt
        attempts.append(attempt)
        if attempt == 1:
            raise TimeoutError("first try times out")
        if attempt == 2 and crash["on"]:
            raise Stop  # the process dies inside attempt 2
        return f"ok on {attempt}"

    @app.task
    def job(ctx: tether.TaskContext) -> str:
        return str(ctx.call(flaky))

    with pytest.raises(Stop):
        app.run(job, task_id="a")
    crash["on"] = False
    assert app.resume("a").result() == "ok on 3"
    assert attempts == [1, 2, 3]
    call = app.state("a").call(1)
    assert [(a.number, a.error_type) for a in call.attempts] == [(1, "TimeoutError"), (2, "Interrupted"), (3, None)]


def test_the_ledger_forgets_a_failed_effect_so_a_retry_is_not_in_doubt(app: tether.App) -> None:
    tries: list[int] = []

    def charge() -> str:
        tries.append(1)
        if len(tries) == 1:
            raise ConnectionError("gateway refused")
        return "charged"

    with pytest.raises(ConnectionError):
        app.ledger.once("pay-1", charge, on_unknown="raise")
    assert app.ledger.get("pay-1") is None  # a plain failure did nothing: no key left in doubt
    assert app.ledger.once("pay-1", charge, on_unknown="raise") == "charged"
    assert app.ledger.once("pay-1", charge, on_unknown="raise") == "charged" and len(tries) == 2


# ------------------------------------------------------------------ leases


def test_the_heartbeat_renews_well_before_the_lease_expires(app: tether.App) -> None:
    ttl = 1.5
    app.engine.lease_ttl = ttl
    seen: list[float] = []
    expiries: set[float] = set()
    kept_out = threading.Event()
    tried = threading.Event()

    @app.tool
    def slow() -> str:
        deadline = time.time() + 2.5 * ttl  # the thief always comes while this runs
        while time.time() < deadline or not tried.is_set():
            row = app.store.get_task(app.tenant, "hb")
            if row is not None and row.lease_expires is not None:
                seen.append(row.lease_expires - time.time())
                expiries.add(row.lease_expires)
            time.sleep(0.05)
        return "ok"

    @app.task(name="job")
    def job(ctx: tether.TaskContext) -> str:
        return str(ctx.call(slow))

    second = tether.App(app.store, lease_ttl=ttl)  # another runner, as another process would be
    second.task(name="job")(job)

    def other() -> None:
        time.sleep(ttl * 4 / 3)  # past the first TTL: only a renewed lease keeps this second runner out
        try:
            second.resume("hb")
        except tether.TaskBusyError:
            kept_out.set()
        finally:
            tried.set()

    thief = threading.Thread(target=other)
    thief.start()
    assert app.run("job", task_id="hb").result() == "ok"
    thief.join()
    assert kept_out.is_set(), "a second runner was let in while the owner was alive"
    # Renewed every ttl/3: over more than two TTLs the time left never neared zero.
    assert seen and min(seen) > 0.1, min(seen)
    # The cadence itself: each renewal sets expiry = now + TTL, so the gaps between the expiries
    # seen are the gaps between renewals — every TTL/3 (0.5 s), well under the TTL; the median
    # rides out a renewal a loaded machine delays.
    gaps = [b - a for a, b in itertools.pairwise(sorted(expiries))]
    assert len(gaps) >= 3 and statistics.median(gaps) <= 0.4 * ttl, gaps


def test_a_live_owners_lease_is_never_taken(app: tether.App) -> None:
    other = tether.App(app.store)
    started = threading.Event()
    release = threading.Event()

    @app.tool
    def hold() -> str:
        started.set()
        release.wait(10)
        return "held"

    @app.task(name="busy")
    def busy(ctx: tether.TaskContext) -> str:
        return str(ctx.call(hold))

    other.task(name="busy")(busy)
    runner = threading.Thread(target=lambda: app.run("busy", task_id="b"))
    runner.start()
    assert started.wait(10)
    try:
        with pytest.raises(tether.TaskBusyError, match="is being run by"):
            other.resume("b")
        with pytest.raises(tether.TaskBusyError):
            other.run("busy", task_id="b")
    finally:
        release.set()
        runner.join()
    assert app.state("b").output == "held"


# ------------------------------------------------------------------ session snapshots


def test_a_corrupted_session_snapshot_is_detected_and_rebuilt(app: tether.App) -> None:
    chat = app.session("s")
    for i in range(12):
        chat.add("user" if i % 2 == 0 else "assistant", f"message {i}")
    chat.compact(keep_last=2)
    expected = [m.content for m in app.session("s").messages()]
    window = app.session("s").window(max_tokens=10_000).to_openai()
    snap = app.store.get_snapshot(app.tenant, stream_id("s"), at_most=10**9)
    assert snap is not None
    scribbled = SnapshotRow(snap.seq, snap.schema, snap.checksum, snap.data.replace("message", "MESSAGE"))
    app.store.put_snapshot(app.tenant, stream_id("s"), scribbled)
    fresh = tether.App(app.store).session("s")  # a new process's view: from the store
    assert [m.content for m in fresh.messages()] == expected
    assert fresh.window(max_tokens=10_000).to_openai() == window


# ------------------------------------------------------------------ cancel under contention


@pytest.mark.parametrize("conflicts", [1, 5, 40, TRIES])
def test_cancel_under_contention_records_the_request_or_fails(
    app: tether.App, conflicts: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another writer wins the request's append ``conflicts`` times in a row: the request is
    recorded at last and the task cancelled — or, past the retries, the cancel fails with nothing
    recorded; never a run of the task without the request."""
    ran: list[int] = []

    @app.tool
    def work() -> int:
        ran.append(1)
        return 1

    @app.task
    def job(ctx: tether.TaskContext) -> int:
        ctx.wait_for_input("go")
        return int(ctx.call(work))

    app.run(job, task_id="c")
    app.send_input("c", "go", True)  # runnable: a run without the request would do the work
    real = app.log.append
    left = {"n": conflicts}

    def contended(task_id: str, events: list[Any], expected_version: int, **options: Any) -> int:
        if left["n"] and any(isinstance(e, CancelRequested) for e in events):
            left["n"] -= 1
            raise tether.ConflictError(task_id, expected=expected_version, actual=expected_version + 1)
        return real(task_id, events, expected_version, **options)

    monkeypatch.setattr(app.log, "append", contended)
    if conflicts < TRIES:
        handle = app.cancel("c", "stop")
        assert handle.status is tether.Status.CANCELLED and app.state("c").cancel_reason == "stop"
    else:
        with pytest.raises(tether.ConflictError):
            app.cancel("c", "stop")
        assert app.state("c").cancel_reason is None and app.state("c").status is tether.Status.AWAITING_INPUT
    assert ran == []
