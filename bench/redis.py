"""Redis benchmark: tether on Redis against the Redis floor, and TetherSession against the Agents SDK's
RedisSession, on a redis-server this script starts (AOF on, ``appendfsync always`` unless told).

Run: ``python bench/redis.py`` (``--quick`` for N = 100 / 1,000, ``--smoke`` for the shortest run
through every path; ``--appendfsync everysec`` to measure at that setting). Prints a table, then one
line of JSON.

* floor: one ``XADD`` of a ~500-byte entry per step, on the same server, in the same run.
* readonly: ``ctx.call`` of a ``readonly=True`` tool returning ~500 bytes: one append (the result).
* side-effecting: the default tool: the intent appended before the tool runs, the result after.
* session add: ``TetherSession.add_items`` of one ~500-byte message against ``RedisSession.add_items``
  (openai-agents' own Redis session), and the bytes each keeps per message (``MEMORY USAGE`` of
  every key it wrote, divided by the messages), when openai-agents is installed.

Targets: readonly ≤ 2× the floor, side-effecting ≤ 3×; session add ≤ 1.0× RedisSession, bytes per
message ≤ 1.2× of it. Each figure is the best of ``--rounds`` rounds, the floor measured between them.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
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
    from _common import MESSAGE, recorded_call

TARGETS = {"readonly": 2.0, "side_effecting": 3.0, "session_add": 1.0, "session_bytes": 1.2}


def start_server(folder: str, appendfsync: str) -> tuple[subprocess.Popen[bytes], int]:
    """A redis-server on a free port with its AOF in ``folder``."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    binary = shutil.which("redis-server")
    if binary is None:
        sys.exit("bench/redis.py needs a redis-server binary on PATH")
    args = [binary, "--port", str(port), "--bind", "127.0.0.1", "--dir", folder, "--save", ""]
    args += ["--appendonly", "yes", "--appendfsync", appendfsync, "--logfile", os.path.join(folder, "log")]
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
    client = redis.Redis(port=port)
    total = sum(int(client.memory_usage(k) or 0) for k in client.scan_iter(match=pattern, count=1000))
    client.close()
    return total


def tether_session(url: str, n: int) -> float:
    from tether.integrations.openai_agents import TetherSession

    session = TetherSession("bench", url)

    async def add() -> float:
        start = time.perf_counter()
        for i in range(n):
            await session.add_items([{"role": "user", "content": f"{i} {MESSAGE}"}])  # type: ignore[list-item]
        return (time.perf_counter() - start) / n

    return asyncio.run(add())


def sdk_session(port: int, prefix: str, n: int) -> float:
    from agents.extensions.memory import RedisSession
    from redis.asyncio import Redis

    async def add() -> float:
        client = Redis(port=port)
        session = RedisSession("bench", redis_client=client, key_prefix=prefix)
        start = time.perf_counter()
        for i in range(n):
            await session.add_items([{"role": "user", "content": f"{i} {MESSAGE}"}])  # type: ignore[list-item]
        elapsed = time.perf_counter() - start
        await client.aclose()
        return elapsed / n

    return asyncio.run(add())


def sessions(port: int, n: int) -> dict[str, float] | None:
    try:
        import agents.extensions.memory  # noqa: F401
    except ImportError:
        return None
    prefix = f"s{uuid.uuid4().hex[:8]}"
    ours = tether_session(f"redis://127.0.0.1:{port}/0?prefix={prefix}", n)
    theirs = sdk_session(port, f"agents-{prefix}", n)
    ours_bytes = prefix_bytes(port, f"{prefix}:*") / n
    theirs_bytes = prefix_bytes(port, f"agents-{prefix}:*") / n
    return {
        "tether_add_ms": ours * 1e3,
        "redis_session_add_ms": theirs * 1e3,
        "add_ratio": ours / theirs,
        "tether_bytes": ours_bytes,
        "redis_session_bytes": theirs_bytes,
        "bytes_ratio": ours_bytes / theirs_bytes,
    }


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
    args = parser.parse_args()
    sizes = [20, 50] if args.smoke else [100, 1_000] if args.quick else [100, 1_000, 10_000]
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
        session = sessions(port, sizes[-1])
        report["session"] = session
        if session is not None:
            print(
                f"session add of one message, N={sizes[-1]}: tether {session['tether_add_ms']:.3f} ms, RedisSession "
                f"{session['redis_session_add_ms']:.3f} ms ({session['add_ratio']:.2f}x); bytes per message "
                f"{session['tether_bytes']:.0f} vs {session['redis_session_bytes']:.0f} ({session['bytes_ratio']:.2f}x)"
            )
        last = report["sizes"][str(sizes[-1])]
        passed = (
            last["readonly_ratio"] <= TARGETS["readonly"] and last["side_effecting_ratio"] <= TARGETS["side_effecting"]
        )
        if session is not None:
            passed = passed and session["add_ratio"] <= TARGETS["session_add"]
            passed = passed and session["bytes_ratio"] <= TARGETS["session_bytes"]
        report["targets"] = TARGETS
        report["pass"] = passed
        print(orjson.dumps(report).decode())
    finally:
        proc.kill()
        proc.wait()
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
