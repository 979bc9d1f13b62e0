"""A revoked key's open streams end: over a real server, within the bound docs/serve.md states."""

from __future__ import annotations

import json
import queue
import threading
import time
from typing import Any

import httpx
import pytest

from tests.serve.conftest import LiveServer, Served
from tether.serve.keys import KeyRing

BOUND = 5.0
"""What docs/serve.md promises: a revoked key's stream ends within this many seconds."""
MARGIN = 2.0
"""A generous allowance on top, for a loaded machine."""
EOF = ("eof", None)


def _follow(url: str, key: str, out: queue.Queue[tuple[str, Any]]) -> None:
    """Every event of the stream at ``url``, then ``EOF`` when the server ends it."""
    try:
        with httpx.Client(timeout=httpx.Timeout(30, read=30)) as client:
            with client.stream("GET", url, headers={"Authorization": f"Bearer {key}"}) as response:
                out.put(("status", response.status_code))
                event = None
                for line in response.iter_lines():
                    if line.startswith(": connected"):
                        out.put(("connected", None))
                    elif line.startswith("event: "):
                        event = line[7:]
                    elif line.startswith("data: ") and event:
                        out.put((event, json.loads(line[6:])))
        out.put(EOF)
    except httpx.HTTPError as exc:  # the server went away at the end of the test
        out.put(("failed", str(exc)))


def _open(url: str, key: str) -> queue.Queue[tuple[str, Any]]:
    out: queue.Queue[tuple[str, Any]] = queue.Queue()
    threading.Thread(target=_follow, args=(url, key, out), daemon=True).start()
    assert out.get(timeout=10) == ("status", 200)
    assert out.get(timeout=10) == ("connected", None)
    return out


def _until(out: queue.Queue[tuple[str, Any]], done: Any, timeout: float) -> list[tuple[str, Any]]:
    got: list[tuple[str, Any]] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            item = out.get(timeout=max(0.01, deadline - time.monotonic()))
        except queue.Empty:
            break
        got.append(item)
        if done(item):
            break
    return got


@pytest.mark.parametrize("stream", ["tasks", "history"])
def test_a_revoked_keys_streams_end_within_the_bound_and_other_keys_go_on(served: Served, stream: str) -> None:
    ring = KeyRing(served.app.store)
    colleague, _ = ring.create(tenant="default", name="bob")  # the same tenant, another key: not revoked
    path = "/v1/events" if stream == "tasks" else f"/v1/tasks/{served.waiting}/events?after=0"
    with LiveServer(served.asgi) as live:
        alice = _open(f"{live.base}{path}", served.key)
        bob = _open(f"{live.base}{path}", colleague)
        if stream == "tasks":  # the stream delivers while its key is live
            task = served.app.start("trip", city="Rome").task_id
            for out in (alice, bob):
                assert _until(out, lambda e: e[0] == "task" and e[1]["task_id"] == task, 20)[-1][0] == "task"
        else:
            version = served.app.state(served.waiting).version
            for out in (alice, bob):
                assert _until(out, lambda e: e[0] == "history" and e[1]["seq"] == version, 20)[-1][0] == "history"

        ring.revoke(served.key.split("_")[1])
        revoked = time.monotonic()
        ended = _until(alice, lambda e: e == EOF, BOUND + MARGIN)
        took = time.monotonic() - revoked
        assert ended[-2:] == [("closed", {"code": "unauthorized", "message": "this API key was revoked"}), EOF], ended
        assert took <= BOUND + MARGIN, f"the stream ended {took:.1f} s after the revocation"
        assert httpx.get(f"{live.base}/v1/whoami", headers=served.headers()).status_code == 401

        # The other key's stream is open still, and still delivers.
        if stream == "tasks":
            later = served.app.start("trip", city="Oslo").task_id
            got = _until(bob, lambda e: e[0] == "task" and e[1]["task_id"] == later, 20)
        else:
            served.app.send_input(served.waiting, "approve", {"yes": False})
            got = _until(bob, lambda e: e[0] == "history" and e[1]["type"] == "InputReceived", 20)
        assert got and got[-1][0] in ("task", "history") and EOF not in got, got


def test_a_key_is_read_again_once_per_interval_for_every_stream(served: Served) -> None:
    """The streams' checks share the server's reads of the key list: many checks within the
    interval read it once, and a revocation is seen once the interval has passed."""
    ring = KeyRing(served.app.store)
    secret, key = ring.create(tenant="default", name="carol")
    server_ring = KeyRing(served.app.store)
    assert server_ring.verify(secret) == key
    reads = 0
    read = server_ring._read

    def counted() -> int:
        nonlocal reads
        reads += 1
        return read()

    server_ring._read = counted  # type: ignore[method-assign]
    assert all(server_ring.live(key.key_id, max_age=60) for _ in range(50))
    assert reads == 0  # just read by verify: fresh enough for all fifty
    ring.revoke(key.key_id)
    assert server_ring.live(key.key_id, max_age=60)  # within the interval: the last read stands
    assert not server_ring.live(key.key_id, max_age=0)  # past it: read again, revoked
    assert reads == 1
