"""Every time the CLI shows is UTC, whatever the zone of the machine it runs on: `logs` and
`history` give an event the same time. In-process, through click's CliRunner."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC
from pathlib import Path

import pytest
from click.testing import CliRunner

import tether
from tether.cli import main


@pytest.fixture
def in_new_york(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("TZ", "America/New_York")
    time.tzset()
    assert time.timezone != 0  # the zone took (this test can tell UTC from local time)
    yield
    monkeypatch.undo()
    time.tzset()


def test_logs_and_history_show_an_event_at_the_same_utc_time(tmp_path: Path, in_new_york: None) -> None:
    path = str(tmp_path / "t.db")
    with tether.App(path) as app:

        @app.task
        def hello(ctx: tether.TaskContext) -> str:
            return "hi"

        app.run(hello, task_id="t1")
        first = app.history("t1")[0].at.astimezone(UTC).strftime("%H:%M:%S.%f")[:-3]
    env = {"COLUMNS": "120", "TETHER_URL": ""}
    logs = CliRunner().invoke(main, ["logs", "t1", "--db", path], env=env).output
    history = CliRunner().invoke(main, ["history", "t1", "--db", path], env=env).output
    assert logs.splitlines()[0].startswith(f"{first} #1 "), logs
    assert any(line.startswith(f"1    {first} ") for line in history.splitlines()), history
