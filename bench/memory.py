"""Memory benchmark: what a process keeps of the tasks it went through (a worker, a server).

Run: ``python bench/memory.py`` (100, 1,000 and 3,000 tasks; ``--quick``: 50, 200 and 500; ``--smoke``: 1, 2
and 3 of 10 calls each, for the test suite).
Prints a table, then one line of JSON.

One App on a SQLite file runs task after task, each 100 side-effecting calls returning ~500 bytes
(an agent's run of a few dozen turns). After each number of tasks it counts what the process holds,
after a full garbage collection: the interpreter's allocated memory blocks
(``sys.getallocatedblocks``: every object and buffer alive) and the resident set size. Two apps,
each in a process of its own: the default (``cache_bytes``, 16 MiB of stored events) and one whose
memory is bounded by the count of tasks alone (4,096, with no budget of bytes), beside the
floor, the same process right after its App was made and its first task run. With them, what
every full garbage collection walks (the objects the cycle collector tracks) and how long one takes
(median of three ``gc.collect()``): an event loop stalls that long whenever one falls in its way.
Without ``--quick``, a third app keeps its tasks' call records as objects once their runs stopped
(where the default puts them away and reads them from their events when asked for).

Threshold (the JSON's ``pass``): the blocks alive after the most tasks are at most 1.2x those after
the middle number (flat: a process keeps nothing for each task it went through, beyond its budget).
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import subprocess
import sys
import tempfile
import time

import orjson

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))

from _common import MESSAGE

import tether

SMOKE = "--smoke" in sys.argv  # the shortest run (its children too): fewer calls, one timed collection
CALLS = 10 if SMOKE else 100
COLLECTIONS = 1 if SMOKE else 3
TARGET = 1.2
UNBOUNDED = 1 << 62  # bytes: the count of tasks (4,096) alone bounds the memory


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _held() -> tuple[int, float, int, float]:
    """Blocks alive, RSS (MB), objects the collector tracks, a full collection's milliseconds."""
    gc.collect()
    took = []
    for _ in range(COLLECTIONS):
        start = time.perf_counter()
        gc.collect()
        took.append((time.perf_counter() - start) * 1000)
    return sys.getallocatedblocks(), _rss_mb(), len(gc.get_objects()), statistics.median(took)


def child(cache_bytes: int, sizes: list[int], keep_records: bool = False) -> None:
    """Run the tasks in this process; print one line of JSON: what :func:`_held` says at the floor and
    after each size. ``keep_records``: the log keeps every call's record once a run stopped."""
    if keep_records:
        from tether.log.memory import Entry

        Entry.put_away = lambda self, reader: None  # type: ignore[method-assign]
    app = tether.App(f"sqlite:///{tempfile.mkdtemp(prefix='tether-bench-')}/memory.db", cache_bytes=cache_bytes)

    @app.tool(name="send")
    def send(i: int) -> str:
        return MESSAGE

    @app.task(name="calls")
    def calls(ctx: tether.TaskContext, n: int) -> int:
        for i in range(n):
            ctx.call(send, i)
        return n

    app.run(calls, CALLS, task_id="first")
    out = {"floor": _held()}
    done = 0
    for size in sizes:
        for i in range(done, size):
            app.run(calls, CALLS, task_id=f"t{i:07d}")
        done = size
        out[str(size)] = _held()
    app.close()
    print(orjson.dumps(out).decode())


def measure(cache_bytes: int, sizes: list[int], keep_records: bool = False) -> dict[str, list[float]]:
    args = [sys.executable, __file__, "--child" + ("-keep" if keep_records else ""), str(cache_bytes), *map(str, sizes)]
    args += ["--smoke"] if SMOKE else []
    done = subprocess.run(args, capture_output=True, text=True, check=True)
    return orjson.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] in ("--child", "--child-keep"):
        sizes = [int(s) for s in sys.argv[3:] if s != "--smoke"]
        child(int(sys.argv[2]), sizes, keep_records=sys.argv[1] == "--child-keep")
        return
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="the shortest run through every path, for the test suite: its figures mean nothing",
    )
    args = parser.parse_args()
    sizes = [1, 2, 3] if args.smoke else [50, 200, 500] if args.quick else [100, 1_000, 3_000]
    rows = {"default": measure(16 * 1024 * 1024, sizes), "count_only": measure(UNBOUNDED, sizes)}
    if not (args.quick or args.smoke):
        rows["records_kept"] = measure(16 * 1024 * 1024, sizes, keep_records=True)
    print(
        f"{'app':<12} {'tasks':>7} {'blocks alive':>13} {'vs floor':>9} {'RSS MB':>8} "
        f"{'gc objects':>11} {'full gc ms':>11}"
    )
    for name, row in rows.items():
        floor = row["floor"][0]
        for size in ["floor", *map(str, sizes)]:
            blocks, rss, tracked, collect = row[size]
            print(
                f"{name:<12} {size:>7} {blocks:>13,.0f} {blocks / floor:>8.2f}x {rss:>8.1f} "
                f"{tracked:>11,.0f} {collect:>11.1f}"
            )
    if "records_kept" in rows:
        last = str(sizes[-1])
        now, kept = rows["default"][last], rows["records_kept"][last]
        print(
            f"after {sizes[-1]:,} tasks, records kept as objects / put away: {kept[2] / now[2]:.2f}x the objects "
            f"a full collection walks, {kept[3] / now[3]:.2f}x its time ({kept[3]:.1f} / {now[3]:.1f} ms)"
        )
    growth = {name: row[str(sizes[-1])][0] / row[str(sizes[1])][0] for name, row in rows.items()}
    print(
        f"blocks after {sizes[-1]:,} tasks / after {sizes[1]:,}: default {growth['default']:.2f} "
        f"(threshold <= {TARGET}), bounded by the count of tasks alone {growth['count_only']:.2f}"
    )
    report = {
        "tasks": sizes,
        "calls_per_task": CALLS,
        "default": rows["default"],
        "count_only": rows["count_only"],
        "records_kept": rows.get("records_kept"),
        "growth": growth["default"],
        "count_only_growth": growth["count_only"],
        "target": TARGET,
        "pass": growth["default"] <= TARGET,
    }
    print(orjson.dumps(report).decode())


if __name__ == "__main__":
    main()
