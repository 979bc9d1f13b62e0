"""A process's caches never outlive what another process did to the store: a rewind, a delete."""

from __future__ import annotations

import pytest

import tether


def _pair(url: str) -> tuple[tether.App, tether.App]:
    if url.startswith("memory"):
        store = tether.open_store(url)
        apps = (tether.App(store), tether.App(store))
    else:
        apps = (tether.App(url), tether.App(url))
    for app in apps:

        @app.task(name="approval")
        def approval(ctx: tether.TaskContext) -> object:
            ctx.plan(["ask"])
            return ctx.wait_for_input("approve")

    return apps


def test_an_answer_after_a_rewind_elsewhere_reaches_the_task(store_url: str) -> None:
    here, there = _pair(store_url)
    run = here.run("approval", task_id="trip")
    assert run.status is tether.Status.AWAITING_INPUT
    assert here.get("trip").state.waiting is not None  # this process now caches the task
    there.rewind("trip", to=1)  # another process: "trip" is a new branch, the old one "trip~1"
    here.send_input("trip", "approve", True)
    assert there.state("trip").received == {"approve": True}
    assert here.state("trip").received == {"approve": True}
    assert "approve" not in there.state("trip~1").received
    assert there.resume("trip").output is True
    for app in (here, there):
        app.close()


def test_a_session_deleted_and_made_again_elsewhere_reads_cleanly(store_url: str) -> None:
    here, there = _pair(store_url)
    here.session("s1").add("user", "first")
    assert [m.content for m in here.session("s1").messages()] == ["first"]
    there.delete_session("s1")
    there.session("s1").add("user", "second")
    for _ in range(2):  # every later read, not only the first
        assert [m.content for m in here.session("s1").messages()] == ["second"]
    here.session("s1").add("user", "third")
    assert [m.content for m in there.session("s1").messages()] == ["second", "third"]
    for app in (here, there):
        app.close()


def test_a_task_deleted_elsewhere_is_not_found_here(store_url: str) -> None:
    here, there = _pair(store_url)
    here.run("approval", task_id="gone")
    there.store.delete_task(there.tenant, "gone")
    with pytest.raises(tether.TaskNotFoundError):
        here.get("gone")
    for app in (here, there):
        app.close()
