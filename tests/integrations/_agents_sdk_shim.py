"""A pytest plugin for the OpenAI Agents SDK's own session tests: ``SQLiteSession`` is TetherSession.

Loaded by ``tests/integrations/test_openai_agents_sdk_suite.py`` into a pytest run over the SDK's
tests (copied from its sdist at test time) with ``-p _agents_sdk_shim``. Before the test modules
are imported, ``agents.SQLiteSession`` and ``agents.memory.SQLiteSession`` (the names they import)
become :class:`TetherSQLiteSession`: a TetherSession taking SQLiteSession's constructor arguments.
The SDK's own code keeps its SQLiteSession.

``TETHER_SDK_BACKEND`` picks the database: ``sqlite`` (a ``db_path`` file is tether's SQLite
database; ``":memory:"``, private to the session as in SQLite, is a fresh file of its own) or
``postgres`` (one schema per ``db_path``, dropped when the run ends, and one per ``":memory:"``
session, at ``TETHER_TEST_PG_URL``: a schema of tether's testing kit, put away when the test ends).
Async tests run on anyio's asyncio runner (``anyio_mode = auto``), in place of pytest-asyncio's auto
mode.

``TETHER_SDK_DESELECT`` names a JSON file of ``{node id: reason}`` to leave out (a node id without
parameters leaves out all of its parametrizations). ``TETHER_SDK_REPORT`` names the JSON file the
run's results go to: each test's outcome and how many TetherSessions it made, what was left out,
and any entry of the deselect list that matched no test.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import uuid
from collections.abc import Generator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import agents
import agents.memory
import pytest
from agents.memory.session_settings import SessionSettings

import tether
from tether.integrations.openai_agents import TetherSession
from tether.testing import PostgresBackend

BACKEND = os.environ.get("TETHER_SDK_BACKEND", "sqlite")
PG_URL = os.environ.get("TETHER_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/test")
_PRIVATE = Path(tempfile.mkdtemp(prefix="tether-sdk-"))  # the files of ":memory:" sessions
_SCHEMAS: set[str] = set()
_MADE = [0]  # TetherSessions made so far
_OPEN: list[tether.App] = []  # the Apps of the running test's sessions, closed when it ends
_NAMESPACES: list[AbstractContextManager[str]] = []  # the running test's private schemas, put away when it ends
_RESULTS: dict[str, dict[str, Any]] = {}
_LEFT_OUT: dict[str, str] = {}
_UNMATCHED: list[str] = []


def _url(db_path: str | Path) -> str:
    """The tether database a SQLiteSession ``db_path`` stands for."""
    private = str(db_path) == ":memory:"
    if BACKEND == "sqlite":
        path = _PRIVATE / f"{uuid.uuid4().hex}.db" if private else Path(db_path).expanduser().resolve()
        return f"sqlite:///{path}"
    # No connection kept while a session is idle: the SDK's tests make hundreds of sessions (and
    # they are closed as each test ends: see pytest_runtest_protocol).
    if private:  # a schema of the kit's, put away when the test ends (and used again, emptied)
        namespace = PostgresBackend(PG_URL).namespace(_PRIVATE, "sdk")
        _NAMESPACES.append(namespace)
        return f"{namespace.__enter__()}&pool_min=0"
    key = str(Path(db_path).expanduser().resolve())
    schema = "sdk_" + hashlib.sha256(key.encode()).hexdigest()[:16]
    _SCHEMAS.add(schema)
    return f"{PG_URL}{'&' if '?' in PG_URL else '?'}schema={schema}&pool_min=0"


class TetherSQLiteSession(TetherSession):
    """A TetherSession made as the SDK's tests make a SQLiteSession: ``(session_id, db_path, ...)``.

    ``sessions_table`` and ``messages_table`` name SQLite tables, which tether does not have: they
    are accepted and not used. ``close()`` closes the App the session opened.
    """

    def __init__(
        self,
        session_id: str,
        db_path: str | Path = ":memory:",
        sessions_table: str = "agent_sessions",
        messages_table: str = "agent_messages",
        session_settings: SessionSettings | dict[str, Any] | None = None,
    ) -> None:
        _MADE[0] += 1
        self.db_path = db_path
        self._app = tether.App(_url(db_path))
        _OPEN.append(self._app)
        super().__init__(session_id, self._app, session_settings=session_settings)

    def close(self) -> None:
        if self._app in _OPEN:
            _OPEN.remove(self._app)
            self._app.close()


agents.SQLiteSession = TetherSQLiteSession  # type: ignore[misc,assignment]
agents.memory.SQLiteSession = TetherSQLiteSession  # type: ignore[misc,assignment]


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "asyncio: an async test (run by anyio here)")


def pytest_report_header(config: pytest.Config) -> str:
    return f"SQLiteSession is TetherSession on {BACKEND}"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    listed = os.environ.get("TETHER_SDK_DESELECT")
    reasons: dict[str, str] = json.loads(Path(listed).read_text()) if listed else {}
    kept, left_out, matched = [], [], set()
    for item in items:
        entry = next((n for n in (item.nodeid, item.nodeid.partition("[")[0]) if n in reasons), None)
        if entry is None:
            kept.append(item)
        else:
            left_out.append(item)
            matched.add(entry)
            _LEFT_OUT[item.nodeid] = reasons[entry]
    _UNMATCHED.extend(sorted(set(reasons) - matched))
    if left_out:
        config.hook.pytest_deselected(items=left_out)
        items[:] = kept


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None]:
    made = _MADE[0]
    yield
    _RESULTS.setdefault(item.nodeid, {"outcome": "passed"})["tether_sessions"] = _MADE[0] - made
    while _OPEN:  # the test is over, and few of the SDK's tests close their sessions
        _OPEN.pop().close()
    while _NAMESPACES:  # each one, whatever another's putting away raised
        try:
            _NAMESPACES.pop().__exit__(None, None, None)
        except Exception as exc:
            print(f"a private session's schema could not be put away: {exc!r}")


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    result = _RESULTS.setdefault(report.nodeid, {"outcome": "passed"})
    if report.failed:
        result["outcome"] = "failed"
    elif report.skipped and result["outcome"] != "failed":
        result["outcome"] = "skipped"


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    out = os.environ.get("TETHER_SDK_REPORT")
    if out:
        report = {"tests": _RESULTS, "left_out": _LEFT_OUT, "unmatched": _UNMATCHED}
        Path(out).write_text(json.dumps(report, indent=1, sort_keys=True))
    if BACKEND != "postgres" or not _SCHEMAS:
        return
    import psycopg
    from psycopg import sql

    with psycopg.connect(PG_URL, autocommit=True) as conn:
        for schema in _SCHEMAS:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
