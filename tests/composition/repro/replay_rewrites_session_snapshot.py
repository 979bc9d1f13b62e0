"""Invariant 5 (a replay writes nothing): app.replay of a finished task whose conversation was
compacted deletes the session's snapshot row and writes it again (same content, a new row)."""

import os
import sqlite3
import sys
import tempfile

import tether

path = os.path.join(tempfile.mkdtemp(), "t.db")
app = tether.App(f"sqlite:///{path}")


@app.task
def chat(ctx: tether.TaskContext) -> None:
    for i in range(5):
        ctx.session.add("user", f"q{i}")
    ctx.session.compact(keep_last=1)


def snapshots() -> list:
    with sqlite3.connect(path) as conn:
        return conn.execute("SELECT rowid, task, seq FROM snapshots").fetchall()


app.run(chat, task_id="c1")
before = snapshots()
print(app.replay("c1"))
after = snapshots()
print(f"snapshot rows (rowid, stream, seq) before the replay: {before}, after: {after}")
sys.exit(0 if before == after else 1)
