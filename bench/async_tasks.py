"""Async concurrency benchmark: many async tasks in one process, one event loop.

Run: ``python bench/async_tasks.py`` (``--quick``: 50 tasks; ``--smoke``: 3, for the test suite; ``--tasks N``;
``--gc-freeze``: call ``gc.freeze()`` after the warm-up, as an application may once it has started; ``--after N``: run
N tasks (``--tasks`` at a time) before measuring, as a process that has served for a while, whose
app keeps the tasks it ran within its budget and whose collections walk what it keeps; ``TETHER_BENCH_PG_URL``
picks the PostgreSQL server, default ``postgresql://postgres@127.0.0.1:5432/test``; without a
server the PostgreSQL rows are skipped with a message). Prints a table, then one line of JSON.

Each task makes 10 side-effecting ``ctx.call``s of an async tool returning ~500 bytes (an intent
and a result recorded per call). Measured on SQLite (a file) and on PostgreSQL (its own schema):

* one task: calls per second of one task alone on the loop (median of 5 runs);
* concurrent: ``--tasks`` tasks started together with ``asyncio.gather``; calls per second in all;
* stall: the longest the event loop went without running a coroutine that ticks every 1 ms,
  while the concurrent tasks ran (a loop blocked on store I/O stalls it);
* gc pause: the longest garbage collection meanwhile (it holds the interpreter: the loop stalls
  at least that long when it falls in the loop's way; a full one walks every object of the
  process, most of them the modules imported at start); and the longest stall that no garbage
  collection fell in (what is left to tether, the GIL and the machine), and how many full
  collections fell in the run. The threshold is on the longest stall, whatever caused it;
* CPU ms per task: the process's CPU time (every thread) per task, alone and together: less
  noisy than the rates on shared cores, and what bounds them when the process is CPU-bound.

Thresholds (the JSON's ``pass``): concurrent >= 5x one task on PostgreSQL, >= 2x on SQLite — tasks
waiting on the store overlap rather than queue behind each other (SQLite has one writer, so less);
and stall <= 5 ms — no task's store I/O blocks the loop its neighbours run on.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import statistics
import sys
import tempfile
import time
import uuid
from typing import Any

import orjson

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))

from _common import MESSAGE

import tether

CALLS = 10
TARGETS = {"sqlite": 2.0, "postgres": 5.0, "stall_ms": 5.0}
PG = os.environ.get("TETHER_BENCH_PG_URL", "postgresql://postgres@127.0.0.1:5432/test")


def make_app(url: str) -> tuple[tether.App, Any]:
    app = tether.App(url)

    @app.tool(name="send")
    async def send(i: int) -> str:
        await asyncio.sleep(0)
        return MESSAGE

    @app.task(name="ten_calls")
    async def ten_calls(ctx: tether.AsyncTaskContext, n: int) -> int:
        for i in range(n):
            await ctx.call(send, i)
        return n

    return app, ten_calls


async def _ticker(stop: asyncio.Event, gaps: list[tuple[float, float]]) -> None:
    """Tick every 1 ms; note each gap between ticks longer than that (its start and end)."""
    last = time.perf_counter()
    while not stop.is_set():
        await asyncio.sleep(0.001)
        now = time.perf_counter()
        if now - last > 0.001:
            gaps.append((last, now))
        last = now


class _GcPauses:
    """The garbage collections while it is installed (``gc.callbacks``): each one's start and end."""

    def __init__(self) -> None:
        self.pauses: list[tuple[float, float]] = []
        self.full = 0  # how many of them were full collections (generation 2)
        self._began = 0.0

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._began = time.perf_counter()
        else:
            self.pauses.append((self._began, time.perf_counter()))
            self.full += info["generation"] == 2


def _stalls(gaps: list[tuple[float, float]], pauses: list[tuple[float, float]]) -> tuple[float, float, float]:
    """(the longest stall, the longest GC pause, the longest stall that no GC pause fell in), seconds."""
    stall = max((end - start - 0.001 for start, end in gaps), default=0.0)
    pause = max((end - start for start, end in pauses), default=0.0)
    clear = [(s, e) for s, e in gaps if not any(ps < e and pe > s for ps, pe in pauses)]
    return stall, pause, max((end - start - 0.001 for start, end in clear), default=0.0)


async def _together(app: tether.App, task: Any, tasks: int, prefix: str) -> tuple[float, ...]:
    """(calls per second in all; the loop's longest stall, the longest GC pause, the longest stall
    without a GC pause in it, in seconds; the process's CPU seconds per task; how many full
    collections fell in) for ``tasks`` tasks at once."""
    stop = asyncio.Event()
    gaps: list[tuple[float, float]] = []
    ticking = asyncio.create_task(_ticker(stop, gaps))
    await asyncio.sleep(0.01)
    gaps.clear()
    pauses = _GcPauses()
    gc.callbacks.append(pauses)
    start, cpu = time.perf_counter(), time.process_time()
    try:
        handles = await asyncio.gather(*(app.run_async(task, CALLS, task_id=f"{prefix}-{i}") for i in range(tasks)))
    finally:
        elapsed = time.perf_counter() - start
        cpu = time.process_time() - cpu
        gc.callbacks.remove(pauses)
    stop.set()
    await ticking
    assert all(h.status is tether.Status.COMPLETED for h in handles), [h.failure for h in handles][:3]
    return (tasks * CALLS / elapsed, *_stalls(gaps, pauses.pauses), cpu / tasks, pauses.full)


