"""The OpenAI Agents SDK's own session tests, run on TetherSession in place of SQLiteSession.

The tests are the SDK's, never copied into this repository: they come from the sdist of the
installed ``openai-agents`` version, fetched with ``pip download`` by ``make test`` before the suite
(``tests/_prepare.py``; a bare pytest run fetches it itself) and cached inside the virtualenv, so it
is downloaded once per version. Without network the test skips, except under ``CI=true``, where it fails.

They run in a pytest process of their own (the SDK's ``tests`` package and conftest, not ours),
with ``tests/integrations/_agents_sdk_shim.py`` as a plugin: ``SQLiteSession`` is a TetherSession
taking SQLiteSession's constructor arguments, on a SQLite file or a PostgreSQL schema. The files
run are the SDK's memory tests that construct a ``SQLiteSession``:

- ``tests/memory/test_session.py``: the session contract (items in order, ``limit``, ``pop_item``,
  ``clear_session``, settings, unicode, concurrent access) and runs through ``Runner.run``,
  ``run_sync`` and ``run_streamed`` that keep their history in the session;
- ``tests/memory/test_session_limit.py``: ``SessionSettings.limit`` in runs;
- ``tests/memory/test_compaction_model_visibility.py`` and
  ``tests/memory/test_openai_responses_compaction_session.py``: the SDK's
  ``OpenAIResponsesCompactionSession`` and ``EncryptedSession`` wrapped around the session.

Their other tests (ones with a mock or list session of their own) run too and are counted apart:
the report says how many made a TetherSession. Left out, each with its reason in
:data:`LEFT_OUT`: the tests of SQLiteSession's own machinery (its sqlite3 connections, locks,
tables and rows written behind its back), and of the atomic suffix replacement the SDK gives its
own SQLite stores alone (``SQLiteSession._get_compaction_snapshot``), where every other store,
TetherSession among them, takes the documented complete-history path.
``tests/memory/test_compaction_suffix.py`` is that replacement's own file, and is not run.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tomllib
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("agents")

import tether
from tests import _prepare
from tests.conftest import PG_PROBLEM, PG_URL
from tests.integrations.conftest import HERE

VERSION = importlib.metadata.version("openai-agents")

SUITE = [
    "tests/memory/test_session.py",
    "tests/memory/test_session_limit.py",
    "tests/memory/test_compaction_model_visibility.py",
    "tests/memory/test_openai_responses_compaction_session.py",
]

_CONNECTIONS = "asserts on SQLiteSession's own sqlite3 connections and locks, which TetherSession has not"
_ROWS = "writes rows into SQLiteSession's agent_messages table with sqlite3, behind the session's back"
_TABLES = "makes SQLiteSession's statements fail by dropping or probing its SQLite tables with sqlite3"
_NATIVE_SUFFIX = (
    "asserts the partial-history compaction the SDK does only on its own SQLite stores "
    "(SQLiteSession._get_compaction_snapshot, checked by exact type); other stores, TetherSession "
    "among them, take the complete-history path the SDK documents for them"
)
_SESSION = "tests/memory/test_session.py::"
_VISIBILITY = "tests/memory/test_compaction_model_visibility.py::"
_COMPACTION = "tests/memory/test_openai_responses_compaction_session.py::TestOpenAIResponsesCompactionSession::"

LEFT_OUT: dict[str, str] = {
    _SESSION + "test_sqlite_session_close_closes_worker_thread_connections": _CONNECTIONS,
    _SESSION + "test_sqlite_session_reaps_connections_from_exited_worker_threads": _CONNECTIONS,
    _SESSION + "test_sqlite_session_closes_retired_connections_before_the_next_allocation": _CONNECTIONS,
    _SESSION + "test_sqlite_session_keeps_connections_of_live_worker_threads": _CONNECTIONS,
    _SESSION + "test_sqlite_session_file_lock_is_shared_across_instances": _CONNECTIONS,
    _SESSION + "test_sqlite_session_rollback_failure_evicts_connection": _CONNECTIONS,
    _SESSION + "test_sqlite_session_close_retries_quarantined_connection": _CONNECTIONS,
    _SESSION + "test_sqlite_session_post_commit_cancellation_propagates_after_known_outcome": _CONNECTIONS
    + " (it slips a pausing sqlite3.Connection into the session)",
    _SESSION + "test_sqlite_session_closed_rejects_empty_add_items": (
        "asserts SQLiteSession's 'SQLiteSession is closed' error: TetherSession has no close() (the App "
        "it is given belongs to its caller)"
    ),
    _SESSION + "test_sqlite_session_pop_item_skips_corrupt_most_recent": _ROWS,
    _SESSION + "test_sqlite_session_pop_item_returns_none_after_dropping_only_corrupt_rows": _ROWS,
    _SESSION + "test_sqlite_session_get_items_limit_skips_corrupt_newest_rows": _ROWS,
    _SESSION + "test_sqlite_session_get_items_session_settings_limit_skips_corrupt_rows": _ROWS,
    _SESSION + "test_sqlite_session_failed_add_items_releases_write_lock": _TABLES,
    _SESSION + "test_sqlite_session_failed_clear_session_rolls_back": _TABLES,
    _SESSION + "test_sqlite_session_failed_pop_item_releases_write_lock": _TABLES,
    _COMPACTION + "test_settled_pop_failure_invalidates_response_chain": _CONNECTIONS
    + " (it makes the pop fail through SQLiteSession's connection registry)",
    _COMPACTION + "test_settled_clear_failure_invalidates_response_chain": _CONNECTIONS
    + " (it makes the clear fail through SQLiteSession's connection registry)",
    _COMPACTION + "test_automatic_compaction_rollback_budget[asyncio-True]": _NATIVE_SUFFIX
    + " (its native=False case, the path TetherSession takes, runs)",
    _VISIBILITY + "test_backend_read_limit_cannot_hide_retained_history_from_compaction": _NATIVE_SUFFIX,
    _VISIBILITY + "test_automatic_compaction_does_not_reload_unbounded_hidden_history": _NATIVE_SUFFIX,
    _VISIBILITY + "test_expired_read_overhead_does_not_authorize_hidden_history": _NATIVE_SUFFIX,
}


def _unavailable(message: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI=true: the SDK's own tests must run, but {message}")
    pytest.skip(message)


def _sdist() -> Path:
    try:
        return _prepare.agents_sdist()
    except _prepare.Missing as exc:
        _unavailable(str(exc))
        raise


@pytest.fixture(scope="module")
def sdk_tests(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The SDK's ``tests`` package, from its sdist, with the shim and a pytest config beside it."""
    root = tmp_path_factory.mktemp("openai-agents-tests")
    with tarfile.open(_sdist()) as sdist:
        top = sdist.getmembers()[0].name.split("/")[0]
        wanted = [
            m for m in sdist.getmembers() if m.name.startswith(f"{top}/tests/") or m.name == f"{top}/pyproject.toml"
        ]
        for member in wanted:
            member.name = member.name.removeprefix(f"{top}/")
        sdist.extractall(root, members=wanted, filter="data")
    missing = [f for f in SUITE if not (root / f).exists()]
    if missing:
        pytest.fail(f"the sdist of openai-agents {VERSION} has no {missing}: update SUITE for this version")
    shutil.copy(HERE / "_agents_sdk_shim.py", root / "_agents_sdk_shim.py")
    # The SDK's own markers and warning filters; anyio runs its async tests (pytest-asyncio's auto
    # mode in the SDK's config, which tether's environment does not install).
    sdk_config = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    lines = ["[pytest]", "anyio_mode = auto", "timeout = 300", "markers ="]
    lines += [f"    {m}" for m in sdk_config.get("markers", [])]
    lines += ["filterwarnings ="] + [f"    {f}" for f in sdk_config.get("filterwarnings", [])]
    (root / "pytest.ini").write_text("\n".join(lines) + "\n")
    (root / "left_out.json").write_text(json.dumps(LEFT_OUT))
    return root


