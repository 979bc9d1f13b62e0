"""A task killed mid-call, then resumed by changed code: each change is refused, naming what the
history records and what the code asks for, and the task's record is left exactly as it was."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest

import tether
from tests._forkserver import ForkServer, ForkServers

HERE = Path(__file__).parent
AGENT = HERE / "_changing_agent.py"
ENV = {**os.environ, "PYTHONPATH": str(HERE.parent.parent / "src")}
PRELOAD = ("tether", "tether.store.sqlite", "tether.store.postgres")


@pytest.fixture
def servers(fork_servers: ForkServers) -> tuple[ForkServer, ForkServer]:
    """Each run a process of its own, forked from a server that has imported tether; the runs after
    the kill from the other server, so they hash as fresh processes would (tests/_forkserver.py)."""
    return fork_servers(PRELOAD, ENV)


def run(server: ForkServer, url: str, version: str, **env: str) -> subprocess.CompletedProcess[str]:
    return server.run(AGENT, url, version, env={**ENV, **env}, timeout=60)


@pytest.mark.crash
@pytest.mark.parametrize(
    ("version", "recorded", "requested"),
    [
        ("insert", "call #2 email(", "call #2 check_tone("),
        ("args", '"body":"draft about tether"', '"body":"DRAFT ABOUT TETHER"'),
        ("remove", "call #2 email(", "call #2 archive("),
    ],
)
def test_changed_code_is_refused_and_writes_nothing(
    tmp_path: Path, make_url: Any, servers: tuple[ForkServer, ForkServer], version: str, recorded: str, requested: str
) -> None:
    url = make_url(tmp_path)
    flag = tmp_path / "kill"
    flag.touch()
    first_life, next_lives = servers
    killed = run(first_life, url, "v1", TETHER_KILL_IN_B=str(flag))
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    app = tether.App(url)
    state = app.state("news-1")
    assert state.call(2) is not None and state.call(2).status == "intended"  # killed inside the email
    before = [tuple(r) for r in app.store.read_events(app.tenant, "news-1")]
    changed = run(next_lives, url, version)
    assert changed.returncode != 0
    assert "NonDeterminismError" in changed.stderr, changed.stderr
    assert recorded in changed.stderr and requested in changed.stderr, changed.stderr
    assert [tuple(r) for r in app.store.read_events(app.tenant, "news-1")] == before
    # The code as it was still resumes the task, with the interrupted email under its old key.
    done = run(next_lives, url, "v1")
    assert done.returncode == 0, done.stderr
    final = tether.App(url).state("news-1")
    assert final.status is tether.Status.COMPLETED and final.call(2).key == state.call(2).key
