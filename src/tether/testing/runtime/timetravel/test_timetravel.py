"""History, state around steps, diff, fork, rewind and replay, on tasks of many shapes."""
# mypy: disable-error-code="func-returns-value,no-any-return"

from __future__ import annotations

import dataclasses
from typing import Any

import orjson
import pytest

import tether
from tether.events import ObservationRecorded
from tether.timetravel import describe


@pytest.fixture
def app(store_url: str) -> tether.App:
    return tether.App(store_url, inline_wait=0)


def _trip(app: tether.App, ran: list[str]) -> Any:
    @app.tool
    def search(dest: str) -> list[str]:
        ran.append(f"search {dest}")
        return [f"{dest}-1", f"{dest}-2"]

    @app.tool
    def book(flight: str) -> str:
        ran.append(f"book {flight}")
        return f"booked {flight}"

    @app.task
    def trip(ctx: tether.TaskContext, dest: str, pick: int = 0) -> str:
        ctx.plan(["search", "pick", "book"])
        with ctx.step("search"):
            flights = ctx.call(search, dest)
        with ctx.step("pick"):
            flight = ctx.decide("flight", flights[pick], rationale="as asked")
        with ctx.step("book"):
            return str(ctx.call(book, flight))

    return trip


def _rows(app: tether.App, task_id: str) -> list[tuple[Any, ...]]:
    return [tuple(r) for r in app.store.read_events(app.tenant, task_id)]


def test_history_entries_are_whole_frozen_records(app: tether.App) -> None:
    # history builds its entries without HistoryEntry.__init__, and makes their time, summary and
    # event when first read: each must still have every field, compare and hash like one built
    # the ordinary way, and refuse changes.
    trip = _trip(app, [])
    app.run(trip, "NYC", task_id="t")
    names = [f.name for f in dataclasses.fields(tether.HistoryEntry)]
    for entry in app.history("t"):
        built = tether.HistoryEntry(**{name: getattr(entry, name) for name in names})
        assert (entry, hash(entry), repr(entry)) == (built, hash(built), repr(built))
        assert {name: vars(entry)[name] for name in names} == vars(built)
        with pytest.raises(dataclasses.FrozenInstanceError):
            entry.summary = "changed"  # type: ignore[misc]
    # Serialized by orjson (tether's JSON) as one built whole, though nothing of it was read before:
    # field by field, not from what its __dict__ holds so far.
    for entry, built in zip(app.history("t"), app.history("t"), strict=True):
        eager = tether.HistoryEntry(**{name: getattr(built, name) for name in names})
        assert orjson.dumps(entry, default=str) == orjson.dumps(eager, default=str)
    assert not hasattr(object.__new__(tether.HistoryEntry), "summary")  # an entry never made has none
    with pytest.raises(AttributeError, match="'HistoryEntry' object has no attribute 'sumary'"):
        _ = app.history("t")[0].sumary  # type: ignore[attr-defined]


def test_listing_a_history_decodes_no_event(app: tether.App) -> None:
    # A page of a long history, or what came after the last entry seen, costs that much: an
    # entry makes its event, summary and time when one is first read (a step's name is read
    # from its first event's JSON).
    trip = _trip(app, [])
    app.run(trip, "NYC", task_id="t")
    history = app.history("t")
    assert [e.step for e in history if e.boundary == "before step 1"] == ["search"]
    assert not any({"event", "summary", "at"} & set(vars(entry)) for entry in history)
    last = history[-1]
    assert (last.summary, "event" in vars(last)) == (describe(last.event), True)
    assert [e.event for e in history] == [r.event for r in app.log.events("t")]


