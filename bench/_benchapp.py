"""The app the benchmarks run in worker processes (bench/workers.py, bench/redis.py): a 5-call task and an
agent's turn of readonly and side-effecting calls, with timing of every append."""

from __future__ import annotations

import atexit
import json
import os
import time
from typing import Any

import tether
from tether.log import TaskLog

app = tether.App(os.environ["TETHER_BENCH_URL"], lease_ttl=10.0)
_waits: list[float] = []
_append = TaskLog.append


def _timed_append(self: TaskLog, *args: Any, **kwargs: Any) -> int:
    start = time.perf_counter()
    try:
        return _append(self, *args, **kwargs)
    finally:
        _waits.append(time.perf_counter() - start)


TaskLog.append = _timed_append  # type: ignore[method-assign]


@app.tool
def step(n: int, i: int) -> int:
    return n * 10 + i


@app.task
def five_calls(ctx: tether.TaskContext, n: int) -> int:
    total = 0
    for i in range(5):
        total += ctx.call(step, n, i)
    if n < 0:  # the latency probe: wait for a person, then finish
        ctx.wait_for_input("go")
    return total


# ~500 bytes, as bench/_common.py's MESSAGE (not imported: the workers import this module only).
RESULT = ("The calendar has two free slots on Tuesday afternoon; the design team is free at 14:00. " * 6)[:500]


@app.tool(readonly=True)
def look_up(n: int, i: int) -> str:
    return f"{n}.{i} {RESULT}"


@app.tool
def write_back(n: int, i: int) -> str:
    return f"{n}.{i} {RESULT}"


@app.task
def agent_turn(ctx: tether.TaskContext, n: int, calls: int) -> int:
    """``calls`` recorded calls returning ~500 bytes, as an agent's turn makes them: two reads
    (readonly: one append each) for every write (side-effecting: the intent, then the result)."""
    for i in range(calls):
        ctx.call(write_back if i % 3 == 2 else look_up, n, i)
    return calls


@atexit.register
def _report() -> None:
    path = os.environ.get("TETHER_BENCH_STATS")
    if not path or not _waits:
        return
    waits = sorted(_waits)
    with open(path, "a") as out:
        out.write(
            json.dumps(
                {
                    "pid": os.getpid(),
                    "appends": len(waits),
                    "max_ms": waits[-1] * 1000,
                    "p99_ms": waits[int(len(waits) * 0.99) - 1] * 1000,
                }
            )
            + "\n"
        )
