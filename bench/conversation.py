"""Conversation benchmark: a session's cost at 100, 10,000 and 100,000 messages.

Run: ``python bench/conversation.py`` (``--quick``: up to 10,000; ``--smoke``: 10 and 600, each figure of 2,
for the test suite). Prints a table, then one line of JSON.

Each session holds ~250-byte user and assistant messages and is never compacted (no summary:
the case where a view that kept every message would cost the whole history). Measured on SQLite:

* ``add``: one ``session.add`` on an open session (median of 200);
* ``open+window``: open the session in a fresh ``App`` (nothing cached in the process) and read
  its window of 4,000 tokens (median of 15).

Thresholds (the JSON's ``pass``): add at the largest size <= 1.2x add at 100; open+window at the
largest size <= 2x at 100 — neither may grow with the history: a long session costs about what a
short one does.
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


def measure(url: str, session_id: str, repeat: int = 15, add_count: int = 200) -> dict[str, float]:
    """Medians of ``repeat`` opens (each with its window) and of ``add_count`` adds."""
    opens = []
    for _ in range(repeat):
        fresh = tether.App(url)  # nothing cached in this process
        start = time.perf_counter()
        window = fresh.session(session_id).window(max_tokens=4000)
        opens.append(time.perf_counter() - start)
        fresh.close()
    app = tether.App(url)
    session = app.session(session_id)
    adds = []
    for i in range(add_count):
        start = time.perf_counter()
        session.add("user" if i % 2 == 0 else "assistant", f"one more {i}: {TEXT}")
        adds.append(time.perf_counter() - start)
    app.close()
    return {
        "add_ms": statistics.median(adds) * 1000,
        "open_window_ms": statistics.median(opens) * 1000,
        "window_messages": len(window.messages),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="the shortest run through every path, for the test suite: its figures mean nothing",
    )
    args = parser.parse_args()
    sizes = [10, 600] if args.smoke else [100, 10_000] if args.quick else [100, 10_000, 100_000]
    repeat, add_count = (2, 2) if args.smoke else (15, 200)
    url = f"sqlite:///{os.path.join(tempfile.mkdtemp(prefix='tether-bench-'), 'chat.db')}"
    app = tether.App(url)
    for n in sizes:
        build(app, f"s{n}", n)
    app.close()
    rows = {n: measure(url, f"s{n}", repeat, add_count) for n in sizes}
    big, small = sizes[-1], sizes[0]
    result = {
        "sizes": rows,
        "add_growth": rows[big]["add_ms"] / rows[small]["add_ms"],
        "open_window_growth": rows[big]["open_window_ms"] / rows[small]["open_window_ms"],
        "targets": {"add_growth": 1.2, "open_window_growth": 2.0},
    }
    result["pass"] = result["add_growth"] <= 1.2 and result["open_window_growth"] <= 2.0
    print(f"{'messages':>9} {'add ms':>8} {'open+window ms':>15} {'in window':>10}")
    for n, r in rows.items():
        print(f"{n:>9,} {r['add_ms']:>8.3f} {r['open_window_ms']:>15.3f} {r['window_messages']:>10}")
    print(f"add at {big:,} vs {small} (threshold <= 1.2): {result['add_growth']:.2f}")
    print(f"open+window at {big:,} vs {small} (threshold <= 2.0): {result['open_window_growth']:.2f}")
    print(orjson.dumps(result, option=orjson.OPT_NON_STR_KEYS).decode())


if __name__ == "__main__":
    main()
