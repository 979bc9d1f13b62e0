"""Task reads and bytes benchmark (issue 17, targets 2 and 3): what a task with many recorded calls
costs to store and to read cold.

Run: ``python bench/task_reads.py`` (``--quick``: 10 and 1,000 calls). Prints a table, then one line of JSON.

For tasks of 10, 1,000, 10,000 and (full mode) 100,000 readonly calls, each returning a ~500-byte
result, on SQLite:

* bytes stored per call: the database file (after a checkpoint) over the calls (target: <= 1,100,
  flat from 1,000 to 100,000: a result stored once);
* ``app.get(id).output`` and ``app.list_tasks()`` from a fresh ``App`` (nothing cached): target the
  same for 10 and 10,000 calls (<= 1.5x);
* the full ``TaskState`` cold (``app.state``): target <= 10 ms at 10,000 calls (not measured at
  100,000: it is O(state) today).
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import statistics
import sys
import tempfile
import time

import orjson

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))
sys.path.insert(0, os.path.dirname(__file__))

from _common import MESSAGE

import tether


def build(path: str, calls: int) -> None:
    app = tether.App(f"sqlite:///{path}")

    @app.tool(readonly=True)
    def search(i: int) -> str:
        return MESSAGE

    @app.task
    def research(ctx: tether.TaskContext, count: int) -> str:
        for i in range(count):
            ctx.call(search, i)
        return "done"

    run = app.run(research, calls, task_id="t")
    assert run.status is tether.Status.COMPLETED, run.failure
    app.close()
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.execute("VACUUM")
    conn.close()


def cold(path: str, read: str, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        app = tether.App(f"sqlite:///{path}")
        start = time.perf_counter()
        if read == "output":
            app.get("t").output  # noqa: B018
        elif read == "list":
            app.list_tasks()
        else:
            app.state("t")
        times.append(time.perf_counter() - start)
        app.close()
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    sizes = [10, 1_000] if args.quick else [10, 1_000, 10_000, 100_000]
    folder = tempfile.mkdtemp(prefix="tether-bench-")
    empty = os.path.join(folder, "empty.db")
    build(empty, 0)
    base = os.path.getsize(empty)
    rows = {}
    for n in sizes:
        path = os.path.join(folder, f"t{n}.db")
        build(path, n)
        rows[n] = {
            "bytes_per_call": (os.path.getsize(path) - base) / n,
            "get_output_ms": cold(path, "output", 7) * 1000,
            "list_tasks_ms": cold(path, "list", 7) * 1000,
            "state_ms": cold(path, "state", 7) * 1000 if n <= 10_000 else None,
        }
    big, small = min(sizes[-1], 10_000), sizes[0]
    result = {
        "sizes": rows,
        "get_output_growth": rows[big]["get_output_ms"] / rows[small]["get_output_ms"],
        "list_tasks_growth": rows[big]["list_tasks_ms"] / rows[small]["list_tasks_ms"],
        "targets": {"bytes_per_call": 1100, "get_output_growth": 1.5, "state_ms_at_10000": 10.0},
    }
    result["pass"] = (
        all(r["bytes_per_call"] <= 1100 for n, r in rows.items() if n >= 1000)
        and result["get_output_growth"] <= 1.5
        and result["list_tasks_growth"] <= 1.5
        and rows[big]["state_ms"] <= 10.0
    )
    print(f"{'calls':>7} {'bytes/call':>11} {'get().output ms':>16} {'list_tasks ms':>14} {'state ms':>9}")
    for n, r in rows.items():
        state = f"{r['state_ms']:>9.3f}" if r["state_ms"] is not None else f"{'-':>9}"
        print(f"{n:>7,} {r['bytes_per_call']:>11,.0f} {r['get_output_ms']:>16.3f} {r['list_tasks_ms']:>14.3f} {state}")
    print(f"get().output at {big:,} vs {small} calls (target <= 1.5): {result['get_output_growth']:.2f}")
    print(f"list_tasks() at {big:,} vs {small} calls (target <= 1.5): {result['list_tasks_growth']:.2f}")
    print(orjson.dumps(result, option=orjson.OPT_NON_STR_KEYS).decode())


if __name__ == "__main__":
    main()
