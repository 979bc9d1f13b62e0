"""The real console script, in a process of its own (forked with tether imported: tests/cli/_console.py;
the help test runs it in a fresh interpreter too), against a real database."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

import tether
from tests.cli._console import SRC, TETHER, python, run_tether


def pythonpath(folder: Path) -> str:
    """A child's PYTHONPATH: this checkout's tether first (not whichever the environment installed),
    then ``folder`` with the test's agent."""
    return os.pathsep.join([str(SRC), str(folder)])


def run(*args: str, cwd: Path, ok: bool = True) -> subprocess.CompletedProcess[str]:
    done = run_tether(*args, cwd=cwd, env={**os.environ, "TETHER_URL": "", "COLUMNS": "200"})
    if ok:
        assert done.returncode == 0, done.stderr
    return done


@pytest.fixture
def db(tmp_path: Path) -> Path:
    app = tether.App(f"sqlite:///{tmp_path / 'tether.db'}")

    @app.tool
    def search(dest: str) -> list[str]:
        return ["BA117"]

    @app.task
    def trip(ctx: tether.TaskContext, dest: str) -> str:
        ctx.plan(["search", "pick"])
        with ctx.step("search"):
            flights = ctx.call(search, dest)
        with ctx.step("pick"):
            return str(ctx.decide("flight", flights[0], rationale="only one"))

    app.run(trip, "NYC", task_id="trip-abc123")
    app.close()
    return tmp_path


def test_every_command_has_help(tmp_path: Path) -> None:
    # The console script in a fresh interpreter, as a shell runs it; the commands' help below forked.
    env = {**os.environ, "TETHER_URL": "", "COLUMNS": "200"}
    fresh = subprocess.run([TETHER, "-h"], cwd=tmp_path, capture_output=True, text=True, timeout=120, env=env)
    assert fresh.returncode == 0, fresh.stderr
    out = run("-h", cwd=tmp_path).stdout
    assert out == fresh.stdout
    commands = [
        "demo",
        "tasks",
        "show",
        "history",
        "state",
        "diff",
        "fork",
        "replay",
        "rewind",
        "resume",
        "send",
        "cancel",
        "worker",
    ]
    for command in commands:
        assert command in out
        assert "Usage" in run(command, "--help", cwd=tmp_path).stdout


def test_tasks_show_history_state(db: Path) -> None:
    listed = json.loads(run("tasks", "--json", cwd=db).stdout)["items"]
    assert [(t["task_id"], t["status"], t["version"], t["position"]) for t in listed] == [
        ("trip-abc123", "completed", 12, "all 2 steps committed")
    ]
    assert "trip-abc123" in run("tasks", cwd=db).stdout
    shown = run("show", "trip-abc123", cwd=db).stdout
    assert "all 2 steps committed" in shown and "✓ 1. search" in shown and "decided flight" in shown
    state = json.loads(run("show", "trip-abc123", "--json", cwd=db).stdout)
    assert state["output"] == "BA117" and state["position"] == "all 2 steps committed"
    events = json.loads(run("history", "trip-abc123", "--json", cwd=db).stdout)
    assert [e["seq"] for e in events] == list(range(1, 13)) and events[0]["type"] == "TaskCreated"
    at = json.loads(run("state", "trip-abc123", "--at", "3", "--json", cwd=db).stdout)
    assert at["version"] == 3 and at["plan"][0]["status"] == "pending"


def test_helpful_errors(db: Path, tmp_path: Path) -> None:
    missing = run("show", "trip-abx123", cwd=db, ok=False)
    assert missing.returncode == 1 and "did you mean trip-abc123" in missing.stderr
    assert run("show", "trip-abc", cwd=db).stdout.startswith("trip-abc123")  # a unique prefix is the task
    beyond = run("state", "trip-abc123", "--at", "99", "--json", cwd=db, ok=False)
    assert json.loads(beyond.stdout)["code"] == "invalid_sequence"
    empty = tmp_path / "empty"
    empty.mkdir()
    nodb = run("tasks", cwd=empty, ok=False)
    assert "no database" in nodb.stderr and "tether demo" in nodb.stderr
    assert not (empty / "tether.db").exists()


def test_demo_tells_the_story(tmp_path: Path) -> None:
    out = run("demo", cwd=tmp_path).stdout
    assert "killed with SIGKILL during step 6" in out
    assert "steps 1–5 run again by process B: 0" in out
    assert "calendar invites sent: 1" in out
    assert out.count("replayed from the log") == 5
    assert "TimeoutError, backoff 0.2s" in out
    assert (tmp_path / "tether.db").exists()
    # a pipe: the timeline is plain columns under a header line, no box drawing, as every table
    assert not set("─━│┃┏┓┗┛┡┩╇") & set(out), out
    assert re.search(r"^t \(s\) +process +step +what happened *$", out, re.M), out


