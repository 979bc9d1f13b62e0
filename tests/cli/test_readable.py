"""The CLI for people: prefixes, paging, history in words, show and state, send, diff by step, worker lines, logs."""

from __future__ import annotations

import json
import subprocess
import textwrap
import threading
import time
from pathlib import Path

import pytest

import tether
from tests.cli.test_cli import TETHER, run

AGENT = textwrap.dedent(
    """
    import tether

    app = tether.App("sqlite:///tether.db")

    @app.tool
    def lookup(city: str) -> dict:
        return {"city": city, "price": 120, "notes": "x" * 300}

    @app.tool(retry=tether.Retry(max_attempts=2, backoff=0))
    def explode(n: int) -> int:
        raise RuntimeError("the service is down")

    @app.task
    def trip(ctx: tether.TaskContext, city: str) -> str:
        ctx.plan(["search", "approve"])
        with ctx.step("search"):
            ctx.call(lookup, city=city)
        with ctx.step("approve"):
            ok = ctx.wait_for_input("approve", prompt=f"Book {city}?", schema={"type": "boolean"})
        return "booked" if ok else "no"

    @app.task
    def broken(ctx: tether.TaskContext, n: int) -> int:
        return ctx.call(explode, n)
    """
)


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """Four tasks run by `tether worker agent:app`: three trips waiting for approval, one failed."""
    (tmp_path / "agent.py").write_text(AGENT)
    app = tether.App(f"sqlite:///{tmp_path / 'tether.db'}")
    app.task(name="trip")(lambda ctx, city: city)  # only to enqueue: the worker has the code
    app.task(name="broken")(lambda ctx, n: n)
    for i in range(3):
        app.start("trip", city=f"c{i}", task_id=f"trip-{i}-{'a' * 30}")
    app.start("broken", n=1, task_id="broken-1")
    app.close()
    run("worker", "agent:app", "--idle-exit", "--quiet", cwd=tmp_path)
    return tmp_path


def test_prefixes_and_ambiguity(folder: Path) -> None:
    assert run("show", "trip-1", cwd=folder).stdout.startswith(f"trip-1-{'a' * 30}")
    ambiguous = run("show", "trip-", cwd=folder, ok=False)
    assert ambiguous.returncode == 1 and "is the start of 3 task ids" in ambiguous.stderr
    assert f"trip-0-{'a' * 30}" in ambiguous.stderr


def test_a_prefix_finds_a_task_older_than_ten_thousand_others(tmp_path: Path) -> None:
    # The prefix was once looked for among the newest 10,000 tasks only; and the count of an
    # ambiguous one says how many match, past the ten it lists.
    from tether.store import EventRow, TaskRow

    log = tether.TaskLog(f"sqlite:///{tmp_path / 'tether.db'}")
    log.create(type="t", task_id="ancient-1")
    later = time.time() + 1
    for i in range(10_001):  # newer rows only to be listed (an ambiguous prefix loads none of them)
        row = TaskRow(f"new-{i:05}", "default", "t", "completed", None, None, later + i, later, 1)
        log.store.create_task("default", row, EventRow(1, "TaskCreated", 1, later, "{}"))
    log.store.close()
    assert run("show", "ancien", cwd=tmp_path).stdout.startswith("ancient-1")
    assert "is the start of 10 task ids" in run("show", "new-0000", cwd=tmp_path, ok=False).stderr
    assert "is the start of 10,001 task ids" in run("show", "new-", cwd=tmp_path, ok=False).stderr


def test_tasks_pages_with_totals_and_full_ids_in_a_pipe(folder: Path) -> None:
    first = run("tasks", "--limit", "2", cwd=folder).stdout
    assert "2 of 4; next: --page 2" in first
    assert f"-{'a' * 30}" in first  # a pipe gets whole ids
    second = run("tasks", "--limit", "2", "--page", "2", cwd=folder).stdout
    assert "3–4 of 4" in second and "next" not in second


def test_history_in_words_with_step_boundaries(folder: Path) -> None:
    out = run("history", "trip-0", cwd=folder).stdout
    assert "call #1 lookup" in out and "waiting for 'approve'" in out
    assert "search" in out and "approve" in out
    assert any(not line.strip() for line in out.strip().splitlines())  # a blank line between steps (a pipe: no rules)


