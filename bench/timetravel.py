"""Time-travel benchmark: state_at, fork and history against history length, for two shapes of state.

Run: ``python bench/timetravel.py`` (1,000 and 100,000 events; ``--quick``: 1,000 and 10,000; ``--smoke``: 60
and 120, for the test suite).
Prints a table, then one line of JSON.

Two shapes of task, each event a ~500-byte observation:

* ``overwrite``: the state stays about the same size (ten keys, each overwritten in turn), as a
  task whose data is a working set;
* ``accumulate``: the state keeps what every event carries: a task of readonly calls, each
  returning ~500 bytes, whose results pile up in its state (one event per call).

For each shape and size, from a fresh ``TaskLog`` (nothing cached in the process):

* ``state_at`` near the start, at the middle and at the end, each against loading the latest
  state (threshold: each within 3x);
* ``fork`` near the start and near the end of the biggest task, against the same at 1,000
  events (threshold: within 2x; a fork points at its parent's events and copies none);

and ``app.history`` of a task of 1,000 steps, each a step with one readonly call returning
~500 bytes (3,004 events; threshold 5 ms), against the floor of fetching its rows with the stdlib's
``sqlite3`` and doing nothing with them. An entry makes its time, summary and event when first
read, so the listing is timed beside the listing with every summary read (as ``tether history``
prints them). ``--only history`` runs that part alone.

The thresholds decide the JSON's ``pass``: a point in a task's past costs about what its latest
state does, however long the task, and a fork does not copy the history it starts from.
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable

import orjson

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))

from _common import MESSAGE

import tether
from tether.events import ObservationRecorded

TARGETS = {"state_at_ratio": 3.0, "fork_ratio": 2.0, "history_ms": 5.0}


def build(url: str, task_id: str, n: int, shape: str) -> None:
    """A task of ``n`` events after its first: observations overwriting ten keys, or ``n`` calls."""
    if shape == "accumulate":
        app = tether.App(url)
        search = app.tool(name="search", readonly=True)(lambda i: MESSAGE)

        @app.task(name="research")
        def research(ctx: tether.TaskContext, count: int) -> None:
            for i in range(count):
                ctx.call(search, i)

        app.run(research, n, task_id=task_id)
        app.close()
        return
    log = tether.TaskLog(url)
    version = log.create(type="chat", task_id=task_id).version
    batch: list[ObservationRecorded] = []
    for i in range(n):
        batch.append(ObservationRecorded(key=f"turn{i % 10}", value=MESSAGE))
        if len(batch) == 50 or i == n - 1:
            version = log.append(task_id, batch, version)
            batch = []
    log.store.close()


def timed(fn: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def travel(url: str, task_id: str, n: int, repeat: int) -> dict[str, float]:
    """Milliseconds: latest, state_at start/middle/end, fork near the start and near the end."""
    counter = iter(range(10**9))

    def cold() -> tether.TaskLog:
        return tether.TaskLog(url)  # no cached state: every read goes to the store

    last = n + 1
    out = {"latest": timed(lambda: cold().load(task_id), repeat)}
    for name, seq in (("start", 50), ("middle", last // 2), ("end", last)):
        out[f"state_at_{name}"] = timed(lambda seq=seq: cold().state_at(task_id, seq), repeat)
    for name, seq in (("fork_start", 50), ("fork_end", n)):
        out[name] = timed(lambda seq=seq: cold().fork(task_id, seq, new_id=f"{task_id}-fork{next(counter)}"), repeat)
    return {key: value * 1000 for key, value in out.items()}


def raw_fetch(path: str, task_id: str) -> float:
    """The floor, in seconds: the same rows fetched on a new stdlib ``sqlite3`` connection (as the
    history's App is new), and nothing done with them."""
    conn = sqlite3.connect(path)
    (task,) = conn.execute("SELECT id FROM tasks WHERE task_id = ?", (task_id,)).fetchone()
    query = "SELECT seq, type, schema, at, data, fence FROM events WHERE task = ? AND seq > 0 ORDER BY seq"
    start = time.perf_counter()
    conn.execute(query, (task,)).fetchall()
    took = time.perf_counter() - start
    conn.close()
    return took


def store_research(url: str, steps: int, task_id: str | None = None) -> str:
    """A task of ``steps`` steps, each one readonly call returning ~500 bytes, run to its end on
    ``url``: its id."""
    app = tether.App(url)
    search = app.tool(name="search", readonly=True)(lambda i: MESSAGE)

    @app.task
    def research(ctx: tether.TaskContext, n: int) -> None:
        for i in range(n):
            with ctx.step(f"s{i}"):
                ctx.call(search, i)

    done = app.run(research, steps, task_id=task_id).task_id
    app.close()
    return done


def history_ms(folder: str, steps: int, repeat: int) -> dict[str, float]:
    """Milliseconds (medians) of ``app.history`` on an App opened outside the timing, as by a
    server, and of the raw fetch of its rows, taken in turn; ``events``: the history's entries."""
    path = os.path.join(folder, "history.db")
    url = f"sqlite:///{path}"
    task_id = store_research(url, steps)
    events = 0
    times: list[float] = []
    summed: list[float] = []
    floors: list[float] = []
    for _ in range(repeat):
        floors.append(raw_fetch(path, task_id))
        for into, every_summary in ((times, False), (summed, True)):
            fresh = tether.App(url)
            start = time.perf_counter()
            history = fresh.history(task_id)
            if every_summary:
                [entry.summary for entry in history]
            into.append(time.perf_counter() - start)
            events = len(history)
            fresh.close()
    ms, floor = statistics.median(times) * 1000, statistics.median(floors) * 1000
    read = statistics.median(summed) * 1000
    return {"ms": ms, "raw_fetch_ms": floor, "ratio": ms / floor, "events": events, "read_ms": read}


def history_json(hist: dict[str, float]) -> dict[str, float]:
    return {
        "history_ms": hist["ms"],
        "history_raw_fetch_ms": hist["raw_fetch_ms"],
        "history_vs_raw_fetch": hist["ratio"],
        "history_events": hist["events"],
        "history_every_summary_ms": hist["read_ms"],
    }


def print_history(hist: dict[str, float], steps: int) -> None:
    print(
        f"history of a {steps:,}-step task ({hist['events']:,.0f} events): {hist['ms']:.2f} ms (threshold <= 5); "
        f"the raw sqlite3 fetch of its rows {hist['raw_fetch_ms']:.2f} ms: {hist['ratio']:.2f}x the floor; "
        f"with every summary read {hist['read_ms']:.2f} ms"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="the shortest run through every path, for the test suite: its figures mean nothing",
    )
    parser.add_argument("--only", choices=("history",), help="run only this part (history: app.history's time)")
    args = parser.parse_args()
    if args.only == "history":
        hist = history_ms(tempfile.mkdtemp(prefix="tether-bench-"), 1_000, 7 if args.quick else 15)
        print_history(hist, 1_000)
        print(orjson.dumps({**history_json(hist), "targets": {"history_ms": TARGETS["history_ms"]}}).decode())
        return
    sizes = (60, 120) if args.smoke else (1_000, 10_000) if args.quick else (1_000, 100_000)
    repeat = 1 if args.smoke else 7 if args.quick else 15
    steps = 10 if args.smoke else 1_000  # of the task whose history is read
    folder = tempfile.mkdtemp(prefix="tether-bench-")
    result: dict[str, object] = {"sizes": list(sizes), "targets": TARGETS}
    verdicts: list[bool] = []
    print(
        f"{'shape':11} {'events':>8} {'latest':>8} {'at start':>9} {'middle':>8} {'end':>8} "
        f"{'fork start':>11} {'fork end':>9}   (ms)"
    )
    for shape in ("overwrite", "accumulate"):
        url = f"sqlite:///{os.path.join(folder, f'{shape}.db')}"
        shape_result: dict[str, dict[str, float]] = {}
        for n in sizes:
            build(url, f"{shape}{n}", n, shape)
            ms = travel(url, f"{shape}{n}", n, repeat)
            shape_result[str(n)] = ms
            print(
                f"{shape:11} {n:8,} {ms['latest']:8.3f} {ms['state_at_start']:9.3f} {ms['state_at_middle']:8.3f} "
                f"{ms['state_at_end']:8.3f} {ms['fork_start']:11.3f} {ms['fork_end']:9.3f}"
            )
        big = shape_result[str(sizes[-1])]
        small = shape_result[str(sizes[0])]
        at_ratio = max(big[f"state_at_{p}"] for p in ("start", "middle", "end")) / big["latest"]
        fork_ratio = max(big["fork_start"], big["fork_end"]) / small["fork_end"]
        result[shape] = {"ms": shape_result, "state_at_ratio": at_ratio, "fork_ratio": fork_ratio}
        verdicts += [at_ratio <= TARGETS["state_at_ratio"], fork_ratio <= TARGETS["fork_ratio"]]
    hist = history_ms(folder, steps, repeat)
    result.update(history_json(hist))
    verdicts.append(hist["ms"] <= TARGETS["history_ms"])
    result["pass"] = all(verdicts)
    for shape in ("overwrite", "accumulate"):
        r = result[shape]
        assert isinstance(r, dict)
        print(
            f"{shape}: worst state_at vs latest at {sizes[-1]:,} events {r['state_at_ratio']:.2f} (threshold <= 3); "
            f"worst fork at {sizes[-1]:,} vs at {sizes[0]:,} events {r['fork_ratio']:.2f} (threshold <= 2)"
        )
    print_history(hist, steps)
    print(orjson.dumps(result).decode())


if __name__ == "__main__":
    main()
