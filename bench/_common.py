"""What the benchmarks share: worker processes, the send_input probe, a threaded rate harness, the
cost of a recorded call, and the per-turn figures of an agent framework's store against tether's."""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import socket
import sqlite3
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE.parent / "src"))

import orjson  # noqa: E402

import tether  # noqa: E402

Procs = list[subprocess.Popen[bytes]]

# One ~500-byte chat message: the payload of the benchmarks' conversation-like steps.
MESSAGE = (
    "The user asked to move the meeting to Tuesday afternoon and to invite the design team; "
    "the assistant checked the calendar, found two free slots and proposed 14:00 with a note. "
) * 3
MESSAGE = MESSAGE[:500]


def worker_processes(n: int, url: str, stats: Path, *, idle_exit: bool = False) -> Procs:
    """``n`` `tether worker _benchapp:app` processes on ``url``; they write append timings to ``stats``."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(HERE.parent / "src"), str(HERE)]),
        "TETHER_BENCH_URL": url,
        "TETHER_BENCH_STATS": str(stats),
    }
    args = [sys.executable, "-m", "tether.cli", "worker", "_benchapp:app", "--poll", "0.5"]
    if idle_exit:
        args.append("--idle-exit")
    return [
        subprocess.Popen(args, cwd=HERE, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(n)
    ]


def warm_up(app: tether.App, workers: int) -> None:
    """Give each worker one task and wait for all of them, so every worker has started before timing."""
    for i in range(workers):
        app.start("five_calls", 0, task_id=f"warmup{i}")
    deadline = time.time() + 60
    while any(app.get(f"warmup{i}").status is not tether.Status.COMPLETED for i in range(workers)):
        assert time.time() < deadline, "workers did not start"
        time.sleep(0.01)


def stop(procs: Procs) -> None:
    """SIGTERM (workers finish what they run), then wait."""
    for proc in procs:
        proc.send_signal(signal.SIGTERM)
    for proc in procs:
        proc.wait(timeout=60)


def send_input_latency(url: str, samples: int, stats: Path) -> tuple[float, float]:
    """(median, max) seconds from ``send_input`` returning to an idle worker's next write to the task."""
    app = tether.App(url)
    app.task(name="five_calls")(lambda ctx, n: n)
    procs = worker_processes(1, url, stats)
    latencies = []
    try:
        for i in range(samples):
            task_id = f"probe{i}"
            app.start("five_calls", -1 - i, task_id=task_id)
            deadline = time.time() + 30
            while app.get(task_id).status is not tether.Status.AWAITING_INPUT:
                assert time.time() < deadline, "the probe never started waiting"
                time.sleep(0.005)
            version = app.state(task_id).version
            start = time.perf_counter()
            app.send_input(task_id, "go", True)
            while app.log.version(task_id) <= version + 1:
                time.sleep(0.001)
            latencies.append(time.perf_counter() - start)
    finally:
        stop(procs)
        app.close()
    latencies.sort()
    return statistics.median(latencies), latencies[-1]


def threaded_rate(
    concurrency: int, seconds: float, writer: Callable[[int], tuple[Callable[[], None], Callable[[], None]]]
) -> tuple[float, float]:
    """(operations per second in all, median seconds per operation of thread 0).

    ``writer(i)`` runs in thread ``i`` and returns its operation and a cleanup.
    """
    counts = [0] * concurrency
    latencies: list[float] = []
    stop_at = time.monotonic() + seconds

    def run(i: int) -> None:
        op, cleanup = writer(i)
        try:
            while time.monotonic() < stop_at:
                start = time.perf_counter()
                op()
                if i == 0:
                    latencies.append(time.perf_counter() - start)
                counts[i] += 1
        finally:
            cleanup()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(concurrency)]
    begin = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(counts) / (time.perf_counter() - begin), statistics.median(latencies)


def sdk_telemetry(*, metrics: bool) -> None:
    """Turn tether's telemetry on with the OpenTelemetry SDK, as an application sending it somewhere
    would: a ``TracerProvider`` whose ``BatchSpanProcessor`` hands spans to an exporter that drops
    them and, with ``metrics``, a ``MeterProvider`` with a reader (else the API's no-op meters)."""
    from collections.abc import Sequence

    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

    import tether.telemetry

    class Dropped(SpanExporter):
        def export(self, spans: Sequence[object]) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(Dropped()))
    meters = MeterProvider(metric_readers=[InMemoryMetricReader()]) if metrics else None
    tether.telemetry.instrument(tracer_provider=provider, meter_provider=meters)


