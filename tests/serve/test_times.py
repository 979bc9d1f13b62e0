"""Times the API gives are UTC with their offset whatever the server's own zone, the words of a
history entry included (a sleep's wake-up time)."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path

from starlette.testclient import TestClient

import tether
from tether.serve import create_app


def test_a_sleeps_wake_up_time_is_utc_with_its_offset_in_the_history(tmp_path: Path, in_new_york: None) -> None:
    url = f"sqlite:///{tmp_path / 't.db'}"
    with tether.App(url) as app:

        @app.task
        def nap(ctx: tether.TaskContext) -> str:
            ctx.sleep(3600)  # long: the run is set aside until it is due
            return "rested"

        task_id = app.start(nap).task_id
        app.resume(task_id)
        until = app.state(task_id).wake_at
    assert until is not None
    asgi = create_app(url, no_auth=True)
    with TestClient(asgi, base_url="http://127.0.0.1:8700") as client:
        entries = client.get(f"/v1/tasks/{task_id}/history").json()["items"]
    asgi.state.store.close()
    sleep = next(e for e in entries if e["type"] == "SleepScheduled")
    expected = datetime.fromtimestamp(until.timestamp(), UTC).isoformat(" ", "seconds")
    assert sleep["summary"] == f"sleep until {expected}", sleep
    assert expected.endswith("+00:00")
    assert all(re.fullmatch(r"\d{4}-\d\d-\d\dT[\d:.]+Z", e["at"]) for e in entries)
