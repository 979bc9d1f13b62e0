"""Every time the CLI shows is UTC, whatever the zone of the machine it runs on: `logs` and
`history` give an event the same time. In-process, through click's CliRunner."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner

import tether
from tether.cli import main


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


def test_a_workers_lines_are_stamped_in_utc(tmp_path: Path, in_new_york: None, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "napper.py").write_text(
        "import tether\napp = tether.App('tether.db')\n\n"
        "@app.task\ndef hello(ctx: tether.TaskContext) -> str:\n    return 'hi'\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    with tether.App(str(tmp_path / "tether.db")) as app:
        app.task(name="hello")(lambda ctx: "hi")  # only to enqueue: the worker has the code
        app.start("hello", task_id="t1")
    done = CliRunner().invoke(main, ["worker", "napper:app", "--idle-exit"], env={"TETHER_URL": ""})
    assert done.exit_code == 0, done.output
    line = next(line for line in done.output.splitlines() if "t1" in line)
    with tether.App(str(tmp_path / "tether.db")) as app:
        ended = app.history("t1")[-1].at.astimezone(UTC)
    stamped = datetime.combine(ended.date(), datetime.strptime(line[:8], "%H:%M:%S").time(), UTC)
    assert timedelta(seconds=-1) <= stamped - ended.replace(microsecond=0) <= timedelta(seconds=5), (line, ended)


def test_tasks_says_when_a_sleeping_task_wakes_in_utc_with_the_offset(tmp_path: Path, in_new_york: None) -> None:
    path = str(tmp_path / "t.db")
    with tether.App(path) as app:

        @app.task
        def nap(ctx: tether.TaskContext) -> str:
            ctx.sleep(3600)  # long: the run is set aside until it is due
            return "rested"

        app.run(nap, task_id="t1")
        wakes = app.state("t1").wake_at
    assert wakes is not None
    done = CliRunner().invoke(main, ["tasks", "--db", path], env={"COLUMNS": "200", "TETHER_URL": ""})
    assert f"wakes {wakes.astimezone(UTC).isoformat(' ', 'seconds')}" in done.output, done.output
