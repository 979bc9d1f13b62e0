"""An app for worker processes started by the tests (``tether worker _workapp:app``)."""

from __future__ import annotations

import os
import sqlite3
import time
from typing import Any

import tether

URL = os.environ["TETHER_TEST_URL"]
SINK = os.environ["TETHER_TEST_SINK"]
SLOW = float(os.environ.get("TETHER_TEST_SLOW", "0.05"))

app = tether.App(URL, lease_ttl=float(os.environ.get("TETHER_TEST_TTL", "1.0")))


def _sink() -> sqlite3.Connection:
    conn = sqlite3.connect(SINK, isolation_level=None, timeout=30)
    conn.execute("CREATE TABLE IF NOT EXISTS raw (key TEXT, pid INTEGER, at REAL)")
    conn.execute("CREATE TABLE IF NOT EXISTS effects (key TEXT PRIMARY KEY, pid INTEGER)")
    conn.execute("CREATE TABLE IF NOT EXISTS started (key TEXT, pid INTEGER, at REAL)")
    return conn


@app.tool
def effect(job: int, step: int) -> dict[str, Any]:
    key = tether.current_call().key
    conn = _sink()
    conn.execute("INSERT INTO started VALUES (?, ?, ?)", (key, os.getpid(), time.time()))
    time.sleep(SLOW)
    conn.execute("INSERT INTO raw VALUES (?, ?, ?)", (key, os.getpid(), time.time()))
    conn.execute("INSERT OR IGNORE INTO effects VALUES (?, ?)", (key, os.getpid()))
    conn.close()
    return {"job": job, "step": step}


@app.task
def job(ctx: tether.TaskContext, n: int, steps: int = 5) -> int:
    for step in range(steps):
        ctx.call(effect, n, step)
    return n
