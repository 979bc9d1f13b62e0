"""A real ``tether worker`` process as the API sees it: alive while it runs (its heartbeats, not its
start record, keep it so), not alive once a SIGKILL left its last record older than the server's
window, and not alive at once after SIGTERM or ``--idle-exit`` (its stop record says so). The
server's window is its own parameter (``create_app(alive_within=...)``) and the worker's heartbeat
its ``--heartbeat`` option, so the test waits seconds, not the 90 s of the defaults."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

import tether
from tether.serve import create_app

HERE = Path(__file__).parent
WINDOW = 3.0
"""The server's window in these tests: fifteen of the worker's heartbeats."""
HEARTBEAT = 0.2
APP = "_workapp:app"


def _env(tmp: Path, url: str) -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(HERE.parent.parent / "src"), str(HERE)]),
        "TETHER_TEST_URL": url,
        "TETHER_TEST_SINK": str(tmp / "sink.db"),
    }


def _worker(tmp: Path, url: str, *extra: str) -> subprocess.Popen[bytes]:
    command = [sys.executable, "-m", "tether.cli", "worker", APP, "--heartbeat", str(HEARTBEAT), "--poll", "0.05"]
    return subprocess.Popen([*command, *extra], cwd=HERE, env=_env(tmp, url), stderr=subprocess.PIPE)


@contextmanager
def _served(url: str) -> Iterator[Callable[[], dict[str, Any]]]:
    """``GET /v1/workers`` of a server over the store (its own connection, as ``tether serve``'s)."""
    asgi = create_app(url, no_auth=True, alive_within=WINDOW)
    try:
        with TestClient(asgi, base_url="http://127.0.0.1") as client:

            def workers() -> dict[str, Any]:
                response = client.get("/v1/workers")
                assert response.status_code == 200, response.text
                body: dict[str, Any] = response.json()
                return body

            yield workers
    finally:
        asgi.state.store.close()


def _wait_for(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def _seen(body: dict[str, Any]) -> float:
    return datetime.fromisoformat(body["last_seen"]).timestamp()


@pytest.fixture
def url(tmp_path: Path, make_url: Any) -> Iterator[str]:
    made = make_url(tmp_path)
    with tether.App(made):  # the schema, before any process uses it
        pass
    yield made


def _ended(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.wait(timeout=30)
    assert proc.stderr is not None
    proc.stderr.close()


@pytest.mark.crash
@pytest.mark.timeout(180)
def test_a_sigkilled_worker_reads_as_gone_once_its_last_record_is_older_than_the_window(
    tmp_path: Path, url: str
) -> None:
    with _served(url) as workers:
        assert workers()["last_seen"] is None  # no worker ever ran here
        proc = _worker(tmp_path, url)
        try:
            _wait_for(lambda: workers()["alive"] == 1, 60, "the worker to say it is alive")
            first = workers()
            assert (first["app"], first["note"]) == (APP, None)
            # Past the window of its first record it is still alive: its heartbeats keep it so.
            _wait_for(lambda: _seen(workers()) > _seen(first) + WINDOW, 30, "a heartbeat past the window")
            assert workers()["alive"] == 1
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=30)
            killed = time.time()
            last = workers()
            _wait_for(lambda: workers()["alive"] == 0, 30, "the killed worker to read as gone")
            gone = workers()
            read_at = time.time()
        finally:
            _ended(proc)
    assert gone["last_seen"] == last["last_seen"] and _seen(gone) <= killed  # nothing wrote after the kill
    assert read_at - _seen(gone) > WINDOW  # gone only once its record is older than the window
    assert gone["note"].startswith("no worker has been seen for ")  # no stop record: it never said it stopped
    assert gone["note"].endswith(f"run `tether worker {APP}`") and gone["app"] == APP


@pytest.mark.crash
@pytest.mark.timeout(180)
def test_a_worker_stopped_by_sigterm_or_idle_exit_reads_as_stopped_at_once(tmp_path: Path, url: str) -> None:
    with _served(url) as workers:
        proc = _worker(tmp_path, url)
        try:
            _wait_for(lambda: workers()["alive"] == 1, 60, "the worker to say it is alive")
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=30) == 0
        finally:
            _ended(proc)
        stopped = workers()  # within the window of its last record: only its stop record makes it gone
        assert stopped["alive"] == 0 and time.time() - _seen(stopped) < WINDOW
        assert stopped["note"].startswith("no worker is running: the last one stopped ")

        idle = _worker(tmp_path, url, "--idle-exit")
        try:
            assert idle.wait(timeout=60) == 0
        finally:
            _ended(idle)
        after = workers()
        assert after["alive"] == 0 and _seen(after) > _seen(stopped)  # the idle worker's own stop record
        assert after["note"].startswith("no worker is running: the last one stopped ")