@pytest.mark.timeout(1800)
@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_the_sdks_own_session_tests_pass_on_tether_session(backend: str, sdk_tests: Path, tmp_path: Path) -> None:
    if backend == "postgres" and PG_PROBLEM:
        pytest.skip(PG_PROBLEM)
    report_path = tmp_path / "report.json"
    tether_src = Path(tether.__file__).resolve().parents[1]
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTEST_ADDOPTS")}
    env |= {
        "PYTHONPATH": os.pathsep.join([str(sdk_tests), str(tether_src)]),  # the SDK's tests package, not ours
        "TETHER_SDK_BACKEND": backend,
        "TETHER_TEST_PG_URL": PG_URL,
        "TETHER_SDK_DESELECT": str(sdk_tests / "left_out.json"),
        "TETHER_SDK_REPORT": str(report_path),
    }
    # The plugins tether's environment installs for its own tests stay out of the SDK's run: none of
    # the SDK's tests use them, and importing them (Hypothesis, LangSmith's, Schemathesis, tether's
    # kit) cost each run about 3 CPU-seconds before its first test.
    unused = ["hypothesispytest", "langsmith_plugin", "schemathesis", "tether.testing", "xdist", "cacheprovider"]
    command = [sys.executable, "-m", "pytest", "-c", "pytest.ini", "--rootdir", str(sdk_tests),
               "-p", "_agents_sdk_shim", *(f"-pno:{name}" for name in unused), "-q", "-rfE", *SUITE]
    done = subprocess.run(command, cwd=sdk_tests, env=env, capture_output=True, text=True)
    assert report_path.exists(), done.stdout[-5000:] + done.stderr[-5000:]
    report: dict[str, Any] = json.loads(report_path.read_text())
    results: dict[str, dict[str, Any]] = report["tests"]
    failed = sorted(n for n, r in results.items() if r["outcome"] == "failed")
    assert not failed, f"{len(failed)} of the SDK's tests failed on TetherSession:\n{done.stdout[-20000:]}"
    assert done.returncode == 0, done.stdout[-5000:] + done.stderr[-5000:]
    assert not report["unmatched"], f"LEFT_OUT names tests this SDK version does not have: {report['unmatched']}"
    on_tether = [n for n, r in results.items() if r["outcome"] == "passed" and r["tether_sessions"]]
    for file in SUITE:  # every file ran some of its tests on TetherSession
        assert any(n.startswith(file) for n in on_tether), file
    print(
        f"\nopenai-agents {VERSION} on TetherSession ({backend}): {len(on_tether)} passed on a TetherSession, "
        f"{sum(r['outcome'] == 'passed' for r in results.values()) - len(on_tether)} passed without one, "
        f"{sum(r['outcome'] == 'skipped' for r in results.values())} skipped, {len(report['left_out'])} left out"
    )
