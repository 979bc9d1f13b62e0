"""The app that bench/workers.py runs in worker processes: a 5-call task, with timing of every append."""

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