def test_history_marks_step_boundaries(app: tether.App) -> None:
    trip = _trip(app, [])
    app.run(trip, "NYC", task_id="t")
    history = app.history("t")
    assert [h.seq for h in history] == list(range(1, len(history) + 1))
    boundaries = [(h.boundary, h.step) for h in history if h.boundary]
    assert boundaries == [
        ("before step 1", "search"),
        ("after step 1", "search"),
        ("before step 2", "pick"),
        ("after step 2", "pick"),
        ("before step 3", "book"),
        ("after step 3", "book"),
    ]
    assert any("call #1 search" in h.summary for h in history)
    assert any(h.summary.startswith("decided flight") for h in history)
    before, after = app.state_before("t", 2), app.state_after("t", 2)
    assert before.position == "step 2 of 3; 1 committed" and before.decisions == ()
    assert after.position == "step 3 of 3; 1–2 committed" and after.decisions[0].choice == "NYC-1"
    assert app.state_before("t", "book").version == app.state_after("t", "pick").version
    with pytest.raises(tether.InvalidInputError, match="no step"):
        app.state_before("t", 7)
    # app.state takes the same points by keyword: one of them at most.
    assert app.state("t", before_step=2) == before and app.state("t", after_step="pick") == after
    assert app.state("t", at=3) == app.state_at("t", 3) and app.state("t") == app.state_at("t", app.state("t").version)
    with pytest.raises(tether.InvalidInputError, match="at most one of at, before_step and after_step"):
        app.state("t", at=3, after_step=2)


def test_diff_is_an_rfc6902_patch_between_any_two_states(app: tether.App) -> None:
    import jsonpatch

    trip = _trip(app, [])
    app.run(trip, "NYC", task_id="t")
    last = app.state("t").version
    diff = app.diff("t", 3, last)
    start = app.state_at("t", 3).model_dump(mode="json")
    end = app.state_at("t", last).model_dump(mode="json")
    assert jsonpatch.apply_patch(start, diff.patch) == end
    assert "~ /status: completed" in diff.render() and "/decisions/0" in diff.render()
    assert app.diff("t", 4, 4).patch == [] and "the same" in app.diff("t", 4, 4).render()


def test_fork_runs_from_that_point_and_leaves_the_parent_alone(app: tether.App) -> None:
    ran: list[str] = []
    trip = _trip(app, ran)
    app.run(trip, "NYC", task_id="t")
    parent_rows = _rows(app, "t")
    parent_state = app.state("t")
    after_search = app.state_after("t", 1).version
    fork = app.fork("t", at=after_search, inputs={"dest": "NYC", "pick": 1}, new_id="t-alt")
    assert fork.status is tether.Status.PENDING and fork.state.parent == tether.ParentRef(task_id="t", seq=after_search)
    done = app.resume("t-alt")
    assert done.output == "booked NYC-2"
    assert ran == ["search NYC", "book NYC-1", "book NYC-2"]  # the search was not run again
    assert _rows(app, "t") == parent_rows and app.state("t") == parent_state  # byte for byte
    cross = app.diff("t", parent_state.version, done.state.version, other="t-alt")
    assert any(op["path"] == "/output" and op["value"] == "booked NYC-2" for op in cross.patch)
    # A fork of a fork.
    again = app.fork("t-alt", at=done.state.version - 2, new_id="t-alt-2")
    assert app.resume(again.task_id).output == "booked NYC-2" and len(ran) == 3  # all recorded
    assert app.replay("t-alt-2").clean


def test_forking_costs_one_event_whatever_the_history(app: tether.App) -> None:
    state = app.log.create(type="long", task_id="long")
    version = state.version
    for i in range(500):
        version = app.log.append("long", [ObservationRecorded(key="k", value=i)], version)
    fork = app.fork("long", at=400, new_id="long-fork")
    assert fork.state.observations["k"].value == 398
    assert len(app.store.read_events(app.tenant, "long-fork", after=400)) == 1  # only its own TaskForked
    assert app.state_at("long-fork", 400).observations["k"].value == 398


