"""`tether check` benchmark: replaying every stored unfinished task against the current code.

Run: ``python bench/check.py`` (``--quick`` for a short run, ``--smoke`` the shortest). Stores ``--tasks`` tasks, each
stopped waiting for a person after 5 recorded calls with a ~500-byte result, then times
``app.check()`` (what ``tether check --app module:app`` runs before a deploy) from a fresh
process's point of view (a new App over the same file: nothing cached). Target: 1,000 tasks
in seconds. Prints a table, then one line of JSON.
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

from _common import MESSAGE

import tether


def build(url: str) -> tether.App:
    app = tether.App(url)

    @app.tool(readonly=True)
    def lookup(i: int) -> str:
        return MESSAGE

    @app.task(name="support")
    def support(ctx: tether.TaskContext, ticket: int) -> str:
        for i in range(5):
            ctx.call(lookup, i)
        ctx.wait_for_input("approve")
        return "done"

    return app


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer tasks")
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="the shortest run through every path, for the test suite: its figures mean nothing",
    )
    parser.add_argument("--tasks", type=int, default=None)
    args = parser.parse_args()
    n = args.tasks or (5 if args.smoke else 100 if args.quick else 1000)
    url = f"sqlite:///{os.path.join(tempfile.mkdtemp(prefix='tether-bench-'), 'check.db')}"
    writer = build(url)
    for t in range(n):
        writer.run("support", t, task_id=f"ticket-{t}")
    writer.close()
    checker = build(url)  # the code about to be deployed, in a fresh process's state
    start = time.perf_counter()
    report = checker.check()
    elapsed = time.perf_counter() - start
    assert report.clean and len(report.reports) == n, report
    result = {
        "tasks": n,
        "check_seconds": elapsed,
        "per_task_ms": elapsed / n * 1000,
        "targets": {"check_seconds_for_1000": 10.0},
    }
    result["pass"] = elapsed / n * 1000 <= 10.0
    print(f"{'measure':40} {'value':>12}")
    print(f"{f'app.check() of {n} waiting tasks (s)':40} {elapsed:12.3f}")
    print(f"{'per task (ms)':40} {elapsed / n * 1000:12.3f}")
    print(orjson.dumps(result).decode())


if __name__ == "__main__":
    main()
