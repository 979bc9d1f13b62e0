"""An app for worker processes of tests/crash/test_cancel_mid_call.py (``tether worker _cancelapp:app``).

Every effect is a row in the sink. An effect whose label has a ``hold-<label>`` file in the sink's
folder starts (a row in ``started``), then waits for ``go-<label>`` before it is done: the test
decides when the holder is inside the call."""

from __future__ import annotations

import os
import sqlite3
import time
from pathlib import Path
from typing import Any

import tether


def sink(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None, timeout=30)
    conn.execute("CREATE TABLE IF NOT EXISTS started (label TEXT, key TEXT, pid INTEGER)")
    conn.execute("CREATE TABLE IF NOT EXISTS done (label TEXT, key TEXT, pid INTEGER)")
    return conn


def build(url: str, path: Path, ttl: float = 5.0) -> tether.App:
    """The app on ``url``, its effects recorded in the SQLite file ``path``."""
    app = tether.App(url, lease_ttl=ttl)

    def effect(label: str) -> dict[str, Any]:
        key = tether.current_call().key
        conn = sink(path)
        try:
            conn.execute("INSERT INTO started VALUES (?, ?, ?)", (label, key, os.getpid()))
            if (path.parent / f"hold-{label}").exists():
                deadline = time.monotonic() + 120
                while not (path.parent / f"go-{label}").exists():
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"nobody let {label} go")
                    time.sleep(0.01)
            conn.execute("INSERT INTO done VALUES (?, ?, ?)", (label, key, os.getpid()))
        finally:
            conn.close()
        return {"label": label}

    @app.tool
    def release(result: dict[str, Any]) -> dict[str, Any]:
        return effect("undo-" + result["label"])

    @app.tool(compensate=release)
    def reserve(label: str) -> dict[str, Any]:
        return effect(label)

    @app.task
    def order(ctx: tether.TaskContext, fail: bool = False) -> str:
        ctx.call(reserve, "a")
        ctx.call(reserve, "b")
        if fail:
            raise ValueError("the order is refused")
        ctx.call(reserve, "c")
        return "ordered"

    return app


def __getattr__(name: str) -> tether.App:  # ``tether worker _cancelapp:app``, built from the test's env
    if name != "app":
        raise AttributeError(name)
    app = build(
        os.environ["TETHER_TEST_URL"], Path(os.environ["TETHER_TEST_SINK"]), float(os.environ["TETHER_TEST_TTL"])
    )
    globals()["app"] = app
    return app