def recorded_call(url: str, n: int, *, readonly: bool, result: object = None) -> float:
    """Seconds per ``ctx.call`` of a tool that returns ``result`` (``None`` by default; ``MESSAGE``
    for a ~500-byte result), over a task of ``n`` calls on ``url``."""
    app = tether.App(url)
    tool = app.tool(name="noop", readonly=readonly)(lambda: result)
    elapsed = 0.0

    @app.task
    def many(ctx: tether.TaskContext, count: int) -> None:
        nonlocal elapsed
        start = time.perf_counter()
        for _ in range(count):
            ctx.call(tool)
        elapsed = time.perf_counter() - start

    run = app.run(many, n)
    assert run.status is tether.Status.COMPLETED, run.failure
    app.close()
    return elapsed / n


def callgrind_instructions(argv: list[str]) -> int:
    """The instructions a Python process running ``argv`` executes, counted under valgrind's
    callgrind with a fixed hash seed: the same count for the same code and inputs, whatever else
    the machine is doing."""
    done = subprocess.run(
        ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable, *argv],
        env={**os.environ, "PYTHONHASHSEED": "0"},
        capture_output=True,
        text=True,
        check=True,
    )
    found = re.search(r"Collected : (\d+)", done.stderr)
    assert found is not None, done.stderr[-2000:]
    return int(found.group(1))


def turns_from_args(doc: str | None) -> int:
    """The turns a framework bench runs, from its command line: 200, ``--quick`` 50, ``--smoke`` 3 (the
    first, which :func:`per_turn` leaves out, and two, so a SQLite file has grown by a page)."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument(
        "--smoke", action="store_true", help="the shortest run, for the test suite: its figures mean nothing"
    )
    args = parser.parse_args()
    return 3 if args.smoke else 50 if args.quick else 200


def file_bytes(path: str) -> int:
    """A store's bytes on disk: a SQLite file (``.db``) with its write-ahead log checkpointed into it
    first, or any other file as it is."""
    if path.endswith(".db"):
        with sqlite3.connect(path) as db:
            db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return sum(os.path.getsize(p) for p in (path, path + "-wal") if os.path.exists(p))


async def per_turn(turn: Callable[[int], Awaitable[Any]], turns: int, path: str) -> dict[str, float]:
    """Milliseconds and bytes (of the store at ``path``) per turn, over the turns after the first
    (which creates the store's tables and files)."""
    await turn(0)
    first = file_bytes(path)
    start = time.perf_counter()
    for i in range(1, turns):
        await turn(i)
    elapsed = time.perf_counter() - start
    return {"ms_per_turn": elapsed * 1000 / (turns - 1), "bytes_per_turn": (file_bytes(path) - first) / (turns - 1)}


def report_against(
    turns: int, rows: dict[str, dict[str, float]], peer: str, ratios: dict[str, tuple[str, str, float | None]]
) -> None:
    """Print each row's per-turn figures, then each ratio (its name: the row, ``"bytes"`` or ``"ms"``,
    and its target, or ``None``) of a row against row ``peer``, then one line of JSON whose ``pass``
    says whether every ratio with a target is within it."""
    base = rows[peer]
    result: dict[str, Any] = {"turns": turns, "rows": rows}
    for name, (row, metric, _) in ratios.items():
        result[name] = rows[row][f"{metric}_per_turn"] / base[f"{metric}_per_turn"]
    result["target"] = {name: target for name, (_, _, target) in ratios.items() if target is not None}
    result["pass"] = all(result[name] <= target for name, target in result["target"].items())
    width = max(map(len, rows)) + 2
    print(f"{'store':<{width}}{'ms/turn':>10}{'bytes/turn':>12}")
    for name, row in rows.items():
        print(f"{name:<{width}}{row['ms_per_turn']:>10.2f}{row['bytes_per_turn']:>12.0f}")
    for name, (row, metric, target) in ratios.items():
        if target is not None:
            what = "time" if metric == "ms" else metric
            print(f"{row} {what} / {peer} (target <= {target:g}): {result[name]:.2f}")
    print(orjson.dumps(result).decode())


def start_redis(folder: str, *options: str) -> tuple[subprocess.Popen[bytes], int]:
    """A redis-server of the benchmark's own on a free port, its files in ``folder``, started with
    ``options`` (persistence, say) and answering; exits the script when there is no binary."""
    import redis  # the real redis-py (bench/redis.py hands it over when bench/ comes first on the path)

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    binary = shutil.which("redis-server")
    if binary is None:
        sys.exit(f"{sys.argv[0]} needs a redis-server binary on PATH")
    args = [binary, "--port", str(port), "--bind", "127.0.0.1", "--dir", folder, "--save", "", *options]
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    client = redis.Redis(port=port)
    for _ in range(500):
        try:
            client.ping()
            break
        except redis.ConnectionError:
            time.sleep(0.01)
    client.close()
    return proc, port
