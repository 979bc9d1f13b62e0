"""tether serve under load: 50 concurrent API clients and 5 SSE listeners while workers run tasks.

Run: ``python bench/serve.py`` (``--quick`` for a short run, ``--smoke``: half a second of load by 2
clients, 1 listener and 1 worker;
``--db URL`` for PostgreSQL). Prints the figures, then one line of JSON.

* a `tether serve` process on a fresh store, with an API key;
* 2 `tether worker` processes running 5-call tasks that this script keeps starting;
* 50 client threads, each its own HTTP connection, cycling through the task list, a task, its
  history, its state at a seq, and the pending inputs: p50 and p99 latency, requests/s, errors
  (any status other than 200);
* 5 listeners on ``/v1/events``: how many task events reached them.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import orjson

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE.parent / "src"))
sys.path.insert(0, str(HERE))

from _common import stop, worker_processes  # noqa: E402

import tether  # noqa: E402
from tether.serve.keys import KeyRing  # noqa: E402

CLIENTS = 50
LISTENERS = 5


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _serve(url: str, port: int) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": str(HERE.parent / "src")}
    args = [sys.executable, "-m", "tether.cli", "serve", "--db", url, "--port", str(port)]
    proc = subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 30
    with httpx.Client(timeout=1) as probe:  # one client: each new one loads the CA certificates again
        while True:
            try:
                probe.get(f"http://127.0.0.1:{port}/openapi.json")
                return proc
            except httpx.HTTPError:
                if time.time() > deadline or proc.poll() is not None:
                    raise RuntimeError("tether serve did not start") from None
                time.sleep(0.1)


def _client(base: str, key: str, ids: list[str], stop_at: float, out: list[float], errors: list[str]) -> None:
    headers = {"Authorization": f"Bearer {key}"}
    paths = [
        "/v1/tasks?limit=20",
        "/v1/tasks/{id}",
        "/v1/tasks/{id}/history",
        "/v1/tasks/{id}/state?at=1",
        "/v1/inputs",
    ]
    i = 0
    with httpx.Client(base_url=base, headers=headers, timeout=30) as client:
        while time.monotonic() < stop_at or i < len(paths):  # each path at least once, however short the run
            path = paths[i % len(paths)].format(id=ids[i % len(ids)])
            i += 1
            start = time.perf_counter()
            try:
                response = client.get(path)
                if response.status_code != 200:
                    errors.append(f"{path}: {response.status_code} {response.text[:300]}")
            except httpx.HTTPError as exc:
                errors.append(f"{path}: {exc!r}")
            out.append(time.perf_counter() - start)


def _listener(base: str, key: str, counts: list[int], slot: int, sockets: list[socket.socket]) -> None:
    try:
        with httpx.Client(timeout=httpx.Timeout(10, read=60)) as client:
            with client.stream("GET", f"{base}/v1/events", headers={"Authorization": f"Bearer {key}"}) as response:
                sockets.append(response.extensions["network_stream"].get_extra_info("socket"))
                for line in response.iter_lines():
                    if line.startswith("event: task"):
                        counts[slot] += 1
    except httpx.HTTPError:
        pass  # the hang-up at the end of the run


def _hang_up(sockets: list[socket.socket]) -> None:
    """Ends the listeners' streams as a client that goes away does. The server waits for open streams
    when it is stopped, so a stream left open would hold its shutdown until the next keep-alive."""
    for sock in sockets:
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass  # that stream had ended already


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--smoke", action="store_true", help="half a second of load: every path, no figures to read")
    parser.add_argument("--db", default=None, help="store URL (default: a fresh SQLite file)")
    args = parser.parse_args()
    seconds = 0.5 if args.smoke else 4.0 if args.quick else 15.0
    clients_n, listeners_n, workers_n = (2, 1, 1) if args.smoke else (CLIENTS, LISTENERS, 2)
    settle = 0.2 if args.smoke else 0.5  # seconds for the listeners to connect, and for the last events to reach them
    folder = Path(tempfile.mkdtemp(prefix="tether-bench-serve-"))
    url = args.db or f"sqlite:///{folder / 'serve.db'}"
    app = tether.App(url)
    app.task(name="five_calls")(lambda ctx, n: n)
    key, _ = KeyRing(app.store).create(tenant="default", name="bench")
    ids = [app.start("five_calls", i).task_id for i in range(20)]
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    server = _serve(url, port)
    workers = worker_processes(workers_n, url, folder / "w.stats")
    latencies: list[list[float]] = [[] for _ in range(clients_n)]
    errors: list[str] = []
    counts = [0] * listeners_n
    sockets: list[socket.socket] = []
    listeners = [
        threading.Thread(target=_listener, args=(base, key, counts, i, sockets), daemon=True)
        for i in range(listeners_n)
    ]
    try:
        for t in listeners:
            t.start()
        time.sleep(settle)
        stop_at = time.monotonic() + seconds
        clients = [
            threading.Thread(target=_client, args=(base, key, ids, stop_at, latencies[i], errors))
            for i in range(clients_n)
        ]
        begin = time.perf_counter()
        for t in clients:
            t.start()
        started = 0
        while time.monotonic() < stop_at:  # keep the workers busy: the store changes all the time
            app.start("five_calls", 100 + started)
            started += 1
            time.sleep(0.05)
        for t in clients:
            t.join()
        elapsed = time.perf_counter() - begin
        time.sleep(settle)
    finally:
        _hang_up(sockets)
        for t in listeners:
            if t.is_alive():
                t.join(timeout=10)
        stop(workers)
        server.terminate()
        server.wait(timeout=30)
        app.close()
    flat = sorted(x for lat in latencies for x in lat)
    p99 = flat[int(len(flat) * 0.99) - 1] if flat else float("nan")
    result = {
        "clients": clients_n,
        "listeners": listeners_n,
        "seconds": seconds,
        "requests": len(flat),
        "requests_per_s": round(len(flat) / elapsed, 1),
        "p50_ms": round(statistics.median(flat) * 1000, 1),
        "p99_ms": round(p99 * 1000, 1),
        "errors": len(errors),
        "tasks_started": started,
        "sse_task_events_min": min(counts),
        "pass": not errors and min(counts) > 0,
    }
    on = url.split(":")[0]
    print(f"{clients_n} clients, {listeners_n} SSE listeners, {workers_n} workers, {seconds:g}s on {on}")
    print(f"requests: {result['requests']} ({result['requests_per_s']}/s), errors: {result['errors']}")
    print(f"latency: p50 {result['p50_ms']} ms, p99 {result['p99_ms']} ms")
    print(f"SSE task events per listener: min {min(counts)}, max {max(counts)} ({started} tasks started)")
    for line in errors[:5]:
        print("error:", line)
    print(orjson.dumps(result).decode())


if __name__ == "__main__":
    main()
