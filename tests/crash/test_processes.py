"""Several real processes writing to one SQLite file at once."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

import tether
from tests._forkserver import ForkServers
from tests.crash.test_workers import PRELOAD, SERVER_ENV

HERE = Path(__file__).parent


def test_processes_appending_lose_and_duplicate_nothing(
    tmp_path: Path, make_url: Any, fork_servers: ForkServers
) -> None:
    url = make_url(tmp_path)
    # Each appender a process of its own, forked from a server that has imported tether (the one the
    # worker tests use) instead of a fresh interpreter importing it again.
    server, _ = fork_servers(PRELOAD, SERVER_ENV)
    log = tether.TaskLog(url, snapshots=tether.SnapshotPolicy(every=25, size_ratio=0))
    shared = log.create(type="shared", task_id="shared").task_id
    names, count = ["a", "b", "c", "d"], 60
    gate = tmp_path / "go"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE.parent.parent / "src"), str(HERE)])}
    procs = [server.start(HERE / "_appender.py", url, shared, name, str(count), str(gate), env=env) for name in names]
    deadline = time.monotonic() + 60
    while not all((tmp_path / f"ready-{n}").exists() for n in names):
        assert time.monotonic() < deadline and all(p.poll() is None for p in procs), "appenders did not start"
        time.sleep(0.01)
    gate.touch()
    reports = []
    for proc in procs:
        done = proc.result()
        assert done.returncode == 0, done.stderr
        reports.append(json.loads(done.stdout))

    events = log.events(shared)
    assert [r.seq for r in events] == list(range(1, len(events) + 1))  # no gaps, no duplicates
    keys = [r.event.key for r in events[1:]]  # type: ignore[attr-defined]
    assert sorted(keys) == sorted(f"{n}:{i}" for n in names for i in range(count))
    assert sum(r["conflicts"] for r in reports) > 0, "the processes never raced; the test proved nothing"
    state = tether.TaskLog(url).load(shared)
    assert len(state.observations) == len(names) * count
    for name in names:
        own = log.load(f"own-{name}")
        assert own.version == count + 1 and own.observations["i"].value == count - 1


def test_a_writer_that_trusts_its_knowledge_still_sees_another_process(tmp_path: Path) -> None:
    """The single-writer fast path: after another process writes, the next append checks again."""
    url = f"sqlite:///{tmp_path / 't.db'}"
    log = tether.TaskLog(url)
    state = log.create(type="t", task_id="t")
    token = log.store.acquire_lease(log.tenant, "t", "me", 60, time.time())
    assert token is not None
    version = log.append("t", [tether.events.OutputSet(output=1)], state.version, fence=token)
    version = log.append("t", [tether.events.OutputSet(output=2)], version, fence=token)  # trusted now
    code = (
        "import time, tether\n"
        f"log = tether.TaskLog({url!r})\n"
        "log.store.acquire_lease(log.tenant, 't', 'thief', 60, time.time() + 120)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(HERE.parent.parent / "src")}
    subprocess.run([sys.executable, "-c", code], env=env, check=True, timeout=60)
    with pytest.raises(tether.LeaseLostError):
        log.append("t", [tether.events.OutputSet(output=3)], version, fence=token)
    assert log.load("t").output == 2
