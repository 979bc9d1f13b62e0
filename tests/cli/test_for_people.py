"""The CLI read by people: plain text in a pipe and under NO_COLOR, tables that fold at 80 columns, one
numbering of messages and calls, click's own refusals, JSON lists with a total and the next page, one
refusal of a missing database for every verb, hints with the real ids, shell completion of task ids,
``python -m tether`` and ``tether langgraph``. In-process, through click's CliRunner."""

from __future__ import annotations

import io
import json
import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path

import click
import pytest
from click.testing import CliRunner, Result

import tether
import tether.telemetry
from tests.cli._console import python
from tether.cli import main

BOX = set("─━│┃┌┐└┘├┤┬┴┼┏┓┗┛┡┩╇╋╭╮╰╯═║")
LONG_ID = "refund-" + "7" * 40


@pytest.fixture
def db(tmp_path: Path) -> Iterator[str]:
    """A refund task waiting for approval after a readonly lookup, a refund call and two messages of
    its conversation; and a finished trip with a long tool name."""
    path = str(tmp_path / "t.db")
    with tether.App(path) as app:

        @app.tool(readonly=True)
        def lookup_order(order: str) -> dict[str, object]:
            return {"order": order, "amount": 30, "items": ["socks", "hat", "scarf"]}

        @app.tool
        def refund_the_customer_in_full(order: str, amount: int) -> dict[str, object]:
            return {"refund": "r-1", "order": order, "amount": amount, "note": "to the card used for the order"}

        @app.task
        def refund(ctx: tether.TaskContext, order: str) -> str:
            ctx.plan(["look", "approve"])
            with ctx.step("look"):
                found = ctx.call(lookup_order, order=order)
                ctx.session.add("user", f"refund {order}?")
                ctx.session.add("assistant", "Asking a person.")
                ctx.call(refund_the_customer_in_full, order=order, amount=found["amount"])
            with ctx.step("approve"):
                ok = ctx.wait_for_input("approve_refund", prompt="Refund 30?", schema={"type": "boolean"})
            return "refunded" if ok else "kept"

        app.run(refund, "o-1", task_id=LONG_ID, session_id="s-1")
        for i in range(3):
            app.run(refund, f"o-{i + 2}", task_id=f"other-{i}")
    yield path


def cli(*args: str, columns: int = 80, env: dict[str, str] | None = None) -> Result:
    return CliRunner().invoke(main, list(args), env={"COLUMNS": str(columns), "TETHER_URL": "", **(env or {})})


def test_a_pipe_gets_plain_text_without_box_drawing_or_colour(db: str) -> None:
    for args in (("tasks",), ("show", LONG_ID), ("history", LONG_ID), ("keys", "list")):
        done = cli(*args, "--db", db)
        assert done.exit_code == 0, done.output
        assert not BOX & set(done.output) and "\x1b[" not in done.output, done.output


def test_no_color_in_a_terminal_is_plain_text_too(monkeypatch: pytest.MonkeyPatch) -> None:
    from tether.cli import console, table

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    def render(no_color: str | None) -> str:
        if no_color is None:
            monkeypatch.delenv("NO_COLOR", raising=False)
        else:
            monkeypatch.setenv("NO_COLOR", no_color)
        monkeypatch.setattr(sys, "stdout", Terminal())
        listing = table("task", "status")
        listing.add_row("t1", "[green]completed[/]")
        console().print(listing)
        return sys.stdout.getvalue()  # type: ignore[attr-defined, no-any-return]

    monkeypatch.setenv("FORCE_COLOR", "1")
    assert BOX & set(render(None))  # a terminal gets a ruled table (this test can tell)
    assert "\x1b[" in render("")  # NO_COLOR set but empty: as if unset (no-color.org)
    plain = render("1")
    assert not BOX & set(plain) and "\x1b[" not in plain and re.search(r"^t1 +completed", plain, re.M)