def test_fork_of_a_waiting_and_of_a_failed_task(app: tether.App) -> None:
    @app.tool(retry=tether.Retry(max_attempts=1))
    def flaky(ok: bool) -> str:
        if not ok:
            raise RuntimeError("down")
        return "up"

    @app.task
    def t(ctx: tether.TaskContext, ok: bool) -> str:
        answer = ctx.wait_for_input("go")
        return f"{answer}:{ctx.call(flaky, ok)}"

    app.run(t, False, task_id="w")
    app.send_input("w", "go", "yes")
    failed = app.resume("w")
    assert failed.status is tether.Status.FAILED
    answered_at = next(h.seq for h in app.history("w") if h.type == "InputReceived")
    retry = app.fork("w", at=answered_at, inputs={"ok": True}, new_id="w2")
    assert app.resume(retry.task_id).output == "yes:up"
    waiting = app.fork("w", at=answered_at - 1, new_id="w3")  # before the answer: it waits again
    assert app.resume(waiting.task_id).status is tether.Status.AWAITING_INPUT


def test_rewind_takes_the_place_and_keeps_the_abandoned_branch(app: tether.App) -> None:
    ran: list[str] = []
    trip = _trip(app, ran)
    app.run(trip, "NYC", task_id="t")
    abandoned_rows = _rows(app, "t")
    to = app.state_after("t", 1).version
    rewound = app.rewind("t", to=to)
    assert rewound.task_id == "t" and rewound.status is tether.Status.PENDING
    archived = app.state("t~1")
    assert archived.superseded_by == "t" and archived.status is tether.Status.COMPLETED
    assert _rows(app, "t~1")[: len(abandoned_rows)] == abandoned_rows
    assert app.resume("t").output == "booked NYC-1" and ran.count("search NYC") == 1
    assert {s.task_id for s in app.list_tasks()} == {"t", "t~1"}
    app.rewind("t", to=to)
    assert app.state("t~2").superseded_by == "t"


def test_replay_reports_divergence_without_running_or_writing(app: tether.App) -> None:
    ran: list[str] = []
    trip = _trip(app, ran)
    app.run(trip, "NYC", task_id="t")
    rows = _rows(app, "t")
    report = app.replay("t")
    assert report.clean and "replays cleanly" in str(report) and ran == ["search NYC", "book NYC-1"]
    assert app.replay("t", upto=6).clean

    deployed = tether.App(app.store)  # the next version of the code, against the same store

    @deployed.tool
    def search_v2(dest: str) -> list[str]:
        ran.append("v2")
        return []

    @deployed.task(name="trip")
    def trip_v2(ctx: tether.TaskContext, dest: str, pick: int = 0) -> str:
        ctx.plan(["search", "pick", "book"])
        with ctx.step("search"):
            ctx.call(search_v2, dest)
        return "changed"

    report = deployed.replay("t")
    assert not report.clean and report.divergence is not None
    assert "call #1 search" in str(report) and "search_v2" in str(report)
    assert ran == ["search NYC", "book NYC-1"] and _rows(app, "t") == rows


def test_a_fork_reads_and_resumes_after_its_parent_is_rewound(store_url: str) -> None:
    """A fork never changes with its parent: rewinding the parent gives its name to another branch,
    and the fork's calls, which it shares with the parent up to the fork point, are still read
    through the fork (they were read through the parent's name: in the App that forked, reading
    them raised 'rewound or deleted' and resuming failed the fork; found by a review)."""
    from tether.events import fold

    app = tether.App(store_url, snapshots=tether.SnapshotPolicy(every=8, size_ratio=0))
    look = app.tool(name="look", readonly=True)(lambda i: {"i": i, "pad": "x" * 600})

    @app.task
    def job(ctx: tether.TaskContext, n: int) -> int:
        total = sum(ctx.call(look, i)["i"] for i in range(n))
        ctx.wait_for_input("go")
        return total

    app.run(job, 40, task_id="p")
    app.fork("p", at=30, new_id="p-fork")  # calls 1..28, and pending
    app.rewind("p", to=10)
    assert len(app.state("p-fork").calls) == 28
    assert app.resume("p-fork").status is tether.Status.AWAITING_INPUT  # its calls 29..40 run, then the wait
    fresh = tether.App(app.store)
    assert list(fresh.state("p-fork").calls) == list(fold(fresh.log.events("p-fork")).calls)
    assert len(fresh.state("p-fork").calls) == 40


