"""The server-sent event streams of ``/v1/events`` and ``/v1/tasks/{id}/events``.

Each stream waits on the :class:`~tether.serve.feed.ChangeFeed` (at most ``_RECHECK`` seconds),
then checks that its key is still live, then reads what changed. A stream whose key was revoked
sends ``closed`` and ends: within ``_RECHECK`` seconds and the age of the server's last read of
the keys (see :meth:`~tether.serve.keys.KeyRing.live`).

Each event that moves a client on carries an ``id:``, which a reconnecting ``EventSource`` sends
back as ``Last-Event-ID``: a task's stream resumes after that seq, and ``/v1/events`` first sends
every watched task that changed since that time. The first chunk sets ``retry:`` (the reconnection
delay); the headers keep proxies from caching or buffering the stream.
"""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import AsyncIterator, Callable
from typing import Any

from starlette.requests import Request

from tether.errors import TaskNotFoundError, TetherError
from tether.model.status import Status
from tether.runtime.app import App
from tether.serve._json import entries_json
from tether.serve._listing import Listings, Look
from tether.serve.feed import ChangeFeed
from tether.store import TaskRow
from tether.store.base import FINISHED
from tether.timetravel import HistoryCursor

__all__ = ["HEADERS", "history_events", "resumed_after", "task_events"]

HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
"""Response headers of a stream: no cache may keep it, no proxy (nginx) may buffer it."""
_RETRY_MS = 3000
_OPENING = f"retry: {_RETRY_MS}\n: connected\n\n".encode()

_RECHECK = 3.0
"""Seconds a listener waits for a wake-up before it looks anyway: a safety net, since a store's
change signal can fall between two waits (a notification that lands while the feed thread is
handing out the previous one), not the way changes are found. A stream checks its key as often."""
_KEEPALIVE = 15.0


async def _closed(live: Callable[[], bool]) -> bytes | None:
    """The ``closed`` event that ends a stream whose key was revoked, or whose key cannot be checked
    (the store is away: the client reconnects, and is asked for its key again); ``None`` while the
    stream may go on."""
    try:
        if await asyncio.to_thread(live):
            return None
        body = {"code": "unauthorized", "message": "this API key was revoked"}
    except TetherError as exc:
        body = {"code": exc.code, "message": "the API key cannot be checked now; reconnect to go on"}
    return _sse("closed", body)


def _sse(event: str, data: Any, event_id: str | None = None) -> bytes:
    named = "" if event_id is None else f"id: {event_id}\n"
    return f"{named}event: {event}\ndata: {json.dumps(data)}\n\n".encode()


def _last_event_id(request: Request) -> str | None:
    value = request.headers.get("last-event-id", "").strip()
    return value or None


def resumed_after(request: Request, after: int) -> int:
    """Where a task's stream starts: after the ``Last-Event-ID`` a reconnecting client sends (the
    seq of the last entry it got), else after ``after``."""
    last = _last_event_id(request)
    return int(last) if last is not None and last.isdigit() and int(last) <= 2**31 else after


def _since(request: Request) -> float | None:
    """The time of the last change a reconnecting ``/v1/events`` client saw (its ``Last-Event-ID``)."""
    last = _last_event_id(request)
    try:
        return float(last) if last is not None else None
    except ValueError:
        return None


def _row_and_history(
    get_app: Callable[[], App], cursor: HistoryCursor
) -> tuple[TaskRow | None, list[dict[str, Any]], bool]:
    """The task's row, the bodies of the history entries the cursor has not returned yet (made here,
    off the event loop), and whether this read found the history replaced; ``(None, [], False)``
    once the task is gone, also when it went between the two reads."""
    app = get_app()
    row = app.store.get_task(app.tenant, cursor.task_id)  # before the events: the end never overtakes them
    if row is None:
        return None, [], False
    try:
        bodies = entries_json(cursor.read(app.log))
    except TaskNotFoundError:
        return None, [], False
    return row, bodies, cursor.replaced


