"""What lands while a run writes that the task waits: an answer or a cancel appended by another
writer between the run's question (or its sleep) and the status that says it waits. The status was
decided before them and written after them, over the wake-up they had set: the task stayed waiting
for an answer it had, or a cancel nobody carried out, with no wake-up, claimed by no worker (found by
a review racing real processes: 1% of tasks on SQLite, 10% on PostgreSQL). Now the run looks again.
The race is made certain here: the second writer (another App on the same store) writes right after
the run's question lands. And an early answer its wait's schema refuses is refused also when the run
that asked died before it could say so."""
# mypy: disable-error-code="arg-type,no-any-return"

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

import tether
from tether.events import InputRequested, SleepScheduled
from tether.testing import opens_share


class Approval(BaseModel):
    ok: bool


def _app(store_url: str) -> tether.App:
    app = tether.App(store_url)

    @app.task(name="ask")
    def ask(ctx: tether.TaskContext) -> bool:
        return ctx.wait_for_input("approve", schema=Approval).ok

    @app.task(name="nap")
    def nap(ctx: tether.TaskContext) -> str:
        ctx.sleep(3600)
        return "woke"

    return app


def _after(app: tether.App, event: type, then: Callable[[], None]) -> None:
    """Run ``then`` (the other writer) right after the run's append of ``event`` has landed."""
    append = app.log.append

    def appended(task_id: str, events: Any, *args: Any, **kwargs: Any) -> int:
        version = append(task_id, events, *args, **kwargs)
        if any(isinstance(e, event) for e in events):
            then()
        return version

    app.log.append = appended  # type: ignore[method-assign]


def _other(store_url: str, app: tether.App) -> tether.App:
    return _app(store_url) if opens_share(store_url) else app  # a memory store is its App's own


def test_an_answer_that_lands_as_the_wait_is_written_is_taken_at_once(store_url: str) -> None:
    app = _app(store_url)
    other = _other(store_url, app)
    _after(app, InputRequested, lambda: other.send_input("t", "approve", {"ok": True}))
    done = app.run("ask", task_id="t")
    assert done.status is tether.Status.COMPLETED and done.output is True, done


def test_a_cancel_that_lands_as_the_wait_is_written_is_carried_out(store_url: str) -> None:
    app = _app(store_url)
    other = _other(store_url, app)
    _after(app, InputRequested, lambda: other.request_cancel("t", reason="changed mind"))
    assert app.run("ask", task_id="t").status is tether.Status.CANCELLED


def test_a_cancel_that_lands_as_a_sleep_is_written_is_carried_out(store_url: str) -> None:
    app = _app(store_url)
    other = _other(store_url, app)
    _after(app, SleepScheduled, lambda: other.request_cancel("t", reason="changed mind"))
    assert app.run("nap", task_id="t").status is tether.Status.CANCELLED


def test_an_answer_to_nothing_asked_that_lands_as_a_sleep_is_written_leaves_it_asleep(store_url: str) -> None:
    app = _app(store_url)
    other = _other(store_url, app)
    _after(app, SleepScheduled, lambda: other.send_input("t", "later", {"ok": True}))
    slept = app.run("nap", task_id="t")
    row = app.store.get_task(app.tenant, "t")
    assert slept.status is tether.Status.SLEEPING and row is not None and row.wake_at is not None
    assert row.wake_at > row.updated_at + 3000  # still until its hour is up, not woken for nothing


CHILD = """
import os, sys
from tether.testing.runtime.waits.test_wait_races import _app, _after
from tether.events import InputRequested

app = _app(sys.argv[1])
_after(app, InputRequested, lambda: os._exit(9))  # killed right after the question landed
app.resume("t")
"""


@pytest.mark.tether_requires("cross_process", "durable")  # the run is a process of its own
def test_an_early_answer_the_schema_refuses_is_refused_after_a_crash_too(store_url: str, tmp_path: Path) -> None:
    """The run that asked died before it recorded the refusal: the next run refuses it, and waits."""
    app = _app(store_url)
    app.log.create(type="ask", task_id="t")
    app.send_input("t", "approve", {"ok": "perhaps"})  # before it is asked: kept, checked when asked
    env = {**os.environ, "PYTHONPATH": str(Path(tether.__file__).parents[1])}
    child = subprocess.run([sys.executable, "-c", CHILD, store_url], env=env, capture_output=True, text=True)
    assert child.returncode == 9, child.stderr
    again = _app(store_url)
    waiting = again.resume("t")
    assert waiting.status is tether.Status.AWAITING_INPUT, waiting.failure
    assert again.log.load("t").received == {}
    again.send_input("t", "approve", {"ok": True})
    assert again.resume("t").output is True
