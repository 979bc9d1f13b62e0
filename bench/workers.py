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
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import orjson

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE.parent / "src"))

import tether  # noqa: E402


def _env(db: Path, stats: Path) -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(HERE.parent / "src"), str(HERE)]),
        "TETHER_BENCH_URL": f"sqlite:///{db}",
        "TETHER_BENCH_STATS": str(stats),
    }


def _workers(n: int, env: dict[str, str], *, idle_exit: bool) -> list[subprocess.Popen[bytes]]:
    args = [sys.executable, "-m", "tether.cli", "worker", "_benchapp:app", "--poll", "0.5"]
    if idle_exit:
        args.append("--idle-exit")
    return [
        subprocess.Popen(args, cwd=HERE, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(n)
    ]


def _ready(procs: list[subprocess.Popen[bytes]], app: tether.App, marker: str) -> None:
    """Wait until every worker has claimed (and finished) one warm-up task, so all start together."""
    for i in range(len(procs)):
        app.start("five_calls", 0, task_id=f"{marker}{i}")
    deadline = time.time() + 60
    while any(app.get(f"{marker}{i}").status is not tether.Status.COMPLETED for i in range(len(procs))):
        assert time.time() < deadline, "workers did not start"
        time.sleep(0.01)


def throughput(workers: int, tasks: int, folder: Path) -> dict[str, object]:
    db, stats = folder / f"w{workers}.db", folder / f"w{workers}.stats"
    app = tether.App(f"sqlite:///{db}")
    app.task(name="five_calls")(lambda ctx, n: n)
    procs = _workers(workers, _env(db, stats), idle_exit=False)
    try:
        _ready(procs, app, "warmup")
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
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        for proc in procs:
            proc.wait(timeout=60)
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


def input_latency(folder: Path, samples: int) -> dict[str, float]:
    db, stats = folder / "latency.db", folder / "latency.stats"
    app = tether.App(f"sqlite:///{db}")
    app.task(name="five_calls")(lambda ctx, n: n)
    procs = _workers(1, _env(db, stats), idle_exit=False)
    latencies = []
    try:
        for i in range(samples):
            task_id = f"probe{i}"
            app.start("five_calls", -1 - i, task_id=task_id)
            deadline = time.time() + 30
            while app.get(task_id).status is not tether.Status.AWAITING_INPUT:
                assert time.time() < deadline, "the probe task never started waiting"
                time.sleep(0.005)
            version = app.state(task_id).version
            sent = time.perf_counter()
            app.send_input(task_id, "go", True)
            sent_version = version + 1
            while app.log.version(task_id) <= sent_version:
                time.sleep(0.001)
            latencies.append(time.perf_counter() - sent)
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        for proc in procs:
            proc.wait(timeout=30)
    latencies.sort()
    return {"p50_ms": statistics.median(latencies) * 1000, "max_ms": latencies[-1] * 1000}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    tasks = 60 if args.quick else 400
    folder = Path(tempfile.mkdtemp(prefix="tether-bench-"))
    rows = [throughput(n, tasks, folder) for n in (1, 2, 4)]
    latency = input_latency(folder, 5 if args.quick else 20)
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
