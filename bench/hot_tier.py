"""Would Redis in front of PostgreSQL speed up reads? What a validated hot tier could at best buy, measured.

Run: ``python bench/hot_tier.py`` (``--quick`` for a short run, ``--smoke`` the shortest, for the test
suite; ``TETHER_BENCH_PG_URL`` picks the
PostgreSQL server, default ``postgresql://postgres@127.0.0.1:5432/test``; a redis-server on PATH is
started on a free port, without persistence: a cache). Prints a table, then one line of JSON.

The load: 8 processes at once, each reading, request after request, the window of a random session
(of 200, 100 messages of ~500 bytes each) and the head of a random task (of 200), as app servers
behind a load balancer do on every turn. Each row is one way to serve those reads:

- ``postgres, cold``: tether on PostgreSQL with its in-process cache off (``cache_bytes=0``), as a
  server that has not served this conversation before: the window and the head read from
  PostgreSQL.
- ``postgres, warm``: tether on PostgreSQL with its in-process cache (the default), in a process
  that has read every session and task once before, as a long-running server has. (A session is
  read again by each ``app.session(...)``: tether does not keep sessions between those calls, so
  this row shows what the cache does not do for them.)
- ``tier floor``: the least a hot tier that never serves a stale entry can do per request: one
  ``MGET`` of the window and the head from Redis (as tether would have written them through) and one
  PostgreSQL statement that reads both versions to validate them, then decoding what Redis held.
  A real tier also writes through, refills and evicts; this floor has none of that, so a tier
  can only be slower than it.

Reported per row: latency p50/p99 of a request (both reads), PostgreSQL statements per request.
If the tier floor is not clearly faster than PostgreSQL alone, a hot tier buys nothing here.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import orjson

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE.parent / "src"))
sys.path.insert(0, str(HERE))
# This directory holds redis.py (a benchmark): import redis-py with it off the path.
_saved = sys.path[:]
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != str(HERE)]
import redis  # noqa: E402

sys.path[:] = _saved

import psycopg  # noqa: E402
from _common import MESSAGE, start_redis  # noqa: E402

import tether  # noqa: E402

PG = os.environ.get("TETHER_BENCH_PG_URL", "postgresql://postgres@127.0.0.1:5432/test")
PROCESSES = 8
SESSIONS = TASKS = 200
MESSAGES = 100
WINDOW_TOKENS = 2_000
SMOKE = "--smoke" in sys.argv  # every path, at sizes too small for the figures to mean anything (children too)
WARM_UP = 20  # requests each process makes before the timed ones
START_DELAY = 3.0  # seconds for every process to start before the timed requests begin together
if SMOKE:
    PROCESSES, SESSIONS, TASKS, MESSAGES, WARM_UP, START_DELAY = 1, 2, 2, 3, 1, 0.0


def seed(url: str) -> None:
    app = tether.App(url)

    @app.tool(readonly=True)
    def lookup(i: int) -> str:
        return MESSAGE

    @app.task
    def job(ctx: tether.TaskContext) -> str:
        for i in range(10):
            ctx.call(lookup, i)
        return "done"

    for s in range(SESSIONS):
        session = app.session(f"s{s}")
        session.add_many(
            [{"role": "user" if i % 2 == 0 else "assistant", "content": f"{s}.{i} {MESSAGE}"} for i in range(MESSAGES)]
        )
    for t in range(TASKS):
        app.run(job, task_id=f"t{t}")
    app.close()


_VERSIONS = "SELECT task_id, version FROM tasks WHERE tenant = 'default' AND task_id = ANY(%s)"


def _pg(url: str) -> psycopg.Connection[tuple[object, ...]]:
    conn = psycopg.connect(url.split("?")[0], autocommit=True)
    conn.execute(f"SET search_path TO {url.split('schema=')[1].split('&')[0]}")
    return conn


def fill_redis(url: str, port: int) -> None:
    """What a write-through tier would hold: each session's window and each task's head, with the
    version of the task's row (what a read checks it by) when it was written."""
    app, conn, client = tether.App(url), _pg(url), redis.Redis(port=port)
    ids = [f"session:s{s}" for s in range(SESSIONS)] + [f"t{t}" for t in range(TASKS)]
    versions = dict(conn.execute(_VERSIONS, (ids,)).fetchall())
    for s in range(SESSIONS):
        window = app.session(f"s{s}").window(WINDOW_TOKENS)
        body = [m.model_dump(mode="json") for m in window.messages]
        client.set(f"w:s{s}", orjson.dumps({"version": versions[f"session:s{s}"], "messages": body}))
    for t in range(TASKS):
        head = app.get(f"t{t}")
        client.set(f"h:t{t}", orjson.dumps({"version": versions[f"t{t}"], "status": str(head.status)}))
    client.close()
    conn.close()
    app.close()


