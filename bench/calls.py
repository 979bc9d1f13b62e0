"""Recorded-call benchmark: what ``ctx.call`` costs over the store's floor and a plain Python call.

Run: ``python bench/calls.py`` (``--quick`` for a short run, ``--smoke`` for the shortest run through
every path, whose figures mean nothing). Prints a table, then
one line of JSON. The floor is the same as ``bench/store.py``'s: one raw SQLite
INSERT + COMMIT of a ~500-byte payload per step, WAL, same file system, same run,
at SQLite's ``synchronous=NORMAL`` (tether's ``durability="normal"``) and ``FULL``
(``durability="full"``), each against tether at the same durability.

* readonly: ``ctx.call`` of a tool declared ``readonly=True`` — one commit (the
  result), so its floor is one commit.
* side-effecting: the default — the intent is committed before the tool runs and
  the result after, two commits.
* each with a ~500-byte result (what a tool returns; the targets apply to these rows)
  and with ``None`` (what the call record itself costs).
* plain: the same tool called directly, for scale.

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

from _common import MESSAGE, recorded_call
from store import floor_per_commit

TARGETS = {"readonly": 1.5, "side_effecting": 2.5}


def noop() -> str:
    return MESSAGE


def measure_plain(n: int) -> float:
    start = time.perf_counter()
    for _ in range(n):
        noop()
    return (time.perf_counter() - start) / n


def measure(workdir: str, n: int, rounds: int, durability: str) -> dict[str, float]:
    """Best-of-``rounds`` seconds per call (and per floor commit) at one durability."""
    runs: dict[str, list[float]] = {}
    sync = "FULL" if durability == "full" else "NORMAL"
    for r in range(rounds):
        runs.setdefault("floor", []).append(floor_per_commit(os.path.join(workdir, f"floor{durability}{r}.db"), n,
                                                             synchronous=sync))
        for kind, readonly in (("readonly", True), ("side_effecting", False)):
            for label, result in (("500b", MESSAGE), ("none", None)):
                url = f"sqlite:///{os.path.join(workdir, f'{kind}{label}{durability}{r}.db')}?durability={durability}"
                runs.setdefault(f"{kind}_{label}", []).append(recorded_call(url, n, readonly=readonly, result=result))
    return {key: min(values) for key, values in runs.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer iterations (for smoke tests)")
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="the shortest run through every path, for the test suite: its figures mean nothing",
    )
    parser.add_argument("--calls", type=int, default=None, help="calls per task")
    args = parser.parse_args()
    n = args.calls or (5 if args.smoke else 300 if args.quick else 2000)
    rounds = 1 if args.smoke else 2 if args.quick else 5
    workdir = tempfile.mkdtemp(prefix="tether-bench-")
    plain = min(measure_plain(1_000 if args.smoke else 100_000) for _ in range(rounds))
    result: dict[str, object] = {"calls_per_task": n, "plain_call_ms": plain * 1000, "targets": TARGETS}
    passed = True
    print(f"{'measure':66} {'ms per call':>12} {'x floor':>8}")
    for durability in ("normal", "full"):
        best = measure(workdir, n, rounds, durability)
        floor = best["floor"]
        result[durability] = {"floor_commit_ms": floor * 1000}
        print(f"{f'floor ({durability}): raw INSERT+COMMIT of ~500 bytes':66} {floor * 1000:12.4f} {1:8.2f}")
        for kind, commits in (("readonly", 1), ("side_effecting", 2)):
            for label, shown in (("500b", "~500-byte result"), ("none", "None result")):
                value = best[f"{kind}_{label}"]
                ratio = value / floor
                result[durability][f"{kind}_{label}_ms"] = value * 1000  # type: ignore[index]
                result[durability][f"{kind}_{label}_ratio"] = ratio  # type: ignore[index]
                target = f"; target <= {TARGETS[kind]}" if label == "500b" else ""
                if label == "500b":
                    passed = passed and ratio <= TARGETS[kind]
                label_text = f"ctx.call, {kind.replace('_', '-')}, {shown} ({commits} commit(s){target})"
                print(f"{label_text:66} {value * 1000:12.4f} {ratio:8.2f}")
    print(f"{'plain Python call':66} {plain * 1000:12.6f}")
    result["pass"] = passed
    print(orjson.dumps(result).decode())


if __name__ == "__main__":
    main()
