"""Invariant 1 (one execution per key unless a process died) and app.cancel's contract: app.cancel of a
waiting task while `tether worker` runs. The recorded request wakes the worker, which carries the cancel
out (its compensation runs) while app.cancel, holding the lease it forced, carries it out here too: the
compensation runs twice under one key though no process died, and app.cancel sometimes raises
ConflictError ("expected version 5, found 7; nothing was written"). Seen on PostgreSQL:

    .venv/bin/python tests/composition/repro/cancel_races_worker.py postgresql://postgres@127.0.0.1:5432/test
"""

import collections
import os
import subprocess
import sys
import tempfile
import time
import uuid

import tether

URL = os.environ.get("REPRO_URL") or (sys.argv[1] if len(sys.argv) > 1 else "")
LOG = os.environ.get("REPRO_LOG", "")
app = tether.App(URL or "memory://", lease_ttl=5)


def release(hold: str) -> None:
    time.sleep(0.05)  # the provider takes a moment
    with open(LOG, "a") as log:
        log.write(f"{tether.current_call().key} {os.getpid()}\n")


app.tool(release)


@app.tool(compensate=release)
def hold(n: int) -> str:
    return f"hold-{n}"


@app.task
def ask(ctx: tether.TaskContext, n: int) -> str:
    ctx.call(hold, n)
    return str(ctx.wait_for_input("confirm"))


if __name__ == "__main__":
    work = tempfile.mkdtemp()
    url = URL or f"sqlite:///{work}/t.db"
    if url.startswith("postgresql") and "schema=" not in url:
        url += ("&" if "?" in url else "?") + f"schema=repro_{uuid.uuid4().hex[:8]}"
    env = {**os.environ, "REPRO_URL": url, "REPRO_LOG": f"{work}/releases.log"}
    here = os.path.dirname(os.path.abspath(__file__))
    worker = subprocess.Popen(
        [sys.executable, "-m", "tether.cli", "worker", "cancel_races_worker:app", "-c", "2", "--poll", "0.05"],
        cwd=here,
        env=env,
        stderr=subprocess.DEVNULL,
    )
    os.environ.update(env)
    mine = tether.App(url, lease_ttl=5)
    mine.engine.registry = app.registry
    errors = 0
    try:
        for n in range(50):
            mine.start("ask", n, task_id=f"t{n}")
            while mine.get(f"t{n}").status is not tether.Status.AWAITING_INPUT:
                time.sleep(0.01)
            try:
                mine.cancel(f"t{n}")
            except tether.ConflictError as exc:
                errors += 1
                print("app.cancel raised ConflictError:", exc)
        time.sleep(1)
    finally:
        worker.kill()
        worker.wait()
    LOG = env["REPRO_LOG"]
    runs = collections.Counter(line.split()[0] for line in open(LOG)) if os.path.exists(LOG) else {}
    twice = sum(n > 1 for n in runs.values())
    print(f"50 cancels: {twice} compensations ran twice under one key; {errors} app.cancel calls raised")
    if url.startswith("postgresql"):
        import psycopg

        schema = url.rpartition("schema=")[2]
        with psycopg.connect(url.partition("?")[0], autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    sys.exit(1 if twice or errors else 0)