def test_show_a_waiting_task_and_a_failed_one(folder: Path) -> None:
    waiting = run("show", "trip-0", cwd=folder).stdout
    assert "waiting for input approve" in waiting and "prompt: Book c0?" in waiting
    assert 'schema: {"type":"boolean"}' in waiting and f"tether send trip-0-{'a' * 30} approve true" in waiting
    assert '{"city": "c0"}' in waiting and "…" in waiting  # args, and a long result cut short
    assert run("show", "trip-0", "--full", cwd=folder).stdout.count("x") >= 300 > waiting.count("x")
    failed = run("show", "broken-1", cwd=folder).stdout
    assert "failure at" in failed and "RuntimeError: the service is down" in failed
    assert "tool: explode" in failed and "traceback" in failed


def test_state_summary_and_full(folder: Path) -> None:
    summary = run("state", "trip-0", cwd=folder).stdout
    assert "awaiting_input" in summary and "calls: 1 (1 completed)" in summary and "--full" in summary
    full = run("state", "trip-0", "--full", cwd=folder).stdout
    assert json.loads(full)["waiting"]["key"] == "approve"


def test_diff_by_step_name(folder: Path) -> None:
    out = run("diff", "trip-0", "before:search", "search", cwd=folder).stdout
    assert "/calls/0" in out


def test_send_says_where_the_task_stands_then_worker_lines(folder: Path) -> None:
    sent = run("send", "trip-0", "approve", "true", cwd=folder).stdout
    assert "answered 'approve'" in sent and "awaiting_input" in sent and "runnable" in sent
    worked = run("worker", "agent:app", "--idle-exit", cwd=folder)
    lines = [line for line in worked.stderr.splitlines() if "trip-0" in line]
    assert len(lines) == 1 and "trip completed in" in lines[0]


def test_worker_verbose_and_quiet(folder: Path) -> None:
    run("send", "trip-1", "approve", "false", cwd=folder)
    verbose = run("worker", "agent:app", "--idle-exit", "--verbose", cwd=folder).stderr
    assert "trip started" in verbose and "trip completed" in verbose
    run("send", "trip-2", "approve", "false", cwd=folder)
    quiet = run("worker", "agent:app", "--idle-exit", "--quiet", cwd=folder).stderr
    assert "trip-2" not in quiet


def test_logs_follow_streams_until_the_task_ends(folder: Path) -> None:
    follow = subprocess.Popen(
        [TETHER, "logs", "trip-0", "--follow"], cwd=folder, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    time.sleep(1.0)
    run("send", "trip-0", "approve", "true", cwd=folder)
    run("worker", "agent:app", "--idle-exit", "--quiet", cwd=folder)
    out, err = follow.communicate(timeout=30)
    assert follow.returncode == 0, err
    assert "created trip" in out and "received 'approve' = true" in out and "status → completed" in out


def test_logs_follow_says_when_the_task_is_rewound_and_prints_the_new_history(folder: Path) -> None:
    follow = subprocess.Popen(
        [TETHER, "logs", "trip-1", "--follow", "--json"], cwd=folder, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    assert follow.stdout is not None
    first = follow.stdout.readline()  # it has read the history once: the rewind comes after
    task = f"trip-1-{'a' * 30}"  # whole: after the rewind, its set-aside branch starts the same
    run("rewind", task, "--to", "3", "--app", "agent:app", cwd=folder)
    run("worker", "agent:app", "--idle-exit", "--quiet", cwd=folder)  # to the wait again
    run("send", task, "approve", "true", cwd=folder)
    run("worker", "agent:app", "--idle-exit", "--quiet", cwd=folder)
    # The rest through the same buffer as the first line: communicate() reads the pipe itself, and
    # loses what readline() buffered past that line (the next event, when both came in one read).
    watchdog = threading.Timer(60, follow.kill)
    watchdog.start()
    try:
        out = follow.stdout.read()
        err = follow.stderr.read() if follow.stderr else ""
        follow.wait()
    finally:
        watchdog.cancel()
        follow.stdout.close()
        if follow.stderr:
            follow.stderr.close()
    assert follow.returncode == 0, err
    lines = [json.loads(line) for line in (first + out).splitlines()]
    cut = lines.index({"replaced": True, "task_id": task})
    before, after = lines[:cut], lines[cut + 1 :]
    assert [e["seq"] for e in before] == list(range(1, len(before) + 1))  # up to the wait, maybe its archiving
    assert [e["seq"] for e in after] == list(range(1, len(after) + 1))  # the new history, from its start
    assert after[3]["type"] == "TaskForked" and after[-1]["summary"] == "status → completed"
