"""``tether worker --idle-exit`` beside a task it cannot run (its type is not the app's): it runs
the tasks due after it, tries it a handful of times at most, and exits."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

import tether
from tests.crash.test_workers import HERE, TETHER, _env


@pytest.mark.crash
@pytest.mark.timeout(240)
def test_idle_exit_runs_the_plain_tasks_and_exits_beside_a_stuck_one(tmp_path: Path, make_url: Any) -> None:
    url = make_url(tmp_path)
    app = tether.App(url)
    app.task(name="job")(lambda ctx, n, steps=5: n)
    app.task(name="ghost")(lambda ctx: None)  # a type the worker's app does not have
    app.start("ghost", task_id="ghost")  # due first: before, every claim took it again
    for n in range(3):
        app.start("job", n, steps=1, task_id=f"job-{n}")
    env = _env(tmp_path, url, TETHER_TEST_TTL="30.0", TETHER_TEST_SLOW="0.01")
    try:
        done = subprocess.run(
            [*TETHER, "worker", "_workapp:app", "--idle-exit", "--poll", "0.05"],
            cwd=HERE,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
    except subprocess.TimeoutExpired as exc:
        stopped = (exc.stderr or b"").decode().count("task ghost stopped")
        raise AssertionError(f"the worker did not exit in 60 s; it stopped on the ghost {stopped} times") from None
    assert done.returncode == 0, done.stderr
    assert [app.get(f"job-{n}").output for n in range(3)] == [0, 1, 2]
    attempts = done.stderr.count("task ghost stopped")
    assert 1 <= attempts <= 3, done.stderr
    assert "not claimed again for 1s" in done.stderr
    runs = re.search(r": (\d+) task runs", done.stderr)
    assert runs is not None and int(runs[1]) == 3 + attempts, done.stderr
    [ghost] = [s for s in app.list_tasks() if s.task_id == "ghost"]
    assert ghost.status is tether.Status.PENDING  # left as it was, for a worker whose app has its code
