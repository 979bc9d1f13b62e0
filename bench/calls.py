"""Recorded-call benchmark: what ``ctx.call`` costs over the store's floor and a plain Python call.

Run: ``python bench/calls.py`` (``--quick`` for a short run). Prints a table, then
one line of JSON. The floor is the same as ``bench/store.py``'s: one raw SQLite
INSERT + COMMIT per step, WAL, synchronous=NORMAL, same file system, same run.

* readonly: ``ctx.call`` of a no-op tool declared ``readonly=True`` — one commit
  (the result), so its floor is one commit.
* side-effecting: the default — the intent is committed before the tool runs and
  the result after, two commits.
* plain: the same no-op called directly, for scale.

Each measurement is a task of ``--calls`` calls; the per-call cost is the task's
time divided by its calls, the best of several rounds, interleaved with the floor.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

import orjson

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))
sys.path.insert(0, os.path.dirname(__file__))

from _common import recorded_call
from store import floor_per_commit


def noop() -> None:
    return None


def measure_plain(n: int) -> float:
    start = time.perf_counter()
    for _ in range(n):
        noop()
    return (time.perf_counter() - start) / n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer iterations (for smoke tests)")
    parser.add_argument("--calls", type=int, default=None, help="calls per task")
    args = parser.parse_args()
    n = args.calls or (300 if args.quick else 2000)
    rounds = 2 if args.quick else 5
    workdir = tempfile.mkdtemp(prefix="tether-bench-")
    floors, readonly, effect = [], [], []
    for r in range(rounds):
        floors.append(floor_per_commit(os.path.join(workdir, f"floor{r}.db"), n))
        readonly.append(recorded_call(f"sqlite:///{os.path.join(workdir, f'ro{r}.db')}", n, readonly=True))
        effect.append(recorded_call(f"sqlite:///{os.path.join(workdir, f'fx{r}.db')}", n, readonly=False))
    floor, ro, fx = min(floors), min(readonly), min(effect)
    plain = min(measure_plain(100_000) for _ in range(rounds))
    result = {
        "calls_per_task": n,
        "floor_commit_ms": floor * 1000,
        "readonly_call_ms": ro * 1000,
        "side_effecting_call_ms": fx * 1000,
        "plain_call_ms": plain * 1000,
        "readonly_ratio": ro / floor,
        "side_effecting_ratio": fx / floor,
        "targets": {"readonly_ratio": 1.5, "side_effecting_ratio": 2.5},
    }
    result["pass"] = result["readonly_ratio"] <= 1.5 and result["side_effecting_ratio"] <= 2.5
    print(f"{'measure':46} {'ms per call':>12} {'x floor':>8}")
    print(f"{'floor: raw INSERT+COMMIT':46} {floor * 1000:12.4f} {1:8.2f}")
    print(f"{'ctx.call, readonly (1 commit; target <= 1.5)':46} {ro * 1000:12.4f} {ro / floor:8.2f}")
    print(f"{'ctx.call, side-effecting (2 commits; <= 2.5)':46} {fx * 1000:12.4f} {fx / floor:8.2f}")
    print(f"{'plain Python call':46} {plain * 1000:12.6f} {plain / floor:8.4f}")
    print(orjson.dumps(result).decode())


if __name__ == "__main__":
    main()
