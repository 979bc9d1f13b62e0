"""With ``--json``, every failure of every command is one JSON object on stdout carrying the error's
stable code from the error tree, and a non-zero exit; without it, one readable line. No backend
exception ever reaches the user."""

from __future__ import annotations

import inspect
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

import tether
import tether.errors
from tests.conftest import PG_URL
from tether.cli import main
from tether.store.sqlite import SQLiteStore

AGENT = """
import tether
app = tether.App({url!r}, inline_wait=0)

@app.tool
def search(dest: str) -> list:
    return ["BA117"]

@app.task
def trip(ctx, dest: str) -> str:
    with ctx.step("search"):
        return ctx.call(search, dest)[0]

@app.task
def ask(ctx):
    return ctx.wait_for_input("approve", schema={{"type": "boolean"}})
"""

# Every code the error tree promises.
CODES = {
    cls.code
    for _, cls in inspect.getmembers(tether.errors, inspect.isclass)
    if issubclass(cls, tether.errors.TetherError)
}


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A folder holding ./tether.db with two trips whose ids share a prefix and a task waiting
    for input, and ``agent_json.py`` whose ``app`` runs them."""
    monkeypatch.delenv("TETHER_URL", raising=False)
    monkeypatch.delenv("TETHER_TENANT", raising=False)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "agent_json.py").write_text(AGENT.format(url=f"sqlite:///{tmp_path / 'tether.db'}"))
    monkeypatch.syspath_prepend(str(tmp_path))
    import agent_json  # type: ignore[import-not-found]

    agent_json.app.run(agent_json.trip, "NYC", task_id="trip-abc123")
    agent_json.app.run(agent_json.trip, "LON", task_id="trip-abd456")
    agent_json.app.run(agent_json.ask, task_id="ask-1")
    yield tmp_path
    agent_json.app.close()
    sys.modules.pop("agent_json", None)


def tether_cli(*args: str) -> Result:
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def json_error(result: Result) -> dict[str, Any]:
    """The one JSON object a failing --json command printed, checked for what every one carries."""
    assert result.exit_code != 0, result.stdout
    body = json.loads(result.stdout)
    assert isinstance(body, dict) and body["code"] in CODES, body
    assert isinstance(body["message"], str) and body["message"]
    return body


APP = ("--app", "agent_json:app")


@pytest.mark.parametrize(
    ("args", "code", "status"),
    [
        # not found: read verbs over --db, and verbs run through the app
        (("show", "trip-x"), "task_not_found", 1),
        (("history", "nope"), "task_not_found", 1),
        (("logs", "nope"), "task_not_found", 1),
        (("resume", "nope", *APP), "task_not_found", 1),
        # an ambiguous prefix names several tasks
        (("show", "trip-ab"), "invalid_input", 1),
        (("replay", "trip-ab", *APP), "invalid_input", 1),
        # invalid input: refused by the library, or by the command's own checks (usage: exit 2)
        (("send", "ask-1", "aprove", "true"), "invalid_input", 1),
        (("send", "ask-1", "approve", "3"), "invalid_input", 1),
        (("tasks", "--status", "bogus"), "invalid_input", 2),
        (("retry", "trip-abc123", *APP), "invalid_input", 1),
        (("state", "trip-abc123", "--at", "2", "--before-step", "1"), "invalid_input", 2),
        (("fork", "trip-abc123", "--at", "2", "--inputs", "nope"), "invalid_input", 2),
        (("fork", "trip-abc123"), "invalid_input", 2),
        (("tasks", "--page", "0"), "invalid_input", 2),
        # beyond the history
        (("state", "trip-abc123", "--at", "99"), "invalid_sequence", 1),
        (("diff", "trip-abc123", "1", "99"), "invalid_sequence", 1),
        (("rewind", "trip-abc123", "--to", "99", *APP), "invalid_sequence", 1),
        # a conflict, an illegal move, a store that is not there
        (("fork", "trip-abc123", "--at", "2", "--id", "trip-abd456"), "conflict", 1),
        (("cancel", "trip-abc123", *APP), "invalid_transition", 1),
        (("tasks", "--db", "nowhere.db"), "configuration", 1),
        (("tasks", "--db", "postgresql://postgres@127.0.0.1:1/test?connect_timeout=1"), "configuration", 1),
    ],
)
def test_json_failures_carry_the_error_code(folder: Path, args: tuple[str, ...], code: str, status: int) -> None:
    result = tether_cli(*args, "--json")
    body = json_error(result)
    assert (body["code"], result.exit_code) == (code, status), body


def test_json_bodies_carry_the_errors_fields(folder: Path) -> None:
    missing = json_error(tether_cli("show", "trip-abx123", "--json"))
    assert missing["task_id"] == "trip-abx123" and "trip-abc123" in missing["did_you_mean"]
    ambiguous = json_error(tether_cli("show", "trip-ab", "--json"))
    assert ambiguous["prefix"] == "trip-ab" and sorted(ambiguous["matches"]) == ["trip-abc123", "trip-abd456"]
    beyond = json_error(tether_cli("state", "trip-abc123", "--at", "99", "--json"))
    version = json.loads(tether_cli("show", "trip-abc123", "--json").stdout)["version"]
    assert (beyond["task_id"], beyond["seq"], beyond["last"]) == ("trip-abc123", 99, version)
    taken = json_error(tether_cli("fork", "trip-abc123", "--at", "2", "--id", "trip-abd456", "--json"))
    assert taken["task_id"] == "trip-abd456"


def test_without_json_a_failure_is_one_readable_line(folder: Path) -> None:
    for args in (
        ("show", "trip-abx123"),
        ("fork", "trip-abc123", "--at", "2", "--id", "trip-abd456"),
        ("tasks", "--db", "nowhere.db"),
        ("cancel", "trip-abc123", *APP),
    ):
        result = tether_cli(*args)
        assert result.exit_code == 1 and result.stdout == "", args
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("Error: ") and "Traceback" not in result.stderr, args
    hinted = tether_cli("show", "trip-abx123").stderr
    assert "did you mean trip-abc123" in hinted


def test_a_not_found_hint_comes_from_the_apps_own_store(folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``--app`` verbs suggest ids from the app's store, not from whatever ./tether.db holds."""
    elsewhere = folder / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # no ./tether.db here; the app's store is the folder's
    body = json_error(tether_cli("resume", "trip-abx123", *APP, "--json"))
    assert body["code"] == "task_not_found" and "trip-abc123" in body["did_you_mean"]
    assert not (elsewhere / "tether.db").exists()


