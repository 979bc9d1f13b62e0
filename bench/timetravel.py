"""Time-travel benchmark: state_at across a 100,000-event task, and fork cost against history length.

Run: ``python bench/timetravel.py`` (``--quick``: 10,000 events). Prints a table, then one line of JSON.

* state_at at the start, middle and end of the task, each against loading the latest state
  (target: each within 3×). Snapshots (every 100 events) make any point cost one snapshot read
  plus at most ~100 events, wherever it is.
* fork at 100 events vs at 100,000 (target: within 2×): a fork points at its parent's events;
  it copies none.

The task is a conversation-like workload: one ~500-byte observation per event.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

import orjson

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))

from _common import MESSAGE

import tether
from tether.events import ObservationRecorded


def build(url: str, task_id: str, n: int) -> None:
    log = tether.TaskLog(url)
    state = log.create(type="chat", task_id=task_id)
    version = state.version
    for i in range(n):
        version = log.append(task_id, [ObservationRecorded(key=f"turn{i % 10}", value=MESSAGE)], version)
    log.store.close()


def timed(fn, repeat: int) -> float:  # type: ignore[no-untyped-def]
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    big = 10_000 if args.quick else 100_000
    folder = tempfile.mkdtemp(prefix="tether-bench-")
    url = f"sqlite:///{os.path.join(folder, 'tt.db')}"
    build(url, "small", 100)
    build(url, "big", big)
    last = big + 1

    def cold() -> tether.TaskLog:
        return tether.TaskLog(url)  # no cached state: every read goes to the store

    latest = timed(lambda: cold().load("big"), 20)
    points = {"start": 50, "middle": last // 2, "end": last}
    at = {name: timed(lambda seq=seq: cold().state_at("big", seq), 20) for name, seq in points.items()}
    counter = iter(range(10**9))
    fork_small = timed(lambda: cold().fork("small", 100, new_id=f"fs{next(counter)}"), 30)
    fork_big = timed(lambda: cold().fork("big", big, new_id=f"fb{next(counter)}"), 30)
    result = {
        "events": big,
        "load_latest_ms": latest * 1000,
        "state_at_ms": {k: v * 1000 for k, v in at.items()},
        "state_at_ratio": {k: v / latest for k, v in at.items()},
        "fork_ms": {"100": fork_small * 1000, str(big): fork_big * 1000},
        "fork_ratio": fork_big / fork_small,
        "targets": {"state_at_ratio": 3.0, "fork_ratio": 2.0},
    }
    result["pass"] = max(result["state_at_ratio"].values()) <= 3.0 and result["fork_ratio"] <= 2.0
    print(f"{'measure':44} {'ms':>10} {'ratio':>8}")
    print(f"{f'load latest, {big:,}-event task':44} {latest * 1000:10.3f} {1:8.2f}")
    for name, seq in points.items():
        print(f"{f'state_at {name} (seq {seq:,})':44} {at[name] * 1000:10.3f} {at[name] / latest:8.2f}")
    print(f"{'fork at 100 events':44} {fork_small * 1000:10.3f} {1:8.2f}")
    print(f"{f'fork at {big:,} events':44} {fork_big * 1000:10.3f} {fork_big / fork_small:8.2f}")
    print(orjson.dumps(result).decode())


if __name__ == "__main__":
    main()