def test_show_folds_at_80_columns_without_splitting_a_word(db: str) -> None:
    out = cli("show", "other-0", "--db", db).output
    lines = out.splitlines()
    calls = lines[lines.index("calls") : next(i for i, line in enumerate(lines) if line.startswith("waiting for"))]
    assert max(len(line.rstrip()) for line in calls) <= 80, out
    rows = [line for line in lines if line[:2] in ("1 ", "2 ")]
    assert len(rows) == 2 and all("completed" in row for row in rows), out  # a status cell whole
    assert "refund_the_customer_in_…" in rows[1]  # a long tool name cut with …, not folded onto 2 lines
    # the wrapping column breaks between JSON values, not inside them
    assert not any(line.strip() in ("d", "ed", "complete") for line in lines), out
    wide = cli("show", "other-0", "--db", db, columns=160).output
    assert "…:2:refund_the_customer_in_full:" in wide  # keys from the step on, once there is room
    full = cli("show", "other-0", "--db", db, "--full", columns=300).output
    assert re.search(r"  other-0:2:refund_the_customer_in_full:[0-9a-f]{16}$", full, re.M), full


def test_history_show_and_diff_number_messages_and_calls_as_people_count(db: str) -> None:
    history = cli("history", LONG_ID, "--db", db, columns=200).output
    assert "added 1 message (user), the session's #2" in history  # the first message: #1 is the opening
    assert "read as of message" not in history and "(messages " not in history
    assert "call #1 lookup_order(" in history  # a readonly call shows its arguments
    shown = cli("show", LONG_ID, "--db", db, columns=200).output
    assert "conversation: s-1 (up to the session's #3)" in shown
    patch = cli("diff", LONG_ID, "1", "12", "--db", db, columns=200).output
    assert "/calls/0 (call #1)" in patch and "/calls/1 (call #2)" in patch, patch
    as_json = json.loads(cli("history", LONG_ID, "--db", db, "--json").output)
    assert all(isinstance(e["summary"], str) and e["summary"] for e in as_json)
    assert [e["seq"] for e in as_json] == list(range(1, len(as_json) + 1))
    assert as_json[0]["summary"].startswith("created refund with")


def test_patch_paths_are_labelled_as_history_counts() -> None:
    from tether.timetravel import path_label

    assert path_label("/calls/7/result") == "call #8 result"
    assert path_label("/plan/1/status") == "step 2 status"
    assert path_label("/calls/0/attempts/2/error") == "call #1 attempt 3 error"
    assert path_label("/observations/a~1b") == "" and path_label("/status") == ""


def test_show_fills_in_the_answer_command_with_the_task_and_the_store(db: str) -> None:
    out = cli("show", LONG_ID, "--db", db, columns=300).output
    assert f"answer: tether send {LONG_ID} approve_refund true --db {db}" in out
    answered = cli("send", LONG_ID, "approve_refund", "true", "--db", db)
    assert answered.exit_code == 0, answered.output


def test_show_says_when_no_worker_is_alive_to_run_a_runnable_task(db: str) -> None:
    """The worker line: only for a task a worker must move on (answered here), worded as the
    inspector words it (Liveness.note), with the app the last worker ran."""
    import time

    from tether.store import WorkerRow

    def worker_line(task_id: str = "other-0") -> list[str]:
        lines = cli("show", task_id, "--db", db, columns=200).output.splitlines()
        return [line for line in lines if line.startswith("worker")]

    assert worker_line() == []  # it waits for a person: no worker is needed yet
    assert cli("send", "other-0", "approve_refund", "true", "--db", db).exit_code == 0
    assert worker_line() == ["worker: no worker has run on this store yet: run `tether worker module:app`"]
    with tether.App(db) as app:
        now = time.time()
        app.store.record_worker(
            app.tenant, WorkerRow("h:1:w", started_at=now - 900, seen_at=now - 600, app="agents:app")
        )
    assert worker_line() == ["worker: no worker has been seen for 10 min: run `tether worker agents:app`"]
    with tether.App(db) as app:
        now = time.time()
        app.store.record_worker(app.tenant, WorkerRow("h:2:w", started_at=now - 5, seen_at=now, app="agents:app"))
    assert worker_line() == []  # one is alive: it takes the task up
    assert worker_line("other-1") == []  # still waiting for its answer


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("tasks", "--status", "bogus"), "'bogus' is not one of 'pending', 'running'"),
        (("tasks", "--limit", "0"), "0 is not in the range 1<=x<=1000000"),
        (("tasks", "--page", "0"), "0 is not in the range x>=1"),
        (("state", "t", "--at", "0"), "0 is not in the range x>=1"),
        (("worker", "m:app", "--concurrency", "0"), "0 is not in the range 1<=x<=1024"),
    ],
)
def test_a_bad_choice_or_range_is_clicks_usage_error(db: str, args: tuple[str, ...], message: str) -> None:
    done = cli(*args, "--db", db) if args[0] != "worker" else cli(*args)
    assert done.exit_code == 2 and message in done.output, done.output
    if args[0] == "tasks":
        body = json.loads(cli(*args, "--db", db, "--json").output)
        assert body["code"] == "invalid_input" and message in body["message"]