class Statements:
    """Counts the statements psycopg sends from this process."""

    count = 0

    @classmethod
    def install(cls) -> None:
        execute = psycopg.Cursor.execute

        def counted(self: psycopg.Cursor, *args: object, **kwargs: object) -> object:
            cls.count += 1
            return execute(self, *args, **kwargs)  # type: ignore[arg-type]

        psycopg.Cursor.execute = counted  # type: ignore[method-assign,assignment]


def child(mode: str, url: str, port: int, requests: int, start_at: float, out: str) -> None:
    rng = random.Random(os.getpid())
    Statements.install()
    latencies: list[float] = []
    if mode == "tier":
        client, conn = redis.Redis(port=port), _pg(url)

        def request() -> None:
            s, t = f"s{rng.randrange(SESSIONS)}", f"t{rng.randrange(TASKS)}"
            window, head = (orjson.loads(v) for v in client.mget([f"w:{s}", f"h:{t}"]))
            versions = dict(conn.execute(_VERSIONS, ([f"session:{s}", t],), prepare=True).fetchall())
            assert versions[f"session:{s}"] == window["version"] and versions[t] == head["version"]

    else:
        app = tether.App(url, cache_bytes=0 if mode == "cold" else 16 * 1024 * 1024)

        def request() -> None:
            s, t = f"s{rng.randrange(SESSIONS)}", f"t{rng.randrange(TASKS)}"
            app.session(s).window(WINDOW_TOKENS)
            app.get(t).status  # noqa: B018 - the head is the read

        if mode == "warm":  # every session and task read once: a long-running server's state
            for i in range(max(SESSIONS, TASKS)):
                app.session(f"s{i % SESSIONS}").window(WINDOW_TOKENS)
                app.get(f"t{i % TASKS}").status  # noqa: B018
    for _ in range(WARM_UP):
        request()
    time.sleep(max(0.0, start_at - time.time()))
    before = Statements.count
    for _ in range(requests):
        began = time.perf_counter()
        request()
        latencies.append(time.perf_counter() - began)
    Path(out).write_text(json.dumps({"latencies": latencies, "statements": Statements.count - before}))


def run(mode: str, url: str, port: int, requests: int, folder: str) -> dict[str, float]:
    start_at = time.time() + START_DELAY
    outs = [f"{folder}/{mode}-{i}.json" for i in range(PROCESSES)]
    procs = [
        subprocess.Popen(
            [sys.executable, __file__, "--child", mode, url, str(port), str(requests), str(start_at), out]
            + (["--smoke"] if SMOKE else [])
        )
        for out in outs
    ]
    for proc in procs:
        if proc.wait() != 0:
            sys.exit(f"a {mode} reader failed")
    results = [json.loads(Path(out).read_text()) for out in outs]
    latencies = sorted(x for r in results for x in r["latencies"])
    return {
        "p50_ms": statistics.median(latencies) * 1e3,
        "p99_ms": latencies[int(len(latencies) * 0.99)] * 1e3,
        "statements": sum(r["statements"] for r in results) / len(latencies),
    }


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        mode, url, port, requests, start_at, out = sys.argv[2:8]
        child(mode, url, int(port), int(requests), float(start_at), out)
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer requests per process")
    parser.add_argument("--smoke", action="store_true", help="the shortest run through every path")
    args = parser.parse_args()
    requests = 3 if args.smoke else 200 if args.quick else 1_000
    schema = f"bench_{uuid.uuid4().hex[:10]}"
    url = f"{PG}{'&' if '?' in PG else '?'}schema={schema}"
    folder = tempfile.mkdtemp(prefix="tether-bench-tier-")
    server, port = start_redis(folder, "--appendonly", "no")  # a cache: nothing to keep
    try:
        seed(url)
        fill_redis(url, port)
        rows = {
            "postgres, cold": run("cold", url, port, requests, folder),
            "postgres, warm": run("warm", url, port, requests, folder),
            "tier floor (Redis + a version check)": run("tier", url, port, requests, folder),
        }
    finally:
        server.kill()
        with psycopg.connect(PG, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    print(f"{PROCESSES} processes, each {requests} requests (a session's window and a task's head)")
    print(f"{'reads served by':40} {'p50 ms':>8} {'p99 ms':>8} {'PG statements':>14}")
    for name, row in rows.items():
        print(f"{name:40} {row['p50_ms']:8.2f} {row['p99_ms']:8.2f} {row['statements']:14.2f}")
    best = min(rows["postgres, cold"]["p50_ms"], rows["postgres, warm"]["p50_ms"])
    ratio = rows["tier floor (Redis + a version check)"]["p50_ms"] / best
    print(f"tier floor p50 / tether on PostgreSQL alone (best of cold, warm): {ratio:.2f}")
    # No target: the figures say whether a tier would pay (see the docstring), not whether tether passes.
    report = {"processes": PROCESSES, "requests": requests, "rows": rows, "tier_vs_postgres_p50": ratio, "pass": None}
    print(json.dumps(report))


if __name__ == "__main__":
    main()