def test_waiting_tasks_show_what_they_wait_for_and_take_answers(tmp_path: Path) -> None:
    app = tether.App(f"sqlite:///{tmp_path / 'tether.db'}", inline_wait=0)

    @app.task
    def ask(ctx: tether.TaskContext) -> Any:
        ctx.plan(["ask", "nap"])
        with ctx.step("ask"):
            answer = ctx.wait_for_input("approve", prompt="Book BA117?", schema={"type": "boolean"})
        with ctx.step("nap"):
            ctx.sleep(3600)
        return answer

    app.run(ask, task_id="ask-1")
    listed = run("tasks", cwd=tmp_path).stdout
    assert "awaiting_input" in listed and "input 'approve'" in listed and "step 1 of 2; none committed" in listed
    refused = run("send", "ask-1", "approve", '"maybe"', cwd=tmp_path, ok=False)
    assert refused.returncode == 1 and "does not fit its schema" in refused.stderr
    sent = json.loads(run("send", "ask-1", "approve", "true", "--json", cwd=tmp_path).stdout)
    assert sent["status"] == "awaiting_input"
    app.resume("ask-1")
    [row] = json.loads(run("tasks", "--json", cwd=tmp_path).stdout)["items"]
    assert row["status"] == "sleeping" and row["wakes_at"] is not None and row["position"] == "step 2 of 2; 1 committed"


def test_time_travel_verbs(db: Path) -> None:
    before = json.loads(run("state", "trip-abc123", "--before-step", "2", "--json", cwd=db).stdout)
    after = json.loads(run("state", "trip-abc123", "--after-step", "pick", "--json", cwd=db).stdout)
    assert before["position"] == "step 2 of 2; 1 committed" and after["position"] == "all 2 steps committed"
    patch = json.loads(run("diff", "trip-abc123", "3", "12", "--json", cwd=db).stdout)
    assert {"op": "replace", "path": "/status", "value": "completed"} in patch
    assert "/status" in run("diff", "trip-abc123", "3", "12", cwd=db).stdout
    forked = json.loads(run("fork", "trip-abc123", "--at", "6", "--id", "trip-alt", "--json", cwd=db).stdout)
    assert forked == {"task_id": "trip-alt", "parent": "trip-abc123", "at": 6, "status": "pending"}
    assert "trip-alt" in run("tasks", cwd=db).stdout
    bad = run("fork", "trip-abc123", "--at", "60", cwd=db, ok=False)
    assert bad.returncode == 1 and "outside that range" in bad.stderr


def test_replay_resume_and_cancel_through_the_app(tmp_path: Path) -> None:
    (tmp_path / "agent.py").write_text(
        "import tether\n"
        "app = tether.App('sqlite:///tether.db', inline_wait=0)\n"
        "@app.tool\n"
        "def search(dest: str) -> list:\n"
        "    return [dest + '-1']\n"
        "@app.task\n"
        "def trip(ctx, dest: str) -> str:\n"
        "    flights = ctx.call(search, dest)\n"
        "    ok = ctx.wait_for_input('approve')\n"
        "    return flights[0] if ok else 'declined'\n"
    )
    code = "import agent; print(agent.app.run(agent.trip, 'NYC', task_id='t1').status.value)"
    made = python(code, cwd=tmp_path, env={**os.environ, "PYTHONPATH": pythonpath(tmp_path)}, timeout=60)
    assert made.stdout.strip() == "awaiting_input", made.stderr
    replayed = json.loads(run("replay", "t1", "--app", "agent:app", "--json", cwd=tmp_path).stdout)
    assert replayed["clean"] and replayed["outcome"] == "reached the end of the record"
    run("send", "t1", "approve", "true", cwd=tmp_path)
    resumed = json.loads(run("resume", "t1", "--app", "agent:app", "--json", cwd=tmp_path).stdout)
    assert resumed == {"task_id": "t1", "status": "completed", "output": "NYC-1", "failure": None}
    assert "completed" in run("cancel", "t1", "--app", "agent:app", cwd=tmp_path, ok=False).stderr
    rewound = json.loads(run("rewind", "t1", "--to", "5", "--app", "agent:app", "--json", cwd=tmp_path).stdout)
    assert rewound["status"] == "pending"
    assert "t1~1" in run("tasks", cwd=tmp_path).stdout
    broken = run("replay", "t1", "--app", "agent:nothing", cwd=tmp_path, ok=False)
    assert broken.returncode == 2 and "has no attribute 'nothing'; did you mean agent:app?" in broken.stderr