async def _alone(app: tether.App, task: Any, prefix: str) -> tuple[float, float]:
    """(calls per second, the process's CPU seconds) of one task alone: the median of 5 runs."""
    rates, cpus = [], []
    for r in range(5):
        start, cpu = time.perf_counter(), time.process_time()
        handle = await app.run_async(task, CALLS, task_id=f"{prefix}-alone-{r}")
        rates.append(CALLS / (time.perf_counter() - start))
        cpus.append(time.process_time() - cpu)
        assert handle.status is tether.Status.COMPLETED, handle.failure
    return statistics.median(rates), statistics.median(cpus)


def measure(url: str, tasks: int, *, freeze: bool = False, after: int = 0) -> dict[str, float]:
    app, task = make_app(url)

    async def main() -> dict[str, float]:
        await app.run_async(task, CALLS, task_id="warm-up")
        if freeze:
            gc.collect()
            gc.freeze()
        for first in range(0, after, tasks):  # a process that has served a while
            count = min(tasks, after - first)
            await asyncio.gather(*(app.run_async(task, CALLS, task_id=f"before-{first + i}") for i in range(count)))
        alone, alone_cpu = await _alone(app, task, "a")
        together, stall, pause, clear, cpu, full = await _together(app, task, tasks, "t")
        return {
            "one_task_calls_per_s": alone,
            "concurrent_calls_per_s": together,
            "ratio": together / alone,
            "stall_ms": stall * 1000,
            "gc_pause_ms": pause * 1000,
            "stall_without_gc_ms": clear * 1000,
            "one_task_cpu_ms": alone_cpu * 1000,
            "concurrent_cpu_ms_per_task": cpu * 1000,
            "full_gcs": full,
        }

    try:
        return asyncio.run(main())
    finally:
        app.close()
        if freeze:
            gc.unfreeze()


def postgres_url() -> str | None:
    try:
        import psycopg

        with psycopg.connect(PG, autocommit=True, connect_timeout=3):
            pass
    except Exception as exc:
        print(f"PostgreSQL skipped: {exc}")
        return None
    return f"{PG}{'&' if '?' in PG else '?'}schema=bench_async_{uuid.uuid4().hex[:8]}"


def drop_schema(url: str) -> None:
    import psycopg

    schema = url.rsplit("schema=", 1)[1]
    with psycopg.connect(PG, autocommit=True) as admin:
        admin.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="the shortest run through every path, for the test suite: its figures mean nothing",
    )
    parser.add_argument("--tasks", type=int, default=None)
    parser.add_argument("--gc-freeze", action="store_true")
    parser.add_argument("--after", type=int, default=0, help="tasks to run before measuring")
    args = parser.parse_args()
    tasks = args.tasks or (3 if args.smoke else 50 if args.quick else 200)
    folder = tempfile.mkdtemp(prefix="tether-bench-")
    result: dict[str, Any] = {
        "tasks": tasks,
        "calls_per_task": CALLS,
        "targets": TARGETS,
        "gc_freeze": args.gc_freeze,
        "after": args.after,
    }
    sqlite = f"sqlite:///{os.path.join(folder, 'async.db')}"
    result["sqlite"] = measure(sqlite, tasks, freeze=args.gc_freeze, after=args.after)
    pg = postgres_url()
    if pg is not None:
        try:
            result["postgres"] = measure(pg, tasks, freeze=args.gc_freeze, after=args.after)
        finally:
            drop_schema(pg)
    if args.after:
        print(f"measured after {args.after:,} tasks had run ({tasks} at a time)")
    print(
        f"{'backend':10} {'one task calls/s':>17} {f'{tasks} tasks calls/s':>18} {'ratio':>7} {'threshold':>9} "
        f"{'longest stall ms':>17} {'gc pause ms':>12} {'stall w/o gc ms':>16} {'full gcs':>9} "
        f"{'cpu ms/task alone':>18} {'together':>9}"
    )
    verdicts = []
    for backend in ("sqlite", "postgres"):
        if backend not in result:
            continue
        r = result[backend]
        print(
            f"{backend:10} {r['one_task_calls_per_s']:17,.0f} {r['concurrent_calls_per_s']:18,.0f} "
            f"{r['ratio']:7.2f} {TARGETS[backend]:9.1f} {r['stall_ms']:17.2f} {r['gc_pause_ms']:12.2f} "
            f"{r['stall_without_gc_ms']:16.2f} {r['full_gcs']:9d} {r['one_task_cpu_ms']:18.2f} "
            f"{r['concurrent_cpu_ms_per_task']:9.2f}"
        )
        verdicts += [r["ratio"] >= TARGETS[backend], r["stall_ms"] <= TARGETS["stall_ms"]]
    result["pass"] = all(verdicts)
    print(orjson.dumps(result).decode())


if __name__ == "__main__":
    main()