def test_a_fork_loaded_before_its_parent_is_rewound_reads_its_own_calls(store_url: str) -> None:
    """Loaded elsewhere with its calls not read yet, then the parent rewound and gone on: the fork's
    calls are its own, not taken from the snapshots of the branch that now has the parent's name."""
    from tether.events import CallCompleted, DecisionMade, fold

    def looked(n: int, tag: str) -> CallCompleted:
        result = {"n": n, "tag": tag, "pad": "x" * 600}
        return CallCompleted(n=n, result=result, attempt=1, duration=0.01, key=f"{tag}{n}", tool="look", args={"n": n})

    log = tether.TaskLog(store_url, snapshots=tether.SnapshotPolicy(every=8, size_ratio=0))
    version, n = log.create(type="t", task_id="p").version, 0
    while version < 41:
        if version + 1 == 19:
            version = log.append("p", [DecisionMade(name="d", choice=1, rationale="r")], version)
        else:
            n += 1
            version = log.append("p", [looked(n, "a")], version)
    log.fork("p", 30, new_id="p-f")
    elsewhere = tether.TaskLog(log.store).load("p-f")  # another reader; its calls not read yet
    log.rewind("p", 10, archive_id="p~1")
    current = log.load("p")
    version, n = current.version, len(current.calls)
    for _ in range(50):
        n += 1
        version = log.append("p", [looked(n, "b")], version)
    assert list(elsewhere.calls) == list(fold(log.events("p-f")).calls)


def _waits_then_sends(app: tether.App, sent: list[str]) -> Any:
    send = app.tool(name="send")(lambda x: sent.append(x) or x)

    @app.task(name="waits")
    def waits(ctx: tether.TaskContext) -> str:
        ctx.call(send, "first")
        try:
            ctx.wait_for_input("go", timeout=0.3)
        except tether.InputTimeout:
            ctx.call(send, "after the wait")
        return "done"

    return waits


def test_the_branch_a_rewind_sets_aside_is_never_run_again(store_url: str) -> None:
    """Set aside, a waiting (or sleeping, or pending) branch stayed claimable: a worker took it when
    its wait timed out and its code made its calls a second time, beside its successor's (found in
    this session). It is cancelled now, unless it had finished, and listed by no wait."""
    import time

    sent: list[str] = []
    app = tether.App(store_url, inline_wait=0)
    waits = _waits_then_sends(app, sent)
    app.run(waits, task_id="p")
    app.rewind("p", to=app.state("p").version)  # back to the wait itself
    set_aside = app.state("p~1")
    assert set_aside.status is tether.Status.CANCELLED and set_aside.superseded_by == "p"
    assert set_aside.waiting is None and [w.task_id for w in app.pending_inputs()] == []
    row = app.store.get_task(app.tenant, "p~1")
    assert row is not None and row.status == "cancelled" and row.wake_at is None
    time.sleep(0.4)
    app.run_worker(concurrency=1, idle_exit=True, poll=0.05)
    assert sent == ["first", "after the wait"]  # once: the successor's, never the set-aside branch's
    assert app.get("p").status is tether.Status.COMPLETED
    done = app.run(waits, task_id="q")
    assert done.status is tether.Status.AWAITING_INPUT
    app.send_input("q", "go", True)
    app.resume("q")
    app.rewind("q", to=2)  # a finished branch set aside keeps its status
    assert app.get("q~1").status is tether.Status.COMPLETED
