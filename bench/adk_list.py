"""``list_sessions`` over 10,000 sessions, by two checkouts of tether on one database, side by side.

Run: ``python bench/adk_list.py --src /path/to/other/checkout/src`` (this checkout's ``src`` is the
other side). It fills one SQLite file with 10,000 sessions (100 users, one state key each), then
lists them from each checkout in a fresh process, alternately, ``--rounds`` times: the first
listing of each process, and the minimum and median of the 9 after it. Prints one line per
process, then the ratio of the medians (other / this) and of the minimums. The machine may be
shared: alternating puts both sides under the same load.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
THIS_SRC = os.path.join(HERE, "..", "src")


async def fill(db: str) -> None:
    from tether import App
    from tether.integrations.adk import TetherSessionService

    service = TetherSessionService(App(f"sqlite:///{db}"))
    for n in range(10_000):
        await service.create_session(app_name="shop", user_id=f"u{n % 100}", session_id=f"s{n}", state={"n": n})


async def listings(db: str) -> dict[str, float]:
    from tether import App
    from tether.integrations.adk import TetherSessionService

    service = TetherSessionService(App(f"sqlite:///{db}"))
    start = time.perf_counter()
    await service.list_sessions(app_name="shop")
    first = (time.perf_counter() - start) * 1000
    times = []
    for _ in range(9):
        start = time.perf_counter()
        listed = await service.list_sessions(app_name="shop")
        times.append((time.perf_counter() - start) * 1000)
    assert len(listed.sessions) == 10_000
    with_state = sum(1 for s in listed.sessions if s.state)
    return {"first": first, "min": min(times), "median": statistics.median(times), "with_state": with_state}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--src", required=True, help="the other checkout's src folder")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        sys.path.insert(0, args.child[0])
        print(json.dumps(asyncio.run(listings(args.child[1]))))
        return
    sys.path.insert(0, THIS_SRC)
    db = os.path.join(tempfile.mkdtemp(prefix="tether-bench-adk-list-"), "t.db")
    asyncio.run(fill(db))
    sides = {"other": os.path.abspath(args.src), "this": os.path.abspath(THIS_SRC)}
    results: dict[str, list[dict[str, float]]] = {name: [] for name in sides}
    for _ in range(args.rounds):
        for name, src in sides.items():
            out = subprocess.run(
                [sys.executable, __file__, "--src", args.src, "--child", src, db],
                capture_output=True,
                text=True,
                check=True,
            ).stdout
            row = json.loads(out)
            results[name].append(row)
            print(
                f"{name:>5} ({src}): first {row['first']:.0f} ms, then min {row['min']:.0f} ms, "
                f"median {row['median']:.0f} ms; sessions listed with a state: {row['with_state']:.0f}"
            )
    median = {n: statistics.median(r["median"] for r in rows) for n, rows in results.items()}
    least = {n: min(r["min"] for r in rows) for n, rows in results.items()}
    print(f"median listing, other / this: {median['other'] / median['this']:.2f}")
    print(f"fastest listing, other / this: {least['other'] / least['this']:.2f}")


if __name__ == "__main__":
    main()
