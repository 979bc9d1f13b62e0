"""`--actor` on the CLI's write verbs: recorded in the task's history, the OS user name by default."""

from __future__ import annotations

import getpass
import os
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

import tether
from tests.cli._console import run_tether
from tests.cli.test_cli import pythonpath
from tests.cli.test_fix_cli import python, write
from tether.cli import main


def cli(folder: Path, *args: str, user: str = "ci-user") -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TETHER_URL": "", "COLUMNS": "200", "PYTHONPATH": pythonpath(folder), "LOGNAME": user}
    return run_tether(*args, cwd=folder, env=env)


def test_send_cancel_and_retry_record_who_did_them(tmp_path: Path) -> None:
    write(tmp_path, broken=True)
    started = python(tmp_path, "from agent import app; [app.run('mail', task_id=t) for t in ('m1', 'm2')]")
    assert started.returncode == 0, started.stderr
    assert cli(tmp_path, "send", "m1", "approve", "true", "--db", "agent.db").returncode == 0  # as the OS user
    assert cli(tmp_path, "resume", "m1", "--app", "agent:app").returncode == 1  # still broken
    write(tmp_path, broken=False)
    fixed = cli(tmp_path, "retry", "m1", "--app", "agent:app", "--actor", "ops")
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    cancelled = cli(tmp_path, "cancel", "m2", "--app", "agent:app", "--actor", "dora", "--reason", "not needed")
    assert cancelled.returncode == 0, cancelled.stdout + cancelled.stderr
    assert cancelled.stdout.startswith("cancelled m2: not needed")

    lines = cli(tmp_path, "history", "m1", "--db", "agent.db").stdout
    assert "received 'approve' = true by ci-user" in lines and "retried by ops after ValueError" in lines
    assert "cancellation requested by dora: not needed" in cli(tmp_path, "history", "m2", "--db", "agent.db").stdout
    forked = cli(tmp_path, "fork", "m2", "--at", "2", "--id", "m3", "--db", "agent.db", "--actor", "eve")
    assert forked.returncode == 0, forked.stdout + forked.stderr
    assert "forked from m2 at event 2 by eve" in cli(tmp_path, "history", "m3", "--db", "agent.db").stdout
    rewound = cli(tmp_path, "rewind", "m3", "--to", "2", "--app", "agent:app")  # as the OS user
    assert rewound.returncode == 0, rewound.stdout + rewound.stderr
    assert "set aside by a rewind by ci-user" in cli(tmp_path, "history", "m3~1", "--db", "agent.db").stdout
    app = tether.App(f"sqlite:///{tmp_path / 'agent.db'}")
    actors = {h.type: getattr(h.event, "actor", None) for h in app.history("m1")}
    assert actors["InputReceived"] == "ci-user" and actors["RetryRequested"] == "ops"
    app.close()


def test_a_bad_actor_is_refused_by_name(tmp_path: Path) -> None:
    write(tmp_path, broken=False)
    assert python(tmp_path, "from agent import app; app.run('mail', task_id='m1')").returncode == 0
    refused = cli(tmp_path, "send", "m1", "approve", "true", "--db", "agent.db", "--actor", " ")
    assert refused.returncode != 0 and "actor must be a non-empty string" in refused.stdout + refused.stderr
    assert "InputReceived" not in cli(tmp_path, "history", "m1", "--db", "agent.db", "--json").stdout


def test_no_os_user_name_records_no_actor(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def nobody() -> str:
        raise OSError("No username set in the environment")

    monkeypatch.setattr(getpass, "getuser", nobody)
    db = tmp_path / "t.db"
    app = tether.App(f"sqlite:///{db}")

    @app.task
    def ask(ctx: tether.TaskContext) -> object:
        return ctx.wait_for_input("ok")

    app.run(ask, task_id="a")
    result = CliRunner().invoke(main, ["send", "a", "ok", "1", "--db", str(db)])
    assert result.exit_code == 0, result.output
    answer = next(h for h in app.history("a") if h.type == "InputReceived")
    assert answer.event.actor is None and answer.summary == "received 'ok' = 1"  # type: ignore[attr-defined]
    app.close()
