"""Callers racing to create the same task id: the losers get what a later caller would get."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

import tether
from tether.testing import opens_share


def _app(store: tether.Store | str) -> tether.App:
    app = tether.App(store)

    @app.task
    def slow(ctx: tether.TaskContext) -> str:
        time.sleep(0.3)
        return "done"

    return app


def test_losing_the_create_race_returns_the_task(store_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    store = tether.open_store(store_url)
    loser, winner = _app(store), _app(store)
    create = loser.log.create

    def create_after_the_winner(**kwargs: Any) -> tether.TaskState:
        winner.start("slow", task_id="race")  # lands between the loser's look and its write
        return create(**kwargs)

    monkeypatch.setattr(loser.log, "create", create_after_the_winner)
    handle = loser.start("slow", task_id="race")
    assert handle.task_id == "race" and handle.status is tether.Status.PENDING
    token = store.acquire_lease("default", "race", "someone-else", 30, time.time())
    assert token is not None
    monkeypatch.setattr(loser.log, "create", create)  # (the task exists now; the patch is not needed)
    with pytest.raises(tether.TaskBusyError):
        loser.run("slow", task_id="race")
    store.close()


def test_simultaneous_runs_of_one_id(store_url: str) -> None:
    shared = None if opens_share(store_url) else tether.open_store(store_url)
    apps = [_app(shared if shared is not None else store_url) for _ in range(4)]
    outcomes: list[object] = []
    barrier = threading.Barrier(len(apps))

    def race(app: tether.App) -> None:
        barrier.wait()
        try:
            outcomes.append(app.run("slow", task_id="same"))
        except tether.TetherError as exc:
            outcomes.append(exc)

    threads = [threading.Thread(target=race, args=(app,)) for app in apps]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    kinds = {type(o).__name__ for o in outcomes}
    assert kinds <= {"TaskHandle", "TaskBusyError"}, outcomes
    assert apps[0].get("same").output == "done" or apps[0].get("same").status is tether.Status.RUNNING
    for app in apps:
        app.close()