async def task_events(
    get_app: Callable[[], App],
    tenant: str,
    request: Request,
    feed: ChangeFeed,
    listings: Listings,
    live: Callable[[], bool],
) -> AsyncIterator[bytes]:
    """``GET /v1/events``: the tenant's tasks that changed. The newest tasks are read once per
    change for every client of the tenant (see :class:`Listings`); the key is checked (``live``)
    after every wait, at least every ``_RECHECK`` seconds."""
    look = listings.look(tenant, get_app, count=feed.count, max_age=math.inf)
    since = _since(request)  # a reconnecting client: what changed since its last event is news to it
    rows = await look.rows()
    seen = {k: r.version for k, r in rows.items() if since is None or r.updated_at < since}
    mark = [since or max((r.updated_at for r in rows.values()), default=0.0)]
    yield _OPENING
    if since is not None:
        for chunk in await _announce(look, get_app, [r for k, r in rows.items() if k not in seen], seen, mark):
            yield chunk
    count = feed.count
    quiet = [0.0]
    while not await request.is_disconnected():
        woken, sent, ended = await _wait_turn(feed, count, live, quiet)
        for chunk in sent:
            yield chunk
        if ended:
            return
        if woken:
            await asyncio.sleep(0.05)  # let a burst of commits land: one look for them all
            look = listings.look(tenant, get_app, count=feed.count, max_age=math.inf)
        else:  # the safety net: a read of the last _RECHECK seconds, whoever made it
            look = listings.look(tenant, get_app, count=feed.count, max_age=_RECHECK)
        count = look.count
        rows = await look.rows()
        changed = [r for k, r in rows.items() if seen.get(k) != r.version]
        for chunk in await _announce(look, get_app, changed, seen, mark):
            yield chunk


async def _announce(
    look: Look, get_app: Callable[[], App], changed: list[TaskRow], seen: dict[str, int], mark: list[float]
) -> list[bytes]:
    """The ``task`` (and ``input``) events of the rows that changed, oldest change first; each
    ``id`` is the newest change time sent so far (``mark[0]``), where a reconnect resumes."""
    out = []
    for row in sorted(changed, key=lambda r: r.updated_at):
        seen[row.task_id] = row.version
        mark[0] = max(mark[0], row.updated_at)
        body = await look.summary(get_app, row)
        event_id = repr(mark[0])
        out.append(_sse("task", body, event_id))
        if body["status"] == Status.AWAITING_INPUT.value and body["waiting_for"]:
            asked = {"task_id": row.task_id, "key": body["waiting_for"], "prompt": body["prompt"]}
            out.append(_sse("input", asked, event_id))
    return out


async def _wait_turn(
    feed: ChangeFeed, count: int, live: Callable[[], bool], quiet: list[float]
) -> tuple[bool, list[bytes], bool]:
    """One wait of a stream for a change, at most ``_RECHECK`` seconds: whether one came, what to send
    meanwhile (a keep-alive once ``quiet[0]``, the seconds without one, reaches ``_KEEPALIVE``; the closing
    event of a key revoked meanwhile), and whether the stream ends."""
    woken = await feed.wait(count, _RECHECK)
    sent: list[bytes] = []
    if not woken:
        quiet[0] += _RECHECK
        if quiet[0] >= _KEEPALIVE:
            quiet[0] = 0.0
            sent.append(b": keep-alive\n\n")
    closed = await _closed(live)
    if closed is not None:
        sent.append(closed)
    return woken, sent, closed is not None


async def history_events(
    get_app: Callable[[], App], task_id: str, after: int, request: Request, feed: ChangeFeed, live: Callable[[], bool]
) -> AsyncIterator[bytes]:
    """``GET /v1/tasks/{id}/events``: the task's new history entries after each change; the key is
    checked (``live``) after every wait, at least every ``_RECHECK`` seconds."""
    yield _OPENING
    count = feed.count
    quiet = [0.0]
    cursor = HistoryCursor(task_id, after=after)  # each change reads the new events alone
    while not await request.is_disconnected():
        row, bodies, replaced = await asyncio.to_thread(_row_and_history, get_app, cursor)
        if replaced:  # rewound, or deleted and made again: its history starts over
            yield _sse("replaced", {"task_id": task_id})
        for body in bodies:
            yield _sse("history", body, str(body["seq"]))
        if row is None or row.status in FINISHED:
            yield _sse("end", {"task_id": task_id, "status": row.status if row else None})
            return
        _, sent, ended = await _wait_turn(feed, count, live, quiet)
        for chunk in sent:
            yield chunk
        if ended:
            return
        count = feed.count
