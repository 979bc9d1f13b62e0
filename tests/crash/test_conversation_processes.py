"""Two processes writing to one session and one user document at once."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import tether

HERE = Path(__file__).parent


def test_two_processes_one_session_one_user(tmp_path: Path, make_url: Any) -> None:
    url = make_url(tmp_path)
    tether.App(url).session("shared", user_id="ada")  # created once, before the race
    gate, count = tmp_path / "go", 60
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE.parent.parent / "src"), str(HERE)])}
    procs = [subprocess.Popen([sys.executable, str(HERE / "_chatter.py"), url, name, str(count), str(gate)],
                              env=env, stderr=subprocess.PIPE) for name in ("a", "b")]
    deadline = time.monotonic() + 60
    while not all((tmp_path / f"ready-{n}").exists() for n in ("a", "b")):
        assert time.monotonic() < deadline and all(p.poll() is None for p in procs), "chatters did not start"
        time.sleep(0.01)
    gate.touch()
    for proc in procs:
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err.decode()
    app = tether.App(url)
    messages = app.session("shared").messages()
    contents = [m.content for m in messages]
    assert sorted(contents) == sorted(f"{n}:{i}" for n in ("a", "b") for i in range(count))  # both landed
    assert [m.seq for m in messages] == sorted(m.seq for m in messages)  # one total order
    for name in ("a", "b"):  # each process's messages in its own order
        mine = [c for c in contents if c.startswith(f"{name}:")]
        assert mine == [f"{name}:{i}" for i in range(count)]
    assert app.user("ada").get("count") == 2 * count  # no lost update
