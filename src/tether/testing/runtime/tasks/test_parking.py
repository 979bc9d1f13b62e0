"""A run no retry can get past is parked: the task is marked with the error, its record is left as it
was, no worker claims it again, and a person's act (fixed code resumed, an answer, a cancel) moves it
on and clears the mark."""

from __future__ import annotations

import pytest

import tether
from tether.testing import dump_database


def _events(app: tether.App, task_id: str) -> list[tuple[object, ...]]:
    return [tuple(r) for r in app.store.read_events(app.tenant, task_id)]


def _diverging_app(store_url: str) -> tuple[tether.App, dict[str, bool]]:
    app = tether.App(store_url)
    changed = {"on": False}

    @app.tool
    def charge(order: str) -> str:
        return f"charged {order}"

    @app.tool
    def refund(order: str) -> str:
        return f"refunded {order}"

    @app.task
    def job(ctx: tether.TaskContext, order: str) -> str:
        done = ctx.call(refund if changed["on"] else charge, order)
        ok = ctx.wait_for_input("go")
        return f"{done} {ok}"

    return app, changed


@pytest.mark.tether_requires("dump")
def test_a_divergent_task_is_parked_once_and_no_worker_claims_it_again(store_url: str) -> None:
    app, changed = _diverging_app(store_url)
    assert app.run("job", "o1", task_id="t").status is tether.Status.AWAITING_INPUT
    app.send_input("t", "go", True)
    other = app.start("job", "o2", task_id="u").task_id  # started after the change: runs under the new code
    changed["on"] = True
    events = _events(app, "t")

    runs = app.run_worker(idle_exit=True, poll=0.01)
    assert runs == 2  # "t" once (parked), "u" once; nothing claimed again
    assert app.get(other).status is tether.Status.AWAITING_INPUT
    assert _events(app, "t") == events  # the divergence wrote nothing
    handle = app.get("t")
    assert handle.status is tether.Status.AWAITING_INPUT and handle.parked is not None
    assert handle.parked.startswith("NonDeterminismError:") and "charge" in handle.parked
    [summary] = [s for s in app.list_tasks() if s.task_id == "t"]
    assert summary.parked == handle.parked
    before = dump_database(store_url, app.store)
    assert app.run_worker(idle_exit=True, poll=0.01) == 0  # a parked task is nothing to run
    assert app.store.claim(app.tenant, "w", 30.0, 1e12) is None
    assert dump_database(store_url, app.store) == before

    changed["on"] = False  # the code fixed: a person resumes it, and the mark goes with the run's first move
    assert app.resume("t").output == "charged o1 True"
    assert app.get("t").parked is None


@pytest.mark.parametrize("act", ["answer", "cancel"])
def test_a_person_acting_on_a_parked_task_clears_the_mark(store_url: str, act: str) -> None:
    app, changed = _diverging_app(store_url)
    app.run("job", "o1", task_id="t")
    changed["on"] = True
    app.send_input("t", "go", True)
    assert app.run_worker(idle_exit=True, poll=0.01) == 1
    assert app.get("t").parked is not None
    changed["on"] = False  # (a cancel runs the task's compensations here, through its code)
    if act == "answer":
        app.send_input("t", "note", "looked at it")
        assert app.get("t").parked is None
    else:
        app.cancel("t", "given up")
        assert app.get("t").parked is None
    app.run_worker(idle_exit=True, poll=0.01)
    expected = tether.Status.COMPLETED if act == "answer" else tether.Status.CANCELLED
    assert app.get("t").status is expected


def test_park_is_refused_for_a_task_that_moved_on(store_url: str) -> None:
    app, _ = _diverging_app(store_url)
    app.run("job", "o1", task_id="t")
    version = app.get("t").state.version
    app.send_input("t", "go", True)
    assert not app.store.park(app.tenant, "t", version, "NonDeterminismError: stale")
    assert app.get("t").parked is None
    assert app.store.park(app.tenant, "t", version + 1, "NonDeterminismError: now")
    assert app.get("t").parked == "NonDeterminismError: now"
    assert not app.store.park(app.tenant, "missing", 1, "x")
