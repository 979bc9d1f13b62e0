"""Server-sent events over a real server: woken by the store's change notifications, scoped by tenant."""

from __future__ import annotations

import json
import queue
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx

from tests.serve._agents import work
from tests.serve.conftest import LiveServer, Served


def _listen(url: str, key: str, out: queue.Queue[tuple[str, Any]], stop: threading.Event) -> None:
    try:
        _read(url, key, out, stop)
    except httpx.HTTPError:  # the server went away at the end of the test
        pass


def _read(url: str, key: str, out: queue.Queue[tuple[str, Any]], stop: threading.Event) -> None:
    with httpx.Client(timeout=httpx.Timeout(30, read=30)) as client:
        with client.stream("GET", url, headers={"Authorization": f"Bearer {key}"}) as response:
            out.put(("status", response.status_code))
            event = None
            for line in response.iter_lines():
                if stop.is_set():
                    return
                if line.startswith("event: "):
                    event = line[7:]
                elif line.startswith("data: ") and event:
                    out.put((event, json.loads(line[6:])))
                elif line.startswith(": connected"):
                    out.put(("connected", None))


def _events(out: queue.Queue[tuple[str, Any]], until: float) -> Iterator[tuple[str, Any]]:
    while time.monotonic() < until:
        try:
            yield out.get(timeout=max(0.01, until - time.monotonic()))
        except queue.Empty:
            return


def _until(out: queue.Queue[tuple[str, Any]], done: Any, timeout: float = 10) -> list[tuple[str, Any]]:
    """Events as they come, up to and including the first that ``done`` accepts."""
    got = []
    for kind, data in _events(out, time.monotonic() + timeout):
        got.append((kind, data))
        if done(kind, data):
            break
    return got


def _start(url: str, key: str) -> tuple[queue.Queue[tuple[str, Any]], threading.Event]:
    out: queue.Queue[tuple[str, Any]] = queue.Queue()
    stop = threading.Event()
    threading.Thread(target=_listen, args=(url, key, out, stop), daemon=True).start()
    deadline = time.monotonic() + 10
    for kind, _ in _events(out, deadline):
        if kind == "connected":
            break
    return out, stop


def test_task_changes_and_new_inputs_arrive_live(served: Served) -> None:
    with LiveServer(served.asgi) as live:
        mine, stop_mine = _start(f"{live.base}/v1/events", served.key)
        theirs, stop_theirs = _start(f"{live.base}/v1/events", served.other_key)
        task = served.app.start("trip", city="Rome").task_id  # another writer: the worker's side
        work(served.app)
        started = time.monotonic()  # from the last commit: woken by the store, not the 3 s recheck
        seen: dict[str, list[Any]] = {}
        for kind, data in _until(mine, lambda k, d: k == "input" and d["task_id"] == task):
            seen.setdefault(kind, []).append(data)
        assert any(d["task_id"] == task and d["key"] == "approve" for d in seen["input"])
        assert any(d["task_id"] == task for d in seen["task"])
        assert time.monotonic() - started < 2.5  # woken by the store, not a long poll
        assert [k for k, _ in _events(theirs, time.monotonic() + 0.5)] == []  # another tenant hears nothing
        stop_mine.set()
        stop_theirs.set()


def test_a_tasks_history_streams_until_it_ends(served: Served) -> None:
    with LiveServer(served.asgi) as live:
        out, stop = _start(f"{live.base}/v1/tasks/{served.waiting}/events?after=0", served.key)
        version = served.app.state(served.waiting).version
        first = [d for k, d in _until(out, lambda k, d: k == "history" and d["seq"] == version) if k == "history"]
        assert [d["seq"] for d in first] == list(range(1, version + 1))
        served.app.send_input(served.waiting, "approve", {"yes": False})
        work(served.app)
        rest = _until(out, lambda k, d: k == "end")
        assert any(k == "history" and d["type"] == "OutputSet" for k, d in rest), rest
        assert rest[-1] == ("end", {"task_id": served.waiting, "status": "completed"})
        stop.set()


