"""Worker benchmark: throughput with 1, 2 and 4 worker processes on one SQLite file, fairness, and
the latency from ``send_input`` to the task running again.

Run: ``python bench/workers.py`` (``--quick`` for a short run). Prints a table, then one line of JSON.

* throughput: N worker processes (``tether worker``) drain a queue of 5-call tasks; tasks/s.
* fairness (4 workers): each worker's share of the task runs, against the mean, and the longest
  any append waited (measured inside the workers, around every append).
* send_input → running: a task waits for input; the time from ``send_input`` returning to the
  task's next event being written by an idle worker (which wakes on the commit, not on a timer).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import orjson

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE.parent / "src"))
sys.path.insert(0, str(HERE))

from _common import send_input_latency, stop, warm_up, worker_processes  # noqa: E402

import tether  # noqa: E402


def throughput(workers: int, tasks: int, folder: Path) -> dict[str, object]:
    db, stats = folder / f"w{workers}.db", folder / f"w{workers}.stats"
    app = tether.App(f"sqlite:///{db}")
    app.task(name="five_calls")(lambda ctx, n: n)
    procs = worker_processes(workers, f"sqlite:///{db}", stats)
    try:
        warm_up(app, len(procs))
        before = {r.task_id for r in app.log.list(limit=1000)}
        start = time.perf_counter()
        for n in range(tasks):
            app.start("five_calls", n, task_id=f"t{n}")
        deadline = time.time() + 600
        while len(app.log.list(status="completed", limit=tasks + len(before) + 1)) < tasks + len(before):
            assert time.time() < deadline, "the workers did not finish"
            time.sleep(0.01)
        elapsed = time.perf_counter() - start
    finally:
        stop(procs)
    reports = [json.loads(line) for line in stats.read_text().splitlines()]
    runs = [r["appends"] for r in reports]
    return {
        "workers": workers,
        "tasks_per_s": tasks / elapsed,
        "appends_per_worker": runs,
        "max_append_wait_ms": max(r["max_ms"] for r in reports),
        "p99_append_wait_ms": max(r["p99_ms"] for r in reports),
        "min_share_of_mean": min(runs) / statistics.mean(runs) if runs else 0.0,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    tasks = 60 if args.quick else 400
    folder = Path(tempfile.mkdtemp(prefix="tether-bench-"))
    rows = [throughput(n, tasks, folder) for n in (1, 2, 4)]
    wake = send_input_latency(f"sqlite:///{folder / 'latency.db'}", 5 if args.quick else 20, folder / "latency.stats")
    latency = {"p50_ms": wake[0] * 1000, "max_ms": wake[1] * 1000}
    four = rows[-1]
    result = {
        "tasks": tasks,
        "throughput": rows,
        "send_input_to_running": latency,
        "targets": {"min_share_of_mean": 0.5, "max_append_wait_ms": 100},
    }
    result["pass"] = four["min_share_of_mean"] >= 0.5 and four["max_append_wait_ms"] <= 100
    print(f"{'workers':>8} {'tasks/s':>9} {'min share/mean':>15} {'max append wait ms':>19} {'p99 ms':>8}")
    for row in rows:
        print(
            f"{row['workers']:>8} {row['tasks_per_s']:>9.1f} {row['min_share_of_mean']:>15.2f} "
            f"{row['max_append_wait_ms']:>19.2f} {row['p99_append_wait_ms']:>8.2f}"
        )
    print(f"send_input → running (an idle worker): p50 {latency['p50_ms']:.1f} ms, max {latency['max_ms']:.1f} ms")
    print(orjson.dumps(result).decode())


if __name__ == "__main__":
    main()
