"""An app for the in-doubt crash test's processes: a payment whose first delivery kills its process
(SIGKILL) right after the card network took it, and small notes to run beside it."""

from __future__ import annotations

import os
import signal
import sqlite3

import tether

app = tether.App(os.environ["TETHER_TEST_URL"], lease_ttl=1.0)
SINK = os.environ["TETHER_TEST_SINK"]


@app.tool(on_unknown="raise")
def charge(amount: int) -> str:
    key = tether.current_call().key
    conn = sqlite3.connect(SINK, isolation_level=None, timeout=30)
    conn.execute("CREATE TABLE IF NOT EXISTS charges (key TEXT, pid INTEGER)")
    first = conn.execute("SELECT count(*) FROM charges").fetchone()[0] == 0
    conn.execute("INSERT INTO charges VALUES (?, ?)", (key, os.getpid()))
    conn.close()
    if first:
        os.kill(os.getpid(), signal.SIGKILL)  # the effect happened; its result is never recorded
    return f"charged {amount}"


@app.task
def pay(ctx: tether.TaskContext, amount: int) -> str:
    return ctx.call(charge, amount)


@app.task
def note(ctx: tether.TaskContext, n: int) -> int:
    return n