def test_tasks_json_is_a_page_with_its_total_and_the_next(db: str) -> None:
    first = json.loads(cli("tasks", "--db", db, "--json", "--limit", "3").output)
    assert first["total"] == 4 and first["next_page"] == 2 and len(first["items"]) == 3
    assert (first["limit"], first["offset"], first["page"]) == (3, 0, 1)
    second = json.loads(cli("tasks", "--db", db, "--json", "--limit", "3", "--page", "2").output)
    assert second["next_page"] is None and len(second["items"]) == 1
    ids = {t["task_id"] for t in first["items"] + second["items"]}
    assert ids == {LONG_ID, "other-0", "other-1", "other-2"}
    waiting = json.loads(cli("tasks", "--db", db, "--json", "--status", "AWAITING_INPUT").output)
    assert waiting["total"] == 4  # a choice is case-insensitive


def test_show_and_tasks_say_what_was_asked_of_a_task_that_no_worker_acted_on(db: str) -> None:
    """An answered task still reads awaiting_input until a worker continues it, and a cancel
    requested leaves it as it was: show and tasks say what was asked, as the inspector does."""

    def shown(task_id: str) -> list[str]:
        return cli("show", task_id, "--db", db, columns=200).output.splitlines()

    assert not [line for line in shown("other-0") if line.startswith(("answered", "cancel requested"))]
    assert cli("send", "other-0", "approve_refund", "true", "--db", db).exit_code == 0
    assert "answered approve_refund = true: a worker continues it from there" in shown("other-0")
    with tether.App(db) as app:
        app.request_cancel("other-1", reason="customer withdrew")
    cancelled = "cancel requested (customer withdrew): a worker carries it out, compensating completed calls"
    assert cancelled in shown("other-1")
    listed = {line.split()[0]: line for line in cli("tasks", "--db", db, columns=200).output.splitlines()[1:]}
    assert "answered: for a worker" in listed["other-0"] and "input 'approve_refund'" in listed["other-2"]


def test_keys_list_json_is_a_page_with_utc_times(db: str) -> None:
    assert cli("keys", "create", "--tenant", "acme", "--name", "ci", "--db", db).exit_code == 0
    page = json.loads(cli("keys", "list", "--db", db, "--json").output)
    assert {k: page[k] for k in ("total", "limit", "offset", "page", "next_page")} == {
        "total": 1,
        "limit": 1,
        "offset": 0,
        "page": 1,
        "next_page": None,
    }
    (key,) = page["items"]
    assert key["name"] == "ci" and re.fullmatch(r"\d{4}-\d\d-\d\dT[\d:.]+\+00:00", key["created_at"]), key


@pytest.mark.parametrize(
    "args",
    [
        ("tasks",),
        ("show", "t1"),
        ("history", "t1"),
        ("state", "t1"),
        ("logs", "t1"),
        ("diff", "t1", "1", "2"),
        ("send", "t1", "k", "v"),
        ("fork", "t1", "--at", "1"),
        ("resolve", "t1", "1", "--not-happened"),
        ("keys", "list"),
        ("keys", "create", "--tenant", "a", "--name", "b"),
        ("keys", "revoke", "k1"),
        ("serve",),
        ("langgraph", "threads"),
    ],
)
def test_every_verb_refuses_a_missing_database_the_same_way(tmp_path: Path, args: tuple[str, ...]) -> None:
    typo = str(tmp_path / "typo.db")
    done = cli(*args, "--db", typo)
    assert done.exit_code == 1 and f"no database at {typo!r}" in done.output, done.output
    assert list(tmp_path.iterdir()) == []  # nothing created
    assert not tether.telemetry.instrumented()  # nor turned on in the process (`serve`'s metrics)