def test_a_command_opens_the_store_once(folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    opened: list[str] = []
    original = SQLiteStore.__init__

    def counting(self: SQLiteStore, path: str, **options: Any) -> None:
        opened.append(path)
        original(self, path, **options)

    monkeypatch.setattr(SQLiteStore, "__init__", counting)
    for args in (("show", "trip-abx123", "--json"), ("show", "trip-ab", "--json"), ("history", "trip-abc123")):
        opened.clear()
        tether_cli(*args)
        assert len(opened) == 1, (args, opened)


def test_a_postgres_schema_without_tether_is_a_configuration_error(folder: Path) -> None:
    url = f"{PG_URL}?schema=no_tether_here_{abs(hash(str(folder))) % 10**8}"
    result = tether_cli("tasks", "--db", url, "--json")
    body = json_error(result)
    if "cannot reach" in body["message"]:
        pytest.skip("PostgreSQL is not reachable here")
    assert body["code"] == "configuration" and "holds no tether database" in body["message"]
    assert "psycopg" not in result.stdout + result.stderr


def test_no_backend_exception_reaches_the_user(folder: Path) -> None:
    (folder / "damaged.db").write_bytes(b"this is not a database" * 200)
    (folder / "folder.db").mkdir()
    for db in ("damaged.db", "folder.db"):
        for verb in (("tasks",), ("show", "trip-abc123"), ("history", "trip-abc123")):
            result = tether_cli(*verb, "--db", db, "--json")
            body = json_error(result)
            assert body["code"] == "configuration", body
            assert "sqlite3." not in result.stdout + result.stderr and "Traceback" not in result.stderr
