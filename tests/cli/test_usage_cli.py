"""tether usage (per task, grouped, --since, --json), the usage lines of tether show, and the progress bar
of long work: counts on a terminal, nothing in a pipe."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

from click.testing import CliRunner
from rich.console import Console

import tether
from tether.cli import main
from tether.cli.progress import progress_bar


def make(path: Path) -> str:
    url = f"sqlite:///{path / 'u.db'}"
    app = tether.App(url)

    @app.tool
    def model(q: str) -> dict:
        return {"model": "gpt-4o", "usage": {"prompt_tokens": 10, "completion_tokens": 3}}

    @app.task
    def ask(ctx: tether.TaskContext, q: str) -> str:
        ctx.call(model, q)
        ctx.usage(cost=0.01)
        return "ok"

    app.run(ask, "a", task_id="t1", user_id="ada")
    app.run(ask, "b", task_id="t2", user_id="bob")
    app.run(ask, "c", task_id="t3", user_id="ada")
    app.close()
    return url


def test_usage_per_task_grouped_and_as_json(tmp_path: Path) -> None:
    url = make(tmp_path)
    runner = CliRunner()
    grouped = runner.invoke(main, ["usage", "--db", url, "--by", "user", "--since", "7d", "--json"])
    assert grouped.exit_code == 0, grouped.output
    body = json.loads(grouped.output)
    assert body["groups"]["ada"]["total_tokens"] == 26 and body["groups"]["bob"]["calls"] == 1
    assert body["total"]["cost"] == 0.03 and body["tasks"] == 3
    one = runner.invoke(main, ["usage", "t1", "--db", url])
    assert one.exit_code == 0 and "usage: 10 in, 3 out, cost 0.0100 over 1 call" in one.output
    shown = runner.invoke(main, ["show", "t1", "--db", url])
    assert shown.exit_code == 0 and "usage of t1" in shown.output and "gpt-4o" in shown.output
    later = runner.invoke(main, ["usage", "--db", url, "--since", "2999-01-01", "--json"])
    assert json.loads(later.output)["total"]["calls"] == 0
    # times in --json are ISO 8601 in UTC with the offset, as every verb's (not epoch seconds)
    assert json.loads(later.output)["since"] == "2999-01-01T00:00:00+00:00"
    (call,) = json.loads(runner.invoke(main, ["usage", "t1", "--db", url, "--json"]).output)["calls"]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT[\d:.]+\+00:00", call["at"]), call
    bad = runner.invoke(main, ["usage", "--db", url, "--since", "soon"])
    assert bad.exit_code != 0 and "duration back from now (7d, 12h" in bad.output


def test_usage_tables_are_plain_text_in_a_pipe(tmp_path: Path) -> None:
    """`usage` and the usage table of `show` are the CLI's one table: columns under a header line
    in a pipe, no box drawing, as every other table."""
    url = make(tmp_path)
    runner = CliRunner()
    for args in (["usage", "--db", url, "--by", "user"], ["usage", "t1", "--db", url], ["show", "t1", "--db", url]):
        done = runner.invoke(main, args, env={"COLUMNS": "80"})
        assert done.exit_code == 0, done.output
        assert not set("─━│┃┏┓┗┛┡┩╇") & set(done.output), done.output
    grouped = runner.invoke(main, ["usage", "--db", url, "--by", "user"], env={"COLUMNS": "80"}).output
    assert [line.split() for line in grouped.splitlines()[1:3]] == [
        ["group", "calls", "input", "output", "total", "cost"],
        ["ada", "2", "20", "6", "26", "0.0200"],
    ], grouped


def test_check_shows_counts_on_a_terminal_and_nothing_in_a_pipe(tmp_path: Path) -> None:
    app = tether.App(f"sqlite:///{tmp_path / 'c.db'}")

    @app.task
    def waits(ctx: tether.TaskContext) -> None:
        ctx.wait_for_input("go")

    for i in range(3):
        app.run(waits, task_id=f"w{i}")
    try:
        for terminal in (True, False):
            screen = io.StringIO()
            out = Console(file=screen, force_terminal=terminal, width=100)
            with progress_bar(out):
                report = app.check()
            assert len(report.reports) == 3 and report.clean
            text = screen.getvalue()
            assert ("3/3" in text and "replaying stored tasks" in text) if terminal else text == ""
        screen = io.StringIO()
        with progress_bar(Console(file=screen, force_terminal=True), quiet=True):  # --json
            app.check()
        assert screen.getvalue() == ""
    finally:
        app.close()