def test_app_names_what_it_found_instead_of_a_type(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "support_desk.py").write_text("import tether\napp = tether.App('memory://')\ndef helper(): ...\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    missing = cli("resume", "t1", "--app", "support_desk:ap")
    assert missing.exit_code == 2, missing.output
    assert "module 'support_desk'" in missing.output and "has no attribute 'ap'; did you mean support_desk:app?" in (
        " ".join(missing.output.split())
    )
    wrong = cli("worker", "support_desk:helper")
    assert "has 'helper', a function, not a tether.App" in " ".join(wrong.output.split())
    assert "NoneType" not in missing.output + wrong.output
    alone = cli("resume", "t1", "--app", "support_desk")  # the module named without its app
    assert alone.exit_code == 2 and (
        "expected module:app (e.g. myagent:app), got 'support_desk'; did you mean support_desk:app?"
        in " ".join(alone.output.split())
    ), alone.output
    assert "did you mean" not in cli("resume", "t1", "--app", "no_such_module").output


def _commands(group: click.Group, ctx: click.Context, prefix: str = "") -> Iterator[tuple[str, click.Command]]:
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        assert command is not None
        yield prefix + name, command
        if isinstance(command, click.Group):
            yield from _commands(command, ctx, f"{prefix}{name} ")


def test_every_option_of_every_command_has_help() -> None:
    ctx = click.Context(main)
    commands = dict(_commands(main, ctx))
    assert {"langgraph", "langgraph threads", "keys list", "cancel", "serve"} <= set(commands)
    lacking = [
        f"{name} {'/'.join(param.opts)}"
        for name, command in commands.items()
        for param in command.params
        if isinstance(param, click.Option) and not param.help
    ]
    assert lacking == []


def test_shell_completion_completes_task_ids_from_the_store(db: str) -> None:
    env = {"_TETHER_COMPLETE": "bash_complete", "COMP_WORDS": f"tether show --db {db} oth", "COMP_CWORD": "4"}
    done = CliRunner().invoke(main, [], env=env, prog_name="tether")
    assert done.exit_code == 0, done.output
    completed = [line.split(",", 1)[1] for line in done.output.splitlines()]
    assert sorted(completed) == ["other-0", "other-1", "other-2"]
    env["COMP_WORDS"] = f"tether show --db {db}.missing oth"
    assert CliRunner().invoke(main, [], env=env, prog_name="tether").output.strip() == ""  # no store: no error


def test_python_dash_m_tether_is_the_tether_command(tmp_path: Path) -> None:
    code = "import runpy, sys\nsys.argv = ['tether', '--version']\nrunpy.run_module('tether', run_name='__main__')"
    done = python(code, cwd=tmp_path, env=dict(os.environ))
    assert done.returncode == 0 and done.stdout.startswith(f"tether, version {tether.__version__}"), done.stderr


def test_langgraph_is_a_tether_subcommand_and_its_absence_is_said(db: str, monkeypatch: pytest.MonkeyPatch) -> None:
    listed = cli("langgraph", "threads", "--db", db)
    assert listed.exit_code == 0 and "no LangGraph threads" in listed.output, listed.output
    for name in [m for m in sys.modules if m == "langgraph" or m.startswith(("langgraph.", "tether.integrations"))]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "langgraph", None)  # as if not installed: importing it fails
    absent = cli("langgraph", "threads", "--db", db)
    assert absent.exit_code == 1 and "pip install 'tether[langgraph]'" in absent.output, absent.output
    assert "pip install 'tether[langgraph]'" in " ".join(cli("-h").output.split()) or "langgraph" in cli("-h").output
    assert cli("tasks", "--db", db).exit_code == 0  # the rest of the CLI works without it


def test_tether_cli_exports_no_private_names() -> None:
    import tether.cli

    assert tether.cli.__all__ == sorted(tether.cli.__all__, key=str.lower) or tether.cli.__all__ == sorted(
        tether.cli.__all__
    )
    assert not [name for name in tether.cli.__all__ if name.startswith("_")]
    assert all(hasattr(tether.cli, name) for name in tether.cli.__all__)
