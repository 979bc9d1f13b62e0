"""tether on the oldest versions of its dependencies that pyproject.toml admits: in a virtualenv of
exactly those versions, the core's and the postgres, redis and serve extras' (tests/_prepare.py makes
it, with the other test dependencies), the conformance kit runs on memory://, its store contract on
SQLite, PostgreSQL and Redis, ``tether demo`` runs and ``tether serve`` answers, so a floor set too low fails
here, not on a user's machine."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from packaging.version import Version

from tests._prepare import Missing, floor_pins, floors
from tests._redis_server import RedisServer
from tests._redis_server import problem as redis_problem
from tests.conftest import PG_PROBLEM, PG_URL


@pytest.fixture(scope="module")
def python() -> str:
    try:
        return str(floors())
    except Missing as exc:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true but the dependency floors' virtualenv could not be made: {exc}")
        pytest.skip(f"the dependency floors' virtualenv could not be made: {exc}")


def _env() -> dict[str, str]:
    """The environment of a user's shell: none of this test run's own settings."""
    return {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST", "TETHER_", "PYTHONPATH", "COV"))}


def _unavailable(problem: str) -> None:
    """A server the floors' run needs is missing: a failure under CI=true, else a skip with the reason."""
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI=true but {problem}")
    pytest.skip(problem)


