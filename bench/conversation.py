"""Conversation benchmark: ``add`` and ``window`` latency for sessions of 100, 10,000 and 100,000 messages.

Run: ``python bench/conversation.py`` (``--quick``: up to 10,000). Prints a table, then one line of JSON.

Each session is compacted once it is built, as the automatic policy would, so a summary exists.
``window`` is measured from a freshly opened session (nothing cached in the process): it reads
the snapshot written at compaction and the messages after it. Target: window at 100,000 within
2x of window at 10,000 — its cost does not grow with the stored history.
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

import tether

TEXT = "Could you move the meeting to Tuesday afternoon and invite the design team? Thanks a lot. " * 2


def build(app: tether.App, session_id: str, n: int) -> None:
    session = app.session(session_id)
    session.add("system", "You are a scheduling assistant.")
    batch = []
    for i in range(n - 1):
        batch.append({"role": "user" if i % 2 == 0 else "assistant", "content": f"{i}: {TEXT}"})
        if len(batch) == 500:
            session.add_many(batch)
            batch = []
    if batch:
        session.add_many(batch)
    session.compact(keep_last=20)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    sizes = [100, 10_000] if args.quick else [100, 10_000, 100_000]
    url = f"sqlite:///{os.path.join(tempfile.mkdtemp(prefix='tether-bench-'), 'chat.db')}"
    app = tether.App(url)
    rows = {}
    for n in sizes:
        build(app, f"s{n}", n)
        windows = []
        for _ in range(15):
            fresh = tether.App(url)  # nothing cached in this process
            start = time.perf_counter()
            window = fresh.session(f"s{n}").window(max_tokens=4000)
            windows.append(time.perf_counter() - start)
            fresh.close()
        session = app.session(f"s{n}")
        adds = []
        for i in range(50):
            start = time.perf_counter()
            session.add("user", f"one more {i}")
            adds.append(time.perf_counter() - start)
        rows[n] = {
            "add_ms": statistics.median(adds) * 1000,
            "window_ms": statistics.median(windows) * 1000,
            "window_messages": len(window.messages),
        }
    big, mid = sizes[-1], 10_000
    result = {
        "sizes": rows,
        "window_growth": rows[big]["window_ms"] / rows[mid]["window_ms"] if big != mid else 1.0,
        "target": {"window_growth": 2.0},
    }
    result["pass"] = result["window_growth"] <= 2.0
    print(f"{'messages':>9} {'add ms':>8} {'window ms':>10} {'in window':>10}")
    for n, r in rows.items():
        print(f"{n:>9,} {r['add_ms']:>8.3f} {r['window_ms']:>10.3f} {r['window_messages']:>10}")
    print(f"window at {big:,} vs 10,000 (target <= 2.0): {result['window_growth']:.2f}")
    print(orjson.dumps(result, option=orjson.OPT_NON_STR_KEYS).decode())


if __name__ == "__main__":
    main()
