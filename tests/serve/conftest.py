from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from starlette.testclient import TestClient

import tether
from tests.serve._agents import build, work
from tether.serve import create_app
from tether.serve.keys import KeyRing


@dataclass
class Served:
    """An app with the test tasks (the workers' side), the ASGI server over the same store, two
    tenants' keys, and a few tasks in known places."""

    app: tether.App
    flags: dict[str, bool]
    asgi: Any
    client: httpx.Client
    key: str
    other_key: str
    url: str
    waiting: str
    failed: str
    chatted: str

    def headers(self, key: str | None = None) -> dict[str, str]:
        return {"Authorization": f"Bearer {key or self.key}"}

    def get(self, path: str, **kw: Any) -> httpx.Response:
        return self.client.get(path, headers=self.headers(), **kw)

    def post(self, path: str, json: Any = None, **kw: Any) -> httpx.Response:
        return self.client.post(path, headers=self.headers(), json=json, **kw)


def _server_store(url: str, app: tether.App) -> str | tether.Store:
    # memory:// is one process's dictionary: share it. A file or a server: a store of its own,
    # as a separate `tether serve` process would have.
    return app.store if url.startswith("memory:") else url


@pytest.fixture
def served(store_url: str) -> Iterator[Served]:
    app, flags = build(store_url)
    asgi = create_app(_server_store(store_url, app))
    ring = KeyRing(app.store)
    key, _ = ring.create(tenant="default", name="alice")
    other, _ = ring.create(tenant="other", name="mallory")
    waiting = app.start("trip", city="Lisbon", user_id="u1").task_id
    failed = app.start("broken", x=2).task_id
    chatted = app.start("chat", text="hello", session_id="s1", user_id="u1").task_id
    work(app)
    app.user("u1").set("seat", "aisle")
    with TestClient(asgi, base_url="http://127.0.0.1") as client:
        yield Served(app, flags, asgi, client, key, other, store_url, waiting, failed, chatted)
    asgi.state.feed.stop()
    if asgi.state.store is not app.store:
        asgi.state.store.close()
    app.close()


class LiveServer:
    """uvicorn in a thread: for server-sent events and the browser."""

    def __init__(self, asgi: Any) -> None:
        import uvicorn

        # Bound here and handed to uvicorn: a port chosen and let go could be taken in between.
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = int(self.sock.getsockname()[1])
        self.base = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(asgi, host="127.0.0.1", port=self.port, log_level="warning", lifespan="on")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)

    def __enter__(self) -> LiveServer:
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            if time.monotonic() > deadline:
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.server.force_exit = True  # open SSE streams must not hold the shutdown
        self.thread.join(timeout=10)
        self.sock.close()
