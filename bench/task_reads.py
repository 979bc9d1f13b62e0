"""Task reads and bytes benchmark: what a task with many recorded calls costs to store and to read cold.

Run: ``python bench/task_reads.py`` (``--quick``: 10 and 1,000 calls; ``--smoke``: 10 and 100, each read once,
for the test suite). Prints a table, then one line of JSON.

For tasks of 10, 1,000, 10,000 and (full mode) 100,000 readonly calls, each returning a ~500-byte
result, on SQLite:

* bytes stored per call: the database file (after a checkpoint) over the calls (threshold: <= 1,100,
  flat from 1,000 to 100,000: a result stored once);
* ``app.get(id).output`` and ``app.list_tasks()`` from a fresh ``App`` (nothing cached): threshold
  the same for 10 and 10,000 calls (<= 1.5x);
* the full ``TaskState`` cold (``app.state``): threshold <= 10 ms at 10,000 calls; then what reading
  its calls costs, which a load leaves for when they are asked for: one call in the middle
  (``state.calls[n // 2].result``) and all of them (``[c.result for c in state.calls]``);
* bytes stored per step in two other modes, with the same threshold of 1,100: *effect*
  (side-effecting calls, an intent and a result each) and *chat* (one ~500-byte message per step
  added to a session, one ``session.add`` each).

The thresholds decide the JSON's ``pass``: storage that keeps each result once, and cold reads
that do not grow with the calls a task made.
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


def build(path: str, calls: int, mode: str = "loop") -> None:
    app = tether.App(f"sqlite:///{path}")

    @app.tool(readonly=True)
    def search(i: int) -> str:
        return MESSAGE

    @app.tool
    def book(i: int) -> str:
        return MESSAGE

    @app.task
    def research(ctx: tether.TaskContext, count: int) -> str:
        for i in range(count):
            ctx.call(search, i)
        return "done"

    @app.task
    def act(ctx: tether.TaskContext, count: int) -> str:
        for i in range(count):
            ctx.call(book, i)
        return "done"

    if mode == "chat":
        session = app.session("s")
        for i in range(calls):
            session.add("user" if i % 2 == 0 else "assistant", MESSAGE)
    else:
        run = app.run(research if mode == "loop" else act, calls, task_id="t")
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
        state = app.state("t") if read in ("one call", "all calls") else None
        start = time.perf_counter()
        if read == "output":
            app.get("t").output  # noqa: B018
        elif read == "list":
            app.list_tasks()
        elif read == "one call":
            assert state is not None
            state.calls[len(state.calls) // 2].result  # noqa: B018
        elif read == "all calls":
            assert state is not None
            [call.result for call in state.calls]
        else:
            app.state("t")
        times.append(time.perf_counter() - start)
        app.close()
    return statistics.median(times)


def bytes_per_step(folder: str, mode: str, n: int, base: int) -> float:
    path = os.path.join(folder, f"{mode}{n}.db")
    build(path, n, mode)
    size = os.path.getsize(path)
    os.remove(path)
    return (size - base) / n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="the shortest run through every path, for the test suite: its figures mean nothing",
    )
    args = parser.parse_args()
    sizes = [10, 100] if args.smoke else [10, 1_000] if args.quick else [10, 1_000, 10_000, 100_000]
    repeat = 1 if args.smoke else 7  # cold reads of each kind, the median counts
    steps_from = sizes[-1] if args.smoke else 1_000  # bytes per step: from this many on, past a file's fixed cost
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
            "get_output_ms": cold(path, "output", repeat) * 1000,
            "list_tasks_ms": cold(path, "list", repeat) * 1000,
            "state_ms": cold(path, "state", repeat) * 1000,
            "one_call_ms": cold(path, "one call", repeat) * 1000,
            "all_calls_ms": cold(path, "all calls", 3 if n > 10_000 else repeat) * 1000,
        }
        os.remove(path)
    steps = [n for n in sizes if n >= steps_from]
    modes = {mode: {n: bytes_per_step(folder, mode, n, base) for n in steps} for mode in ("effect", "chat")}
    big, small = min(sizes[-1], 10_000), sizes[0]
    output_growth = rows[big]["get_output_ms"] / rows[small]["get_output_ms"]
    list_growth = rows[big]["list_tasks_ms"] / rows[small]["list_tasks_ms"]
    per_step = {"loop": {n: r["bytes_per_call"] for n, r in rows.items() if n >= steps_from}, **modes}
    result: dict[str, object] = {
        "sizes": rows,
        "bytes_per_step": per_step,
        "get_output_growth": output_growth,
        "list_tasks_growth": list_growth,
        "targets": {"bytes_per_call": 1100, "get_output_growth": 1.5, "state_ms_at_10000": 10.0},
    }
    result["pass"] = (
        all(b <= 1100 for by_n in per_step.values() for b in by_n.values())
        and output_growth <= 1.5
        and list_growth <= 1.5
        and rows[big]["state_ms"] <= 10.0
    )
    print(
        f"{'calls':>7} {'bytes/call':>11} {'get().output ms':>16} {'list_tasks ms':>14} {'state ms':>9} "
        f"{'then 1 call ms':>15} {'then all ms':>12}"
    )
    for n, r in rows.items():
        print(
            f"{n:>7,} {r['bytes_per_call']:>11,.0f} {r['get_output_ms']:>16.3f} {r['list_tasks_ms']:>14.3f} "
            f"{r['state_ms']:>9.3f} {r['one_call_ms']:>15.3f} {r['all_calls_ms']:>12.1f}"
        )
    for mode, by_n in per_step.items():
        line = ", ".join(f"{n:,}: {b:,.0f}" for n, b in by_n.items())
        print(f"bytes per step, {mode} mode (threshold <= 1,100): {line}")
    print(f"get().output at {big:,} vs {small} calls (threshold <= 1.5): {output_growth:.2f}")
    print(f"list_tasks() at {big:,} vs {small} calls (threshold <= 1.5): {list_growth:.2f}")
    print(orjson.dumps(result, option=orjson.OPT_NON_STR_KEYS).decode())


if __name__ == "__main__":
    main()
