"""Two processes writing to one session and one user document at once."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import tether
from tests._forkserver import ForkServers
from tests.crash.test_workers import PRELOAD, SERVER_ENV

HERE = Path(__file__).parent


def test_two_processes_one_session_one_user(tmp_path: Path, make_url: Any, fork_servers: ForkServers) -> None:
    url = make_url(tmp_path)
    # Each chatter a process of its own, forked from a server that has imported tether (the one the
    # worker tests use) instead of a fresh interpreter importing it again.
    server, _ = fork_servers(PRELOAD, SERVER_ENV)
    tether.App(url).session("shared", user_id="ada")  # created once, before the race
    gate, count = tmp_path / "go", 60
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE.parent.parent / "src"), str(HERE)])}
    procs = [server.start(HERE / "_chatter.py", url, name, str(count), str(gate), env=env) for name in ("a", "b")]
    deadline = time.monotonic() + 60
    while not all((tmp_path / f"ready-{n}").exists() for n in ("a", "b")):
        assert time.monotonic() < deadline and all(p.poll() is None for p in procs), "chatters did not start"
        time.sleep(0.01)
    gate.touch()
    for proc in procs:
        done = proc.result()
        assert done.returncode == 0, done.stderr
    app = tether.App(url)
    messages = app.session("shared").messages()
    contents = [m.content for m in messages]
    assert sorted(contents) == sorted(f"{n}:{i}" for n in ("a", "b") for i in range(count))  # both landed
    assert [m.seq for m in messages] == sorted(m.seq for m in messages)  # one total order
    for name in ("a", "b"):  # each process's messages in its own order
        mine = [c for c in contents if c.startswith(f"{name}:")]
        assert mine == [f"{name}:{i}" for i in range(count)]
    assert app.user("ada").get("count") == 2 * count  # no lost update
