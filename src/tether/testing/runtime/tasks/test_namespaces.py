"""Task ids cannot reach tether's own streams, and one unreadable stream never hides the others."""

from __future__ import annotations

import time

import pytest

import tether
from tether.store import EventRow, TaskRow


def _app(url: str) -> tether.App:
    app = tether.App(url)

    @app.task
    def noop(ctx: tether.TaskContext) -> int:
        return 1

    return app


@pytest.mark.parametrize("task_id", ["user:ada", "session:s1", "tether:x"])
def test_task_ids_cannot_take_internal_prefixes(store_url: str, task_id: str) -> None:
    app = _app(store_url)
    with pytest.raises(tether.InvalidInputError, match="prefix tether keeps"):
        app.run("noop", task_id=task_id)
    with pytest.raises(tether.InvalidInputError, match="prefix tether keeps"):
        app.start("noop", task_id=task_id)
    app.user("ada").set("k", 1)
    app.session("s1").add("user", "hi")
    ok = app.run("noop")
    assert [t.task_id for t in app.list_tasks()] == [ok.task_id]
    assert app.user("ada").get("k") == 1
    app.close()


def test_one_unreadable_stream_does_not_break_the_listing(store_url: str) -> None:
    app = _app(store_url)
    good = app.run("noop")
    now = time.time()
    row = TaskRow("broken", app.tenant, "noop", "pending", None, None, now, now, 1)
    app.store.create_task(app.tenant, row, EventRow(1, "NoSuchEvent", 1, now, '{"x": 1}'))
    listed = {t.task_id: t for t in app.list_tasks()}
    assert set(listed) == {"broken", good.task_id}
    assert listed["broken"].position.startswith("unreadable: UnknownEventTypeError")
    assert listed[good.task_id].status is tether.Status.COMPLETED
    app.close()


def test_a_refused_fork_writes_nothing(store_url: str) -> None:
    app = _app(store_url)
    app.session("s1").add("user", "hi")
    app.user("ada").set("k", 1)
    internal = tether.store.TaskFilter(internal=True)
    before = app.store.list_tasks(app.tenant, internal)
    for stream in ("session:s1", "user:ada"):
        with pytest.raises(tether.InvalidInputError, match="tether's own streams"):
            app.fork(stream, at=1)
        with pytest.raises(tether.InvalidInputError, match="tether's own streams"):
            app.fork(stream, at=1, new_id="my-fork")
    assert app.store.list_tasks(app.tenant, internal) == before
    with pytest.raises(tether.TaskNotFoundError):
        app.get("my-fork")
    app.close()
