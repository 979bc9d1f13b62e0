"""Redis benchmark: tether on Redis against the Redis floor, and TetherSession against the Agents SDK's
RedisSession, on a redis-server this script starts (AOF on, ``appendfsync always`` unless told).

Run: ``python bench/redis.py`` (``--quick`` for N = 100 / 1,000, ``--smoke`` for the shortest run
through every path; ``--appendfsync everysec`` to measure at that setting; ``--session-n 100000`` for
the session figures up to that many messages; ``--workers 1,4`` for other worker counts, ``--workers 0``
for none). Prints tables, then one line of JSON.

* floor: one ``XADD`` of a ~500-byte entry per step, on the same server, in the same run.
* readonly: ``ctx.call`` of a ``readonly=True`` tool returning ~500 bytes: one append (the result).
* side-effecting: the default tool: the intent appended before the tool runs, the result after.
* session add: ``TetherSession.add_items`` of one ~500-byte message against ``RedisSession.add_items``
  (openai-agents' own Redis session), and the bytes each keeps per message (``MEMORY USAGE ...
  SAMPLES 0`` of every key it wrote, divided by the messages) at 1,000, 10,000 and 100,000 messages
  on the way to N (the ratio reported is the largest), when openai-agents is installed.
* workers: ``--tasks`` tasks of ``--calls`` recorded calls each (two readonly for every side-effecting
  one, ~500-byte results: bench/_benchapp.py ``agent_turn``), enqueued while 1, 4 and 16 ``tether
  worker`` processes run them; aggregate calls/s against one worker's, with the redis-server's CPU
  (``INFO cpu``) as a share of one core and per call, its command time per call (``INFO
  commandstats``), and the workers' own CPU in cores, to show where the limit is.

Targets: readonly ≤ 2× the floor, side-effecting ≤ 3×; session add ≤ 1.0× RedisSession, bytes per
message ≤ 1.2× of it; 4 workers ≥ 2.5× one worker's calls/s. Each call figure is the best of
``--rounds`` rounds, the floor measured between them.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

if __name__ == "redis":
    # Imported as redis-py by another bench script (bench/ comes first on its sys.path): hand the
    # importer the real package instead of this script (import returns what sys.modules holds).
    import importlib

    _here = os.path.dirname(os.path.abspath(__file__))
    _saved = sys.path[:]
    del sys.modules["redis"]
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _here]
    try:
        sys.modules["redis"] = importlib.import_module("redis")
    finally:
        sys.path[:] = _saved
else:
    # This file is named redis.py: redis-py is imported with bench/ off sys.path, or `import redis`
    # would find this script again.
    HERE = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != HERE]
    import orjson
    import redis
    import redis.asyncio

    sys.path.insert(0, os.path.join(HERE, "..", "src"))
    sys.path.insert(0, HERE)
    from _common import MESSAGE, recorded_call, start_redis, stop, threaded_rate, warm_up, worker_processes

    import tether

TARGETS = {"readonly": 2.0, "side_effecting": 3.0, "session_add": 1.0, "session_bytes": 1.2, "workers_4": 2.5}


def start_server(folder: str, appendfsync: str) -> tuple[subprocess.Popen[bytes], int]:
    """A redis-server on a free port with its AOF in ``folder``."""
    aof = ["--appendonly", "yes", "--appendfsync", appendfsync, "--logfile", os.path.join(folder, "log")]
    return start_redis(folder, *aof)


def floor(port: int, n: int) -> float:
    """Seconds per XADD of a ~500-byte entry."""
    client = redis.Redis(port=port)
    key = f"floor:{uuid.uuid4().hex}"
    start = time.perf_counter()
    for _ in range(n):
        client.xadd(key, {"d": MESSAGE})
    elapsed = time.perf_counter() - start
    client.delete(key)
    client.close()
    return elapsed / n


def prefix_bytes(port: int, pattern: str) -> int:
    """``MEMORY USAGE`` of every key matching ``pattern``, every element counted (``SAMPLES 0``)."""
    client = redis.Redis(port=port)
    keys = client.scan_iter(match=pattern, count=1000)
    total = sum(int(client.memory_usage(k, samples=0) or 0) for k in keys)
    client.close()
    return total


Add = Callable[[int], Awaitable[object]]


async def add_messages(add: Add, n: int, checkpoint: Callable[[int], None]) -> float:
    """Seconds per ``add(i)`` over ``i < n``; ``checkpoint(count)`` runs (untimed) at 1,000, 10,000
    and 100,000 messages on the way, and at ``n``."""
    elapsed, done = 0.0, 0
    for stop_at in sorted({c for c in (1_000, 10_000, 100_000) if c < n} | {n}):
        start = time.perf_counter()
        for i in range(done, stop_at):
            await add(i)
        elapsed += time.perf_counter() - start
        done = stop_at
        checkpoint(done)
    return elapsed / n


def tether_session(url: str, n: int, checkpoint: Callable[[int], None]) -> float:
    from tether.integrations.openai_agents import TetherSession

    session = TetherSession("bench", url)

    async def add(i: int) -> None:
        await session.add_items([{"role": "user", "content": f"{i} {MESSAGE}"}])  # type: ignore[list-item]

    return asyncio.run(add_messages(add, n, checkpoint))


def sdk_session(port: int, prefix: str, n: int, checkpoint: Callable[[int], None]) -> float:
    from agents.extensions.memory import RedisSession
    from redis.asyncio import Redis

    async def run() -> float:
        client = Redis(port=port)
        session = RedisSession("bench", redis_client=client, key_prefix=prefix)

        async def add(i: int) -> None:
            await session.add_items([{"role": "user", "content": f"{i} {MESSAGE}"}])  # type: ignore[list-item]

        try:
            return await add_messages(add, n, checkpoint)
        finally:
            await client.aclose()

    return asyncio.run(run())


def sessions(port: int, n: int) -> dict[str, Any] | None:
    try:
        import agents.extensions.memory  # noqa: F401
    except ImportError:
        return None
    prefix = f"s{uuid.uuid4().hex[:8]}"
    ours: dict[int, float] = {}
    theirs: dict[int, float] = {}
    url = f"redis://127.0.0.1:{port}/0?prefix={prefix}"
    ours_ms = tether_session(url, n, lambda c: ours.update({c: prefix_bytes(port, f"{prefix}:*") / c}))
    theirs_ms = sdk_session(
        port, f"agents-{prefix}", n, lambda c: theirs.update({c: prefix_bytes(port, f"agents-{prefix}:*") / c})
    )
    by_n = {str(c): {"tether": ours[c], "redis_session": theirs[c], "ratio": ours[c] / theirs[c]} for c in ours}
    return {
        "tether_add_ms": ours_ms * 1e3,
        "redis_session_add_ms": theirs_ms * 1e3,
        "add_ratio": ours_ms / theirs_ms,
        "tether_bytes": ours[n],
        "redis_session_bytes": theirs[n],
        "bytes_ratio": max(row["ratio"] for row in by_n.values()),
        "bytes_by_n": by_n,
    }


def _server_counters(client: redis.Redis) -> tuple[float, float, int]:
    """The redis-server's CPU seconds (user and system, its threads' together), the microseconds its
    commands took (``INFO commandstats``: a script's and the commands it calls, each counted) and
    the scripts it ran (``EVALSHA``: every tether write is one), so far."""
    cpu = client.info("cpu")
    stats = client.info("commandstats")
    seconds = float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"])
    scripts = int(stats.get("cmdstat_evalsha", {}).get("calls", 0))
    return seconds, sum(float(v["usec"]) for v in stats.values()), scripts


def _process_seconds(pids: list[int]) -> float:
    """The CPU seconds the processes have used so far (Linux: /proc/PID/stat's utime + stime)."""
    total = 0
    for pid in pids:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rpartition(")")[2].split()
        total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


def drain(port: int, workers: int, tasks: int, calls: int, folder: str) -> dict[str, float]:
    """``workers`` worker processes run ``tasks`` tasks of ``calls`` calls, enqueued once all have
    started; the figures of the time from the first enqueue to the last task completed."""
    url = f"redis://127.0.0.1:{port}/0?prefix=w{uuid.uuid4().hex[:8]}"
    app = tether.App(url)
    app.task(name="five_calls")(lambda ctx, n: n)
    app.task(name="agent_turn")(lambda ctx, n, calls: n)
    procs = worker_processes(workers, url, Path(folder) / f"w{workers}.stats")
    client = redis.Redis(port=port)
    try:
        warm_up(app, len(procs))
        pids = [p.pid for p in procs]
        cpu0, usec0, scripts0 = _server_counters(client)
        workers0 = _process_seconds(pids)
        start = time.perf_counter()
        for n in range(tasks):
            app.start("agent_turn", n, calls, task_id=f"t{n}")
        deadline = time.monotonic() + 600
        for n in range(tasks):  # claims take the oldest first: mostly one read per poll
            while app.log.get(f"t{n}").status != "completed":
                assert time.monotonic() < deadline, "the workers did not finish"
                time.sleep(0.02)
        elapsed = time.perf_counter() - start
        workers_cpu = _process_seconds(pids) - workers0
        cpu1, usec1, scripts1 = _server_counters(client)
    finally:
        stop(procs)
        client.close()
        app.close()
    done = tasks * calls
    return {
        "workers": workers,
        "calls_per_s": done / elapsed,
        "server_cpu_share": (cpu1 - cpu0) / elapsed,
        "server_cpu_us_per_call": (cpu1 - cpu0) * 1e6 / done,
        "server_command_us_per_call": (usec1 - usec0) / done,
        "server_scripts_per_call": (scripts1 - scripts0) / done,
        "workers_cpu_cores": workers_cpu / elapsed,
        "workers_cpu_us_per_call": workers_cpu * 1e6 / done,
        # calls/s if the workers and the server had every core to themselves and CPU were the only limit
        "cpu_ceiling_calls_per_s": (os.cpu_count() or 1) * done / max(workers_cpu + cpu1 - cpu0, 1e-9),
        "load_average": os.getloadavg()[0],
    }


def floor_rate(port: int, clients: int, seconds: float) -> float:
    """XADDs of a ~500-byte entry per second, by ``clients`` connections writing at once (threads)."""

    def writer(i: int) -> tuple[Callable[[], None], Callable[[], None]]:
        client, key = redis.Redis(port=port), f"floor:{uuid.uuid4().hex}"

        def add() -> None:
            client.xadd(key, {"d": MESSAGE})

        def cleanup() -> None:
            client.delete(key)
            client.close()

        return add, cleanup

    return threaded_rate(clients, seconds, writer)[0]


def worker_scaling(
    port: int, counts: list[int], tasks: int, calls: int, folder: str, seconds: float
) -> list[dict[str, float]]:
    """A row per worker count, each with its calls/s against one worker's (when one was measured),
    and the floor's: as many connections writing XADDs at once, against one connection's."""
    rows = [drain(port, workers, tasks, calls, folder) for workers in counts]
    for row in rows:
        row["floor_xadd_per_s"] = floor_rate(port, int(row["workers"]), seconds)
    one = next((row for row in rows if row["workers"] == 1), None)
    for row in rows:
        if one:
            row["ratio_to_one"] = row["calls_per_s"] / one["calls_per_s"]
            row["floor_ratio_to_one"] = row["floor_xadd_per_s"] / one["floor_xadd_per_s"]
    print(
        f"{tasks} tasks of {calls} calls (2 readonly : 1 side-effecting, ~500-byte results); {os.cpu_count()} cores,"
        f" load average {rows[0]['load_average']:.1f} at the first count's end"
    )
    # (heading, the row's field, format): server figures from INFO, the workers' CPU from /proc
    columns = [
        ("workers", "workers", "d"),
        ("calls/s", "calls_per_s", ".0f"),
        ("vs one", "ratio_to_one", ".2f"),
        ("server CPU", "server_cpu_share", ".0%"),
        ("server us/call", "server_cpu_us_per_call", ".0f"),
        ("cmd us/call", "server_command_us_per_call", ".0f"),
        ("scripts/call", "server_scripts_per_call", ".2f"),
        ("workers cores", "workers_cpu_cores", ".2f"),
        ("workers us/call", "workers_cpu_us_per_call", ".0f"),
        ("CPU ceiling/s", "cpu_ceiling_calls_per_s", ".0f"),
        ("XADD floor/s", "floor_xadd_per_s", ".0f"),
        ("vs one", "floor_ratio_to_one", ".2f"),
    ]
    print(" ".join(f"{title:>{len(title)}}" for title, _, _ in columns))
    for row in rows:
        cells = [format(row[name], spec) if name in row else "-" for _, name, spec in columns]
        print(" ".join(f"{cell:>{len(title)}}" for cell, (title, _, _) in zip(cells, columns, strict=True)))
    return rows


def measure(port: int, n: int, rounds: int) -> dict[str, Any]:
    best: dict[str, float] = {}
    for _ in range(rounds):
        figures = {"floor": floor(port, n)}
        for kind, readonly in (("readonly", True), ("side_effecting", False)):
            url = f"redis://127.0.0.1:{port}/0?prefix=b{uuid.uuid4().hex[:8]}"
            figures[kind] = recorded_call(url, n, readonly=readonly, result=MESSAGE)
        for name, value in figures.items():
            best[name] = min(best.get(name, value), value)
    row: dict[str, Any] = {f"{k}_ms": v * 1e3 for k, v in best.items()}
    row["readonly_ratio"] = best["readonly"] / best["floor"]
    row["side_effecting_ratio"] = best["side_effecting"] / best["floor"]
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="N = 100 and 1,000")
    parser.add_argument("--smoke", action="store_true", help="the shortest run through every path")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--appendfsync", default="always", choices=["always", "everysec", "no"])
    parser.add_argument("--session-n", type=int, help="messages in the session figures (default: the largest N)")
    parser.add_argument("--workers", help="worker counts, comma-separated (default 1,4,16; 0: none)")
    parser.add_argument("--tasks", type=int, help="tasks the workers run (default 200, --quick 60)")
    parser.add_argument("--calls", type=int, help="recorded calls per task (default 9, --smoke 3)")
    args = parser.parse_args()
    sizes = [5] if args.smoke else [100, 1_000] if args.quick else [100, 1_000, 10_000]
    counts = [int(c) for c in (args.workers or ("1" if args.smoke else "1,4,16")).split(",") if int(c) > 0]
    tasks = args.tasks or (1 if args.smoke else 60 if args.quick else 200)
    calls = args.calls or (3 if args.smoke else 9)
    rounds = 1 if args.smoke else args.rounds
    folder = tempfile.mkdtemp(prefix="tether-bench-redis-")
    proc, port = start_server(folder, args.appendfsync)
    try:
        report: dict[str, Any] = {"appendfsync": args.appendfsync, "sizes": {}}
        print(f"redis-server appendfsync={args.appendfsync}; ms per step (best of {rounds})")
        print(f"{'N':>7} {'XADD floor':>11} {'readonly':>9} {'ratio':>6} {'side-eff.':>10} {'ratio':>6}")
        for n in sizes:
            row = measure(port, n, rounds)
            report["sizes"][str(n)] = row
            print(
                f"{n:>7} {row['floor_ms']:>11.3f} {row['readonly_ms']:>9.3f} {row['readonly_ratio']:>6.2f}"
                f" {row['side_effecting_ms']:>10.3f} {row['side_effecting_ratio']:>6.2f}"
            )
        session_n = args.session_n or sizes[-1]
        session = sessions(port, session_n)
        report["session"] = session
        if session is not None:
            print(
                f"session add of one message, N={session_n}: tether {session['tether_add_ms']:.3f} ms, RedisSession "
                f"{session['redis_session_add_ms']:.3f} ms ({session['add_ratio']:.2f}x); bytes per message:"
            )
            for n, row in session["bytes_by_n"].items():
                print(f"  N={n}: {row['tether']:.0f} vs {row['redis_session']:.0f} ({row['ratio']:.2f}x)")
        seconds = 0.02 if args.smoke else 2.0
        report["workers"] = worker_scaling(port, counts, tasks, calls, folder, seconds) if counts else None
        last = report["sizes"][str(sizes[-1])]
        passed = (
            last["readonly_ratio"] <= TARGETS["readonly"] and last["side_effecting_ratio"] <= TARGETS["side_effecting"]
        )
        if session is not None:
            passed = passed and session["add_ratio"] <= TARGETS["session_add"]
            passed = passed and session["bytes_ratio"] <= TARGETS["session_bytes"]
        four = [row for row in report["workers"] or [] if row["workers"] == 4 and "ratio_to_one" in row]
        if four:
            passed = passed and four[0]["ratio_to_one"] >= TARGETS["workers_4"]
        report["targets"] = TARGETS
        report["pass"] = passed
        print(orjson.dumps(report).decode())
    finally:
        proc.kill()
        proc.wait()
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