def test_concurrent_readers_while_workers_write(served: Served) -> None:
    """Reads from many threads at once while tasks move: never an error. (One App shared by the
    server's threads once folded an event twice: `completed → completed`.)"""
    tasks = [served.app.start("trip", city=f"c{i}").task_id for i in range(6)]
    failures: list[str] = []
    stop = threading.Event()

    def read(i: int) -> None:
        with httpx.Client(base_url=live.base, headers=served.headers(), timeout=30) as client:
            n = 0
            while not stop.is_set():
                task = tasks[(i + n) % len(tasks)]
                n += 1
                for path in (f"/v1/tasks/{task}", "/v1/tasks?limit=10", f"/v1/tasks/{task}/history"):
                    response = client.get(path)
                    if response.status_code != 200:
                        failures.append(f"{path}: {response.status_code} {response.text[:200]}")

    with LiveServer(served.asgi) as live:
        readers = [threading.Thread(target=read, args=(i,)) for i in range(12)]
        for t in readers:
            t.start()
        work(served.app)
        for task in tasks:
            served.app.send_input(task, "approve", {"yes": True})
        work(served.app)
        stop.set()
        for t in readers:
            t.join()
    assert failures == []
    assert all(served.app.state(t).status.value == "completed" for t in tasks)


def test_a_rewound_tasks_stream_says_so_and_starts_over_and_a_deleted_one_ends(served: Served) -> None:
    with LiveServer(served.asgi) as live:
        out, stop = _start(f"{live.base}/v1/tasks/{served.waiting}/events?after=0", served.key)
        version = served.app.state(served.waiting).version
        _until(out, lambda k, d: k == "history" and d["seq"] == version)
        served.app.rewind(served.waiting, to=3)
        new = served.app.history(served.waiting)
        got = _until(out, lambda k, d: k == "history" and d["seq"] == new[-1].seq)
        if got[0][0] == "history":  # read as the rewind committed: the set-aside branch's last event
            assert got.pop(0)[1]["type"] == "TaskArchived", got
        assert got[0] == ("replaced", {"task_id": served.waiting}), got
        assert [(d["seq"], d["type"]) for _, d in got[1:]] == [(e.seq, e.type) for e in new]
        served.app.store.delete_task(served.app.tenant, served.waiting)
        # The end alone: not the last read's "replaced" said again (the page would reload, not end).
        assert _until(out, lambda k, d: k == "end") == [("end", {"task_id": served.waiting, "status": None})]
        stop.set()


def test_a_task_deleted_between_its_row_and_its_events_ends_the_stream(monkeypatch: Any) -> None:
    import tether
    from tether.serve._events import _row_and_history
    from tether.timetravel import HistoryCursor

    app = tether.App("memory://")
    app.log.create(type="t", task_id="a")
    cursor = HistoryCursor("a")
    assert _row_and_history(lambda: app, cursor)[1:] == ([{**_first(app)}], False)
    row = app.store.get_task(app.tenant, "a")
    app.store.delete_task(app.tenant, "a")
    monkeypatch.setattr(app.store, "get_task", lambda tenant, task_id: row)  # read just before the delete
    assert _row_and_history(lambda: app, cursor) == (None, [], False)  # the stream ends; it does not fail


def _first(app: Any) -> dict[str, Any]:
    from tether.serve._json import entries_json

    return entries_json(app.history("a"))[0]


def test_the_task_list_is_read_once_per_change_for_every_client_of_a_tenant(served: Served) -> None:
    listings = served.asgi.state.listings
    feed = served.asgi.state.feed
    with LiveServer(served.asgi) as live:
        clients = [_start(f"{live.base}/v1/events", served.key) for _ in range(8)]
        theirs, stop_theirs = _start(f"{live.base}/v1/events", served.other_key)
        reads, bumps = listings.reads["default"], feed.count
        task = served.app.start("trip", city="Oslo").task_id  # another writer: the worker's side
        for out, _ in clients:  # every client is told, from a read it shares
            got = _until(out, lambda k, d: k == "task" and d["task_id"] == task)
            assert got and got[-1][0] == "task", got
        shared = listings.reads["default"] - reads
        changes = feed.count - bumps
        # One read per change the feed counted (and at most one recheck), not one per client:
        # eight clients reading for themselves make at least eight for the one change.
        assert 1 <= shared <= changes + 1 < len(clients), (shared, changes)
        assert not any(d.get("task_id") == task for _, d in _events(theirs, time.monotonic() + 0.5) if d)
        for _, stop in [*clients, (theirs, stop_theirs)]:
            stop.set()