def _kit(
    python: str, urls: list[str], cwd: Path, *where: str, select: str | None = None
) -> subprocess.CompletedProcess[str]:
    """The conformance kit, or a part of it (``where``: a package of it; ``select``: a ``-k`` expression),
    run on ``urls`` as a third-party backend's author runs it, in the floors' virtualenv."""
    kit = [python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--pyargs", *(where or ["tether.testing"])]
    kit += [f"--tether-url={url}" for url in urls] + (["-k", select] if select else [])
    done = subprocess.run(kit, cwd=cwd, env=_env(), capture_output=True, text=True, timeout=880)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
    assert " passed" in done.stdout and " failed" not in done.stdout
    return done


def test_the_virtualenv_holds_exactly_the_floors(python: str) -> None:
    pins = dict(pin.split("==") for pin in floor_pins())
    code = f"import importlib.metadata as m, json; print(json.dumps({{d: m.version(d) for d in {sorted(pins)!r}}}))"
    found = json.loads(subprocess.run([python, "-c", code], capture_output=True, text=True, check=True).stdout)
    assert {name: Version(found[name]) for name in pins} == {name: Version(floor) for name, floor in pins.items()}


@pytest.mark.timeout(900)
def test_the_conformance_kit_passes_on_the_floors(python: str, tmp_path: Path) -> None:
    """The whole kit on ``memory://`` (the runtime's checks: the log, calls, waits, sessions, time
    travel, on pydantic, orjson and the rest at their floors) and its store contract on SQLite (the
    store's own code at the floors, with the standard library's sqlite3). The runtime's checks on
    SQLite reach the store only through the methods the contract checks, and run on SQLite at the
    tested versions in the rest of the suite; they would double this run for no floor they reach."""
    done = _kit(python, ["memory://", f"sqlite:///{tmp_path / 'kit.db'}"], tmp_path, select="memory or contract")
    rows = [re.split(r"\s{2,}", line.strip()) for line in done.stdout.splitlines()]
    proven = {row[0]: row[1:] for row in rows if len(row) == 3 and row[0].startswith(("runtime/", "contract/"))}
    runtime = [cells[0] for name, cells in proven.items() if name.startswith("runtime/")]
    contract = [cells[1] for name, cells in proven.items() if name.startswith("contract/")]
    assert runtime and all("passed" in cell for cell in runtime), done.stdout[-4000:]  # every capability, on memory
    assert contract and all("passed" in cell for cell in contract), done.stdout[-4000:]  # every store check, on SQLite


@pytest.mark.timeout(300)
def test_the_demo_runs_on_the_floors(python: str, tmp_path: Path) -> None:
    done = subprocess.run(
        [python, "-m", "tether.cli", "demo"], cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=280
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "calendar invites sent: 1" in done.stdout


@pytest.fixture
def pg_prefix() -> Iterator[str]:
    """A schema prefix of this test's own: the kit's checks take schemas under it (dropped when the kit's
    run ends);
    any left behind (a kit run killed midway) are dropped here."""
    if PG_PROBLEM:
        _unavailable(PG_PROBLEM)
    import psycopg
    from psycopg import sql

    prefix = f"floors{uuid.uuid4().hex[:8]}"
    yield prefix
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        left = conn.execute("SELECT nspname FROM pg_namespace WHERE nspname LIKE %s", (f"{prefix}\\_%",)).fetchall()
        for (schema,) in left:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
    assert left == [], f"the kit left schemas behind: {left}"


@pytest.mark.timeout(300)
def test_the_store_contract_passes_on_postgresql_on_the_floors(python: str, pg_prefix: str, tmp_path: Path) -> None:
    """The kit's store contract (tether.testing.contract: every Store method, on psycopg and psycopg_pool
    at their floors), not its runtime checks: those reach the store only through the same methods, and
    the whole kit on SQLite above runs them at the floors. The contract keeps this short: each check
    needs a schema of tether's tables of its own, so the whole kit here would cost minutes of DDL."""
    sep = "&" if "?" in PG_URL else "?"
    _kit(python, [f"{PG_URL}{sep}schema={pg_prefix}"], tmp_path, "tether.testing.contract")


@pytest.fixture
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A redis-server of this test's own (AOF, fsync always, as the backend requires), killed afterwards."""
    found = redis_problem()
    if found:
        _unavailable(found)
    server = RedisServer(tmp_path_factory.mktemp("redis")).start()
    yield f"{server.url}?prefix=floors"
    server.stop()


@pytest.mark.timeout(300)
def test_the_store_contract_passes_on_redis_on_the_floors(python: str, redis_url: str, tmp_path: Path) -> None:
    """The kit's store contract on redis-py at its floor (its scripts, pipelines and pub/sub), for the
    reason the PostgreSQL run above gives."""
    _kit(python, [redis_url], tmp_path, "tether.testing.contract")


_SEED = """
import sys, tether
app = tether.App(sys.argv[1], inline_wait=0)

@app.task
def refund(ctx: tether.TaskContext, order: str) -> str:
    ctx.wait_for_input("approve", prompt=f"Refund {order}?")
    return "refunded"

print(app.run(refund, order="A-17", user_id="u1").task_id)
"""


def _get(server: subprocess.Popen[bytes], log: Path, url: str) -> tuple[int, str]:
    """GET ``url`` of ``server``, waiting for it to listen (up to a minute, while it runs; ``log`` its output)."""
    deadline = time.monotonic() + 60
    while True:
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                return response.status, response.read().decode()
        except urllib.error.HTTPError:
            raise
        except OSError:  # not listening yet
            assert server.poll() is None, f"tether serve ended: {log.read_text()[-4000:]}"
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


@pytest.mark.timeout(120)
def test_tether_serve_answers_on_the_floors(python: str, tmp_path: Path) -> None:
    """``tether serve`` on fastapi, starlette and uvicorn at their floors: the API lists a task, the
    inspector's task list and the task's page show it."""
    db = tmp_path / "tether.db"
    seeded = subprocess.run([python, "-c", _SEED, f"sqlite:///{db}"], env=_env(), capture_output=True, text=True)
    assert seeded.returncode == 0, seeded.stderr[-2000:]
    task_id = seeded.stdout.split()[-1]
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    serve = [python, "-m", "tether.cli", "serve", "--db", str(db), "--no-auth", "--port", str(port)]
    log = tmp_path / "serve.log"
    with open(log, "wb") as output:
        server = subprocess.Popen(serve, cwd=tmp_path, env=_env(), stdout=output, stderr=subprocess.STDOUT)
    try:
        base = f"http://127.0.0.1:{port}"
        status, body = _get(server, log, f"{base}/v1/tasks")
        assert status == 200 and [t["task_id"] for t in json.loads(body)["items"]] == [task_id], body[:2000]
        status, body = _get(server, log, f"{base}/")
        assert status == 200 and f'data-task="{task_id}"' in body, body[:2000]
        status, body = _get(server, log, f"{base}/tasks/{task_id}")
        assert status == 200 and "Refund A-17?" in body, body[:2000]
    finally:
        server.terminate()
        server.wait(timeout=30)
    assert "Traceback" not in log.read_text(), log.read_text()[-4000:]
