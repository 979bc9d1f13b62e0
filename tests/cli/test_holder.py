"""What ``tether tasks`` says of a task's lease holder: a process on this host that is gone (taken
over at once by a worker running here), one alive here, one on another host (whose lease end is
when another worker takes over, if it has stopped), a worker's backoff."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import pytest

import tether
from tests.cli.test_cli import run

TTL = 45.0


@pytest.fixture
def listed(tmp_path: Path) -> dict[str, str | None]:
    """``tether tasks --json``'s holder of each task, held as its id says."""
    url = f"sqlite:///{tmp_path / 'tether.db'}"
    app = tether.App(url)
    app.task(name="job")(lambda ctx: None)
    host = socket.gethostname()
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # its pid is free now: a process that no longer exists
    owners = {
        "gone": f"{host}:{gone.pid}:0badc0de",
        "alive": f"{host}:{os.getpid()}:a11ce000",  # this test's process, alive
        "remote": "elsewhere.example:4242:f00dcafe",
        "backoff": f"{host}:{os.getpid()}:a11ce000:backoff",
        "free": None,
    }
    now = time.time()
    for task_id, owner in owners.items():
        app.start("job", task_id=task_id)
        if owner is not None:
            assert app.store.acquire_lease(app.tenant, task_id, owner, TTL, now) is not None
    done = run("tasks", "--db", url, "--json", cwd=tmp_path)
    return {t["task_id"]: t["held_by"] for t in json.loads(done.stdout)["items"]}


def _until(text: str) -> tuple[datetime, int]:
    found = re.search(r"(\d\d:\d\d:\d\d) \(in (\d+) s\)", text)
    assert found is not None, text
    return datetime.strptime(found[1], "%H:%M:%S"), int(found[2])


def _of_day(at: datetime) -> int:
    return at.hour * 3600 + at.minute * 60 + at.second


def test_a_dead_process_on_this_host_is_taken_over_at_once(listed: dict[str, str | None]) -> None:
    held = listed["gone"]
    assert held is not None and held.endswith("(process gone: a worker running on this host takes it over at once)")
    assert "until" not in held


def test_a_holder_on_another_host_shows_when_its_lease_ends(listed: dict[str, str | None]) -> None:
    held = listed["remote"]
    assert held is not None and held.startswith("elsewhere.example:4242:f00dcafe until ")
    assert held.endswith("; if that process has stopped, another worker takes it over then")
    assert "process gone" not in held
    at, left = _until(held)
    assert TTL - 30 <= left <= TTL
    expected = datetime.fromtimestamp(time.time() + left)  # the clock time shown is the local one
    apart = abs(_of_day(at) - _of_day(expected)) % 86400
    assert min(apart, 86400 - apart) <= 2, (held, expected)


def test_a_live_process_here_renews_its_lease(listed: dict[str, str | None]) -> None:
    held = listed["alive"]
    assert held is not None and held.endswith(", renewed while it runs") and "process gone" not in held
    assert TTL - 30 <= _until(held)[1] <= TTL


def test_a_task_held_aside_by_a_backoff_says_when_it_is_claimed_again(listed: dict[str, str | None]) -> None:
    held = listed["backoff"]
    assert held is not None and held.startswith(f"{socket.gethostname()}:")
    assert ":backoff" not in held and ": a run stopped with an error; claimed again from " in held
    assert TTL - 30 <= _until(held)[1] <= TTL


def test_a_free_task_is_held_by_nobody(listed: dict[str, str | None]) -> None:
    assert listed["free"] is None


def test_the_table_shows_the_same_words(tmp_path: Path, listed: dict[str, str | None]) -> None:
    table = run("tasks", "--db", f"sqlite:///{tmp_path / 'tether.db'}", cwd=tmp_path).stdout
    assert "(process gone: a worker running on this host takes it over at once)" in table
    assert "another worker takes it over then" in table
