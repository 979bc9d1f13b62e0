"""The ADK session service keeps its session-state snapshots through the log's snapshot code (the
log's checksum, its newest-intact read with fallback, its write): schema 1002, the state as compact
JSON, the log's checksum of it; snapshots stored before, with a 16-byte BLAKE2b checksum in hex,
still read."""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import logging

import orjson
import pytest

pytest.importorskip("google.adk")

import tether
from tests.integrations.test_adk import say
from tether.integrations import adk as tether_adk
from tether.integrations.adk import TetherSessionService
from tether.log.snapshots import checksum
from tether.store import SnapshotRow

EVERY = tether_adk._SNAPSHOT_EVERY
STREAM = "session:adk:shop:ada:s"


def _as_stored_before(seq: int, state: dict[str, object]) -> SnapshotRow:
    """A snapshot row byte for byte as the service wrote them before it used the log's code."""
    data = orjson.dumps(state).decode()
    return SnapshotRow(seq, 1002, hashlib.blake2b(data.encode(), digest_size=16).hexdigest(), data)


def _as_stored_now(seq: int, state: dict[str, object]) -> SnapshotRow:
    data = orjson.dumps(state).decode()
    return SnapshotRow(seq, 1002, checksum(data), data)


def _fill(app: tether.App, events: int) -> None:
    service = TetherSessionService(app)

    async def fill() -> None:
        made = await service.create_session(app_name="shop", user_id="ada", session_id="s", state={"n": 0})
        for i in range(events):
            await service.append_event(made, say("bot", f"m{i}", {"n": i + 1}))

    asyncio.run(fill())


def _fresh(app: tether.App, store_url: str) -> TetherSessionService:
    return TetherSessionService(app if store_url == "memory://" else tether.App(store_url))


def _read(app: tether.App, store_url: str) -> tuple[dict[str, object], dict[str, object]]:
    """The session's state as a fresh service's get_session and list_sessions give it."""
    got = asyncio.run(_fresh(app, store_url).get_session(app_name="shop", user_id="ada", session_id="s"))
    (listed,) = asyncio.run(_fresh(app, store_url).list_sessions(app_name="shop")).sessions
    assert got is not None
    return got.state, listed.state


def test_the_snapshots_it_writes_are_the_state_as_compact_json_with_the_logs_checksum(store_url: str) -> None:
    app = tether.App(store_url)
    _fill(app, EVERY)  # versions 2..EVERY + 1: a snapshot at EVERY
    stored = app.store.get_snapshot(app.log.tenant, STREAM, at_most=10**9)
    assert stored is not None
    assert stored == _as_stored_now(EVERY, {"n": EVERY - 1})


def test_a_snapshot_stored_before_is_read(store_url: str) -> None:
    """A snapshot written by the service as it was reads: the state comes from it (a state the events
    do not give, to tell it apart) plus the events after it."""
    app = tether.App(store_url)
    _fill(app, 10)  # no snapshot of its own yet: the session is at version 11
    app.store.put_snapshot(app.log.tenant, STREAM, _as_stored_before(9, {"n": 8, "from": "the snapshot"}))
    assert _read(app, store_url) == ({"n": 10, "from": "the snapshot"}, {"n": 10, "from": "the snapshot"})


def test_a_corrupted_newest_snapshot_falls_back_to_the_one_before(
    store_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    app = tether.App(store_url)
    _fill(app, 2 * EVERY + 3)  # snapshots at EVERY and 2 * EVERY
    good = _as_stored_now(2 * EVERY, {"n": 2 * EVERY - 1})
    assert app.store.get_snapshot(app.log.tenant, STREAM, at_most=10**9) == good
    # The one before (in the form stored before) says what no event does: read from it, the state
    # shows it (and the events after).
    app.store.put_snapshot(app.log.tenant, STREAM, _as_stored_before(EVERY, {"n": EVERY - 1, "older": True}))
    corrupted = dataclasses.replace(good, data=str(good.data).replace("}", ',"x":1}'))  # its checksum is the old
    app.store.put_snapshot(app.log.tenant, STREAM, corrupted)
    with caplog.at_level(logging.WARNING, logger="tether"):
        got, listed = _read(app, store_url)
    assert got == listed == {"n": 2 * EVERY + 3, "older": True}
    assert f"at seq {2 * EVERY} fails its checksum" in caplog.text