SNAPSHOTS = Path(__file__).parent / "snapshots"


def test_show_matches_its_snapshot(db: Path) -> None:
    """The human output of `tether show`, byte for byte (in a pipe: no colour, fixed width)."""
    out = re.sub(r"\b\d+\.\d{3}s\b", "0.000s", run("show", "trip-abc123", cwd=db).stdout)  # durations vary
    expected = (SNAPSHOTS / "show.txt").read_text()
    assert out == expected, f"`tether show` output changed; if on purpose, update {SNAPSHOTS / 'show.txt'}:\n{out}"


def test_tenant_option_and_environment(tmp_path: Path) -> None:
    app = tether.App(f"sqlite:///{tmp_path / 'tether.db'}", tenant="acme")

    @app.task
    def job(ctx: tether.TaskContext) -> int:
        return 1

    app.run(job, task_id="acme-job")
    app.close()
    assert "no tasks" in run("tasks", cwd=tmp_path).stdout
    assert "acme-job" in run("tasks", "--tenant", "acme", cwd=tmp_path).stdout
    shown = run_tether(
        "show", "acme-job", "--json", cwd=tmp_path, env={**os.environ, "TETHER_URL": "", "TETHER_TENANT": "acme"}
    )
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["tenant"] == "acme"
    assert run("show", "acme-job", cwd=tmp_path, ok=False).returncode == 1


def test_read_verbs_change_no_file(tmp_path: Path) -> None:
    import hashlib
    import sqlite3

    other = tmp_path / "someone_else.sqlite"
    with sqlite3.connect(other) as conn:
        conn.execute("CREATE TABLE notes (body TEXT)")
        conn.execute("INSERT INTO notes VALUES ('mine')")
    conn.close()
    before = hashlib.sha256(other.read_bytes()).hexdigest()
    empty = tmp_path / "empty-file"
    empty.write_bytes(b"")
    for verb in (("tasks",), ("show", "x"), ("history", "x"), ("state", "x")):
        for target in (other, empty):
            done = run(*verb, "--db", str(target), cwd=tmp_path, ok=False)
            assert done.returncode == 1 and "not a tether database" in done.stderr, done.stderr
            assert "Traceback" not in done.stderr
    assert hashlib.sha256(other.read_bytes()).hexdigest() == before
    with sqlite3.connect(other) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
    conn.close()
    assert empty.read_bytes() == b""
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty-file", "someone_else.sqlite"]


def test_read_verbs_still_read(db: Path) -> None:
    assert "trip-abc123" in run("tasks", cwd=db).stdout
    assert "completed" in run("show", "trip-abc123", cwd=db).stdout


def test_a_damaged_database_is_a_message_not_a_traceback(tmp_path: Path) -> None:
    from tests.unit.test_sqlite_faults import _corrupt_a_data_page

    path = tmp_path / "tether.db"
    app = tether.App(f"sqlite:///{path}")

    @app.task
    def job(ctx: tether.TaskContext, blob: str) -> int:
        return len(blob)

    for n in range(40):
        app.run(job, "y" * 2000, task_id=f"job-{n}")
    app.close()
    _corrupt_a_data_page(path)
    for verb in (("tasks",), ("show", "job-39"), ("tasks", "--json")):
        done = run(*verb, cwd=tmp_path, ok=False)
        assert done.returncode == 1, (verb, done.stdout, done.stderr)
        output = done.stdout + done.stderr
        assert "Traceback" not in output and "integrity_check" in output and "tether.db" in output


def test_read_verbs_create_no_postgres_schema(tmp_path: Path) -> None:
    import uuid

    from tests.conftest import PG_PROBLEM, PG_URL, pg_url

    if PG_PROBLEM:
        pytest.skip(PG_PROBLEM)
    import psycopg

    schema = f"never_{uuid.uuid4().hex[:12]}"
    fresh = f"{PG_URL}{'&' if '?' in PG_URL else '?'}schema={schema}"
    done = run("tasks", "--db", fresh, cwd=tmp_path, ok=False)
    assert done.returncode == 1 and "holds no tether database" in done.stderr
    with psycopg.connect(PG_URL) as conn:
        assert conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (schema,)).fetchone() is None
    for url in pg_url("ro"):
        app = tether.App(url)

        @app.task
        def job(ctx: tether.TaskContext) -> int:
            return 1

        app.run(job, task_id="pg-job")
        app.close()
        assert "pg-job" in run("tasks", "--db", url, cwd=tmp_path).stdout
        store = tether.open_store(url, readonly=True)
        with pytest.raises(tether.TetherError, match="read-only"):
            store.release_lease("default", "pg-job", 1)
        store.close()
