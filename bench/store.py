"""Store benchmark: append latency against a raw SQLite floor, bytes per event, load latency.

Run: ``python bench/store.py`` (``--quick`` for a short run, ``--smoke`` for the shortest run through
every path, whose figures mean nothing). Prints a table, then
one line of JSON. Everything is measured in the same run, on the same file
system, with the same journal mode and synchronous setting, so the ratios hold
on a noisy shared machine where absolute times do not.

Workloads, each one ~500-byte "message" per event:

* ``overwrite``: the task keeps the latest message as an observation. The log
  grows, the state does not: loading costs the events since the last snapshot.
* ``accumulate``: every message is kept in the state (a decision each), as a
  chat that keeps its history in its state would. The state itself grows, so
  loading it must grow too (printed so nobody has to guess), but storage must
  still grow with the deltas: the bytes target holds for both workloads.
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
from tether.events import DecisionMade, ObservationRecorded


def floor_per_commit(path: str, n: int, *, synchronous: str = "NORMAL") -> float:
    """Raw sqlite3: one INSERT + COMMIT per step, WAL and synchronous=NORMAL like tether (or FULL)."""
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute(f"PRAGMA synchronous={synchronous}")
    conn.execute("CREATE TABLE IF NOT EXISTS raw (task INTEGER, seq INTEGER, data TEXT, PRIMARY KEY (task, seq))")
    conn.commit()
    payload = orjson.dumps({"key": "message", "value": MESSAGE}).decode()
    start = time.perf_counter()
    for seq in range(1, n + 1):
        conn.execute("INSERT INTO raw VALUES (1, ?, ?)", (seq, payload))
        conn.commit()
    elapsed = time.perf_counter() - start
    conn.close()
    return elapsed / n


def tether_per_append(path: str, n: int) -> float:
    log = tether.TaskLog(f"sqlite:///{path}")
    state = log.create(type="chat")
    task_id, version = state.task_id, state.version
    start = time.perf_counter()
    for _ in range(n):
        version = log.append(task_id, [ObservationRecorded(key="message", value=MESSAGE)], version)
    elapsed = time.perf_counter() - start
    log.store.close()
    return elapsed / n


def db_bytes(path: str) -> int:
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    pages, free, size = (
        conn.execute(f"PRAGMA {p}").fetchone()[0] for p in ("page_count", "freelist_count", "page_size")
    )
    conn.close()
    return (pages - free) * size


def build(path: str, n: int, make: Callable[[int], tether.events.Event]) -> tuple[str, int]:
    """A task with ``n`` workload events; returns its id and the bytes the events added."""
    log = tether.TaskLog(f"sqlite:///{path}")
    state = log.create(type="chat")
    base = db_bytes(path)
    version = state.version
    for i in range(n):
        version = log.append(state.task_id, [make(i)], version)
    log.store.close()
    return state.task_id, db_bytes(path) - base


def load_latency(path: str, task_id: str, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        log = tether.TaskLog(f"sqlite:///{path}")  # a cold log: no cached state
        start = time.perf_counter()
        log.load(task_id)
        times.append(time.perf_counter() - start)
        log.store.close()
    return statistics.median(times)


def best(fn: Callable[[], float], rounds: int) -> float:
    return min(fn() for _ in range(rounds))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer iterations")
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="the shortest run through every path, for the test suite: its figures mean nothing",
    )
    args = parser.parse_args()
    n_append = 20 if args.smoke else 500 if args.quick else 5000
    rounds = 1 if args.smoke else 2 if args.quick else 5
    sizes = [20, 100] if args.smoke else [100, 1000] if args.quick else [100, 1000, 10000]
    loads = 2 if args.smoke else 20  # reads of each task's state (of a 10,000-event one: 5)
    workdir = tempfile.mkdtemp(prefix="tether-bench-")

    def fresh(name: str) -> str:
        path = os.path.join(workdir, name)
        for suffix in ("", "-wal", "-shm"):
            if os.path.exists(path + suffix):
                os.remove(path + suffix)
        return path

    # Interleave floor and tether rounds so drift on a shared machine hits both alike.
    floors, appends = [], []
    for r in range(rounds):
        floors.append(floor_per_commit(fresh(f"floor{r}.db"), n_append))
        appends.append(tether_per_append(fresh(f"append{r}.db"), n_append))
    floor, append = min(floors), min(appends)

    workloads: dict[str, Callable[[int], tether.events.Event]] = {
        "overwrite": lambda i: ObservationRecorded(key="message", value=MESSAGE),
        "accumulate": lambda i: DecisionMade(name=f"turn{i}", choice=i, rationale=MESSAGE),
    }
    sizes_out: dict[str, dict[int, dict[str, float]]] = {}
    for name, make in workloads.items():
        sizes_out[name] = {}
        for n in sizes:
            path = fresh(f"{name}{n}.db")
            task_id, added = build(path, n, make)
            sizes_out[name][n] = {
                "bytes_per_event": added / n,
                "load_ms": load_latency(path, task_id, 5 if n >= 10000 else loads) * 1000,
            }

    small, large = sizes[0], sizes[-1]
    ow = sizes_out["overwrite"]
    growth = {w: d[large]["bytes_per_event"] / d[small]["bytes_per_event"] for w, d in sizes_out.items()}
    result = {
        "floor_commit_ms": floor * 1000,
        "append_ms": append * 1000,
        "append_ratio": append / floor,
        "bytes_per_event": {w: {n: round(v["bytes_per_event"], 1) for n, v in d.items()} for w, d in sizes_out.items()},
        "load_ms": {w: {n: round(v["load_ms"], 4) for n, v in d.items()} for w, d in sizes_out.items()},
        "bytes_growth": max(growth.values()),
        "bytes_growth_by_workload": growth,
        "load_growth": ow[large]["load_ms"] / ow[small]["load_ms"],
        "targets": {"append_ratio": 1.5, "bytes_growth": 1.2, "load_growth": 2.0},
    }
    result["pass"] = result["append_ratio"] <= 1.5 and result["bytes_growth"] <= 1.2 and result["load_growth"] <= 2.0

    print(f"{'measure':44} {'value':>12}")
    print(f"{'floor: raw INSERT+COMMIT (ms)':44} {floor * 1000:12.4f}")
    print(f"{'tether append, 1 event/commit (ms)':44} {append * 1000:12.4f}")
    print(f"{'ratio (target <= 1.5)':44} {result['append_ratio']:12.2f}")
    for name, data in sizes_out.items():
        for n, values in data.items():
            print(f"{name + f' @ {n:,} events: bytes/event':44} {values['bytes_per_event']:12.1f}")
            print(f"{name + f' @ {n:,} events: load (ms)':44} {values['load_ms']:12.4f}")
    for name, value in growth.items():
        print(f"{f'{name} bytes/event {large:,} vs {small} (<= 1.2)':44} {value:12.2f}")
    print(f"{f'overwrite load {large:,} vs {small} (<= 2.0)':44} {result['load_growth']:12.2f}")
    print(orjson.dumps(result, option=orjson.OPT_NON_STR_KEYS).decode())


if __name__ == "__main__":
    main()
