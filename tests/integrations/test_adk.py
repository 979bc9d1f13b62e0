"""The Google ADK adapter: TetherSessionService, with ADK's own session and event types."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import threading
import time
from collections.abc import AsyncGenerator, Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

pytest.importorskip("google.adk")

from google.adk.agents import LlmAgent
from google.adk.errors._stale_session_error import StaleSessionError
from google.adk.errors.already_exists_error import AlreadyExistsError
from google.adk.events import Event, EventActions
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.runners import Runner
from google.adk.sessions import InMemorySessionService
from google.adk.sessions.base_session_service import BaseSessionService, GetSessionConfig
from google.adk.sessions.session import Session as AdkSession
from google.genai import types

import tether
from tests._forkserver import ForkedProcess, ForkServer, ForkServers
from tests.conftest import dump_database, pg_url
from tests.integrations.conftest import CHILD_ENV, HERE
from tests.integrations.test_adk_runner import CHILD_IMPORTS
from tether.conversation import SESSION_TYPE, SessionOpened
from tether.integrations import adk as tether_adk
from tether.integrations.adk import TetherMemoryService, TetherSessionService
from tether.log.streams import Stream


def say(author: str, text: str, delta: dict[str, Any] | None = None, at: float | None = None) -> Event:
    event = Event(
        author=author,
        invocation_id="inv",
        content=types.Content(role="user" if author == "user" else "model", parts=[types.Part(text=text)]),
        actions=EventActions(state_delta=delta or {}),
    )
    if at is not None:
        event.timestamp = at
    return event


def texts(events: list[Event]) -> list[str]:
    return [e.content.parts[0].text for e in events if e.content and e.content.parts]


def test_create_get_list_delete(store_url: str) -> None:
    app = tether.App(store_url)
    service = TetherSessionService(app)
    assert isinstance(service, BaseSessionService)

    async def scenario() -> None:
        first = await service.create_session(app_name="shop", user_id="ada", session_id="s1", state={"cart": ["a"]})
        assert (first.id, first.app_name, first.user_id) == ("s1", "shop", "ada")
        assert (first.state, first.events) == ({"cart": ["a"]}, [])
        with pytest.raises(AlreadyExistsError):
            await service.create_session(app_name="shop", user_id="ada", session_id="s1")
        generated = await service.create_session(app_name="shop", user_id="bob")
        assert generated.id
        await service.create_session(app_name="other:app", user_id="ada", session_id="s1")  # the same id elsewhere
        event = say("user", "Hi", {"cart": ["a", "b"]})
        await service.append_event(first, event)
        got = await service.get_session(app_name="shop", user_id="ada", session_id="s1")
        assert got is not None and got.state == {"cart": ["a", "b"]}
        assert [e.model_dump() for e in got.events] == [event.model_dump()]  # the ADK event, verbatim
        assert await service.get_session(app_name="shop", user_id="ada", session_id="nope") is None
        assert await service.get_session(app_name="shop", user_id="bob", session_id="s1") is None
        listed = (await service.list_sessions(app_name="shop")).sessions
        assert sorted((s.user_id, s.id) for s in listed) == [("ada", "s1"), ("bob", generated.id)]
        assert [s.id for s in (await service.list_sessions(app_name="shop", user_id="ada")).sessions] == ["s1"]
        assert [s.id for s in (await service.list_sessions(app_name="other:app")).sessions] == ["s1"]
        assert listed[-1].id == "s1"  # oldest update first: s1 was appended to last
        await service.delete_session(app_name="shop", user_id="ada", session_id="s1")
        assert await service.get_session(app_name="shop", user_id="ada", session_id="s1") is None
        assert [s.user_id for s in (await service.list_sessions(app_name="shop")).sessions] == ["bob"]
        await service.delete_session(app_name="shop", user_id="ada", session_id="s1")  # gone: no error

    asyncio.run(scenario())


def test_state_scopes(store_url: str) -> None:
    app = tether.App(store_url)
    service = TetherSessionService(app)

    async def scenario() -> None:
        a1 = await service.create_session(
            app_name="shop",
            user_id="ada",
            session_id="a1",
            state={"mine": 1, "app:currency": "EUR", "user:seat": "aisle", "temp:scratch": "x"},
        )
        assert a1.state == {"mine": 1, "app:currency": "EUR", "user:seat": "aisle"}
        await service.append_event(a1, say("bot", "ok", {"app:promo": True, "user:home": "LHR", "temp:t": 1, "k": 2}))
        assert a1.state["temp:t"] == 1  # temp state lives in the running session only
        a2 = await service.create_session(app_name="shop", user_id="ada", session_id="a2")
        b1 = await service.create_session(app_name="shop", user_id="bob", session_id="b1")
        other = await service.create_session(app_name="elsewhere", user_id="ada", session_id="x")
        assert a2.state == {"app:currency": "EUR", "app:promo": True, "user:seat": "aisle", "user:home": "LHR"}
        assert b1.state == {"app:currency": "EUR", "app:promo": True}  # app: shared, user: not
        assert other.state == {}
        reread = await service.get_session(app_name="shop", user_id="ada", session_id="a1")
        assert reread is not None
        assert reread.state == {
            "mine": 1,
            "k": 2,
            "app:currency": "EUR",
            "app:promo": True,
            "user:seat": "aisle",
            "user:home": "LHR",
        }
        assert "temp:t" not in (reread.events[0].actions.state_delta or {})  # never stored
        assert await service.get_user_state(app_name="shop", user_id="ada") == {"seat": "aisle", "home": "LHR"}

    asyncio.run(scenario())
    stored = str([m.original for m in app.session("adk:shop:ada:a1").messages()])
    assert "temp:" not in stored and "scratch" not in stored


def test_get_session_config_and_stale_sessions(store_url: str) -> None:
    app = tether.App(store_url)
    service = TetherSessionService(app)

    async def scenario() -> None:
        session = await service.create_session(app_name="shop", user_id="ada", session_id="s")
        base = time.time()
        for i in range(10):
            await service.append_event(session, say("user" if i % 2 else "bot", f"m{i}", {"n": i}, at=base + i))

        async def get(**config: Any) -> Any:
            found = await service.get_session(
                app_name="shop", user_id="ada", session_id="s", config=GetSessionConfig(**config)
            )
            assert found is not None
            return found

        assert texts((await get(num_recent_events=3)).events) == ["m7", "m8", "m9"]
        assert (await get(num_recent_events=0)).events == []
        assert texts((await get(after_timestamp=base + 6)).events) == ["m6", "m7", "m8", "m9"]
        assert texts((await get(after_timestamp=base + 6.5)).events) == ["m7", "m8", "m9"]
        assert texts((await get(after_timestamp=base + 2, num_recent_events=2)).events) == ["m8", "m9"]
        assert (await get(after_timestamp=base + 100)).events == []
        assert len((await get()).events) == 10
        assert (await get(num_recent_events=1)).state == {"n": 9}  # the state is whole either way

        # Two readers of one version: the first append wins, the second is stale and writes nothing.
        one, two = await get(), await get()
        await service.append_event(one, say("bot", "first"))
        with pytest.raises(StaleSessionError):
            await service.append_event(two, say("bot", "second", {"n": -1, "app:flag": 1, "user:flag": 1}))
        latest = await get()
        assert texts(latest.events)[-1] == "first" and latest.state == {"n": 9}  # not the stale one's app:/user:
        await service.append_event(latest, say("bot", "second"))  # re-read: accepted
        assert texts((await get(num_recent_events=2)).events) == ["first", "second"]

    asyncio.run(scenario())


async def listing_scenario(service: BaseSessionService) -> list[tuple[str, str, dict[str, Any], list[Any]]]:
    """Sessions with state in every scope, some appended to; what ``list_sessions`` returns of them."""
    a1 = await service.create_session(
        app_name="shop", user_id="ada", session_id="a1", state={"mine": [1], "app:currency": "EUR", "temp:x": 1}
    )
    await service.create_session(app_name="shop", user_id="bob", session_id="b1", state={"user:seat": "aisle"})
    await service.append_event(a1, say("bot", "ok", {"mine": [1, 2], "user:home": "LHR", "app:promo": True}))
    await service.create_session(app_name="shop", user_id="ada", session_id="a2")
    await service.create_session(app_name="elsewhere", user_id="ada", session_id="x", state={"other": 1})
    listed = (await service.list_sessions(app_name="shop")).sessions
    one_user = (await service.list_sessions(app_name="shop", user_id="ada")).sessions
    return [(s.user_id, s.id, s.state, s.events) for s in [*listed, *one_user]]


def test_list_sessions_returns_what_adks_own_service_returns(store_url: str) -> None:
    """ADK's own services list each session with its merged state (app:, user:, its own) and no
    events, oldest update first: the same sessions, states and order as InMemorySessionService."""
    ours = asyncio.run(listing_scenario(TetherSessionService(tether.App(store_url))))
    theirs = asyncio.run(listing_scenario(InMemorySessionService()))  # type: ignore[no-untyped-call]
    assert ours == theirs
    assert ("ada", "a1", {"mine": [1, 2], "app:currency": "EUR", "app:promo": True, "user:home": "LHR"}, []) in ours


def test_listed_sessions_equal_validated_ones(store_url: str) -> None:
    """``list_sessions`` builds its sessions without validating them again: each equals (and dumps,
    copies and compares like) a session ADK validated; changing one's state changes no later listing."""
    service = TetherSessionService(tether.App(store_url))

    async def scenario() -> None:
        await service.create_session(app_name="shop", user_id="ada", session_id="s", state={"cart": ["a"]})
        (listed,) = (await service.list_sessions(app_name="shop")).sessions
        validated = AdkSession(
            id="s", app_name="shop", user_id="ada", state={"cart": ["a"]}, last_update_time=listed.last_update_time
        )
        assert listed == validated and listed.model_dump() == validated.model_dump()
        assert listed.model_fields_set >= {"id", "app_name", "user_id", "state"}
        assert listed.model_copy(deep=True) == validated and listed._storage_update_marker is None
        listed.state["cart"].append("b")
        listed.state["extra"] = 1
        (again,) = (await service.list_sessions(app_name="shop")).sessions
        assert again.state == {"cart": ["a"]}

    asyncio.run(scenario())


def test_list_sessions_sees_other_writers(durable_url: str) -> None:
    """A service's listing follows what other services (other processes) wrote since it last
    looked: appends, and a session deleted and made again under the same id."""
    reader, writer = TetherSessionService(tether.App(durable_url)), TetherSessionService(tether.App(durable_url))

    async def scenario() -> None:
        s = await writer.create_session(app_name="shop", user_id="ada", session_id="s", state={"n": 0})
        assert [x.state for x in (await reader.list_sessions(app_name="shop")).sessions] == [{"n": 0}]
        await writer.append_event(s, say("bot", "one", {"n": 1, "app:seen": 1}))
        assert [x.state for x in (await reader.list_sessions(app_name="shop")).sessions] == [{"n": 1, "app:seen": 1}]
        await writer.delete_session(app_name="shop", user_id="ada", session_id="s")
        await writer.create_session(app_name="shop", user_id="ada", session_id="s", state={"n": 5})
        assert [x.state for x in (await reader.list_sessions(app_name="shop")).sessions] == [{"n": 5, "app:seen": 1}]
        mine = await reader.get_session(app_name="shop", user_id="ada", session_id="s")
        assert mine is not None
        await reader.append_event(mine, say("bot", "two", {"n": 6}))  # the reader's own write, cached
        await writer.append_event(
            await writer.get_session(app_name="shop", user_id="ada", session_id="s") or mine, say("bot", "3", {"m": 7})
        )
        listed = (await reader.list_sessions(app_name="shop")).sessions
        assert [x.state for x in listed] == [{"n": 6, "m": 7, "app:seen": 1}]

    asyncio.run(scenario())


def test_a_fresh_service_lists_long_sessions_from_their_snapshots(durable_url: str) -> None:
    """A service that has never seen a session lists its state from the session's snapshot and the
    records after it (one read), the same state ``get_session`` folds."""
    writer = TetherSessionService(tether.App(durable_url))

    async def fill() -> None:
        s = await writer.create_session(app_name="shop", user_id="ada", session_id="long", state={"n": -1, "k": 0})
        for i in range(2 * tether_adk._SNAPSHOT_EVERY + 5):
            await writer.append_event(s, say("bot", f"m{i}", {"n": i, "app:last": i}))

    asyncio.run(fill())
    fresh = TetherSessionService(tether.App(durable_url))
    (listed,) = asyncio.run(fresh.list_sessions(app_name="shop")).sessions
    got = asyncio.run(
        TetherSessionService(tether.App(durable_url)).get_session(app_name="shop", user_id="ada", session_id="long")
    )
    assert got is not None
    last = 2 * tether_adk._SNAPSHOT_EVERY + 4
    assert listed.state == got.state == {"n": last, "k": 0, "app:last": last}


class _Died(BaseException):
    """A process dying at this point (a BaseException: nothing on the way catches it)."""


_WRITES = ("create_task", "append", "append_streams", "put_snapshot")


@pytest.mark.parametrize("when", ["before", "after"])
def test_an_append_dying_at_any_write_leaves_no_half(
    store_url: str, monkeypatch: pytest.MonkeyPatch, when: str
) -> None:
    """Fault injection: the process dies at each write the append makes to the store, just before it
    or just after it returns. Whichever, the event and its app:/user: state delta are both stored or
    neither — and the append is one write, one transaction."""
    app = tether.App(store_url)
    service = TetherSessionService(app)

    async def writes_of_one_append() -> list[str]:
        session = await service.create_session(app_name="probe", user_id="ada", session_id="probe")
        seen: list[str] = []
        for name in _WRITES:
            original = getattr(app.store, name)

            def counted(*args: Any, _name: str = name, _original: Any = original, **kwargs: Any) -> Any:
                seen.append(_name)
                return _original(*args, **kwargs)

            monkeypatch.setattr(app.store, name, counted)
        await service.append_event(session, say("bot", "hi", {"app:x": 1, "user:y": 2, "n": 0}))
        monkeypatch.undo()
        return seen

    writes = asyncio.run(writes_of_one_append())
    assert writes == ["append_streams"], writes

    async def dies_at(k: int) -> None:
        session_id = f"s-{when}-{k}"
        session = await service.create_session(app_name="shop", user_id=f"u-{k}", session_id=session_id)
        count = 0
        for name in _WRITES:
            original = getattr(app.store, name)

            def dying(*args: Any, _original: Any = original, **kwargs: Any) -> Any:
                nonlocal count
                count += 1
                if count == k and when == "before":
                    raise _Died
                result = _original(*args, **kwargs)
                if count == k:
                    raise _Died
                return result

            monkeypatch.setattr(app.store, name, dying)
        with pytest.raises(_Died):
            await service.append_event(session, say("bot", "promo!", {f"app:promo{k}": True, "user:seen": 1, "n": 1}))
        monkeypatch.undo()
        fresh = TetherSessionService(tether.App(store_url) if "memory" not in store_url else app)
        again = await fresh.get_session(app_name="shop", user_id=f"u-{k}", session_id=session_id)
        assert again is not None
        stored = (texts(again.events), again.state)
        whole = (["promo!"], {f"app:promo{k}": True, "user:seen": 1, "n": 1})
        assert stored in (whole, ([], {})), stored
        assert stored == (whole if when == "after" else ([], {}))

    for k in range(1, len(writes) + 1):
        asyncio.run(dies_at(k))


_CLOCK = 1_700_000_000.0  # a frozen clock: two creates of one session write the same bytes


class _Databases:
    """A fresh database of the test's backend each time: a SQLite file, a PostgreSQL schema, a
    memory store; dropped at the end."""

    def __init__(self, store_url: str, folder: Path) -> None:
        self.store_url, self.folder, self.schemas = store_url, folder, []

    def fresh(self) -> str:
        self.made = getattr(self, "made", 0) + 1
        if self.store_url.startswith("sqlite"):
            return f"sqlite:///{self.folder / f'db{self.made}.db'}"
        if self.store_url.startswith("postgresql"):
            schemas = pg_url("adkc")
            self.schemas.append(schemas)
            return next(schemas)
        return "memory://"

    def drop(self) -> None:
        for schemas in self.schemas:
            next(schemas, None)


def _on_writes(patch: pytest.MonkeyPatch, store: Any, hook: Callable[[str, Callable[[], Any]], Any]) -> None:
    """Route each write the store makes through ``hook(name, write)``; ``write()`` makes it."""
    for name in _WRITES:

        def routed(*args: Any, _name: str = name, _original: Any = getattr(store, name), **kw: Any) -> Any:  # noqa: B008
            return hook(_name, lambda: _original(*args, **kw))

        patch.setattr(store, name, routed)


def _dying_at(k: int, when: str) -> Callable[[str, Callable[[], Any]], Any]:
    """A hook for :func:`_on_writes`: the process dies just ``before`` or ``after`` the k-th write."""
    count = 0

    def hook(name: str, write: Callable[[], Any]) -> Any:
        nonlocal count
        count += 1
        if count == k and when == "before":
            raise _Died
        result = write()
        if count == k:
            raise _Died
        return result

    return hook


def _dump(url: str, store: Any) -> Any:
    """The database, byte for byte (:func:`dump_database`), but for PostgreSQL's row ids: a failed
    insert uses up a sequence number there, so each stream is named by its id, not its row id."""
    dumped: Any = dump_database(url, store)
    if not url.startswith("postgresql"):
        return dumped
    names = {row[0]: row[2] for row in dumped["tasks"]}  # row id -> stream id
    named = dict(dumped)
    for table in ("events", "snapshots"):
        named[table] = sorted((names[row[0]], *row[1:]) for row in dumped[table])
    named["tasks"] = sorted((*row[1:8], names.get(row[8], row[8]), *row[9:]) for row in dumped["tasks"])
    return named


def _create_shop_s(service: TetherSessionService, state: dict[str, Any]) -> AdkSession:
    return asyncio.run(service.create_session(app_name="shop", user_id="ada", session_id="s", state=state))


@pytest.mark.parametrize("shared", [True, False], ids=["shared-keys", "own-keys"])
@pytest.mark.parametrize("when", ["before", "after"])
def test_a_create_dying_at_any_write_leaves_nothing_half_written(
    store_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, when: str, shared: bool
) -> None:
    """Fault injection: the process dies just before, or just after, each write create_session makes
    to the store. Whichever, the database is byte for byte what a create that never died leaves
    after some of its writes (never part of one); until its last write no reader sees the session,
    its state or its app:/user: keys; and the same create, made again, succeeds and leaves the
    database byte for byte as the create that never died — or, when the last write had landed,
    says AlreadyExistsError and changes nothing. With shared keys the session's first message and
    the keys are one write (one transaction), after the session's stream is opened unfinished."""
    monkeypatch.setattr(time, "time", lambda: _CLOCK)
    state = {"n": 1, "nested": [1]} | ({"app:promo": True, "user:seat": "aisle"} if shared else {})
    whole = {"n": 1, "nested": [1], "app:promo": True, "user:seat": "aisle"} if shared else {"n": 1, "nested": [1]}
    databases = _Databases(store_url, tmp_path)
    try:
        # A create that never dies, the database dumped before it and after each of its writes.
        url = databases.fresh()
        app = tether.App(url)
        dumps, writes = [_dump(url, app.store)], []

        def dumped(name: str, write: Callable[[], Any]) -> Any:
            result = write()
            writes.append(name)
            dumps.append(_dump(url, app.store))
            return result

        with pytest.MonkeyPatch.context() as patch:
            _on_writes(patch, app.store, dumped)
            assert _create_shop_s(TetherSessionService(app), state).state == whole
        # The app's and the user's documents (empty), the session's stream, then what fills them.
        assert writes == ["create_task"] * 3 + (["append_streams"] if shared else []), writes
        app.close()

        for k in range(1, len(writes) + 1):
            url = databases.fresh()
            app = tether.App(url)
            service = TetherSessionService(app)
            with pytest.MonkeyPatch.context() as patch:
                _on_writes(patch, app.store, _dying_at(k, when))
                with pytest.raises(_Died):
                    _create_shop_s(service, state)
            landed = k if when == "after" else k - 1
            assert _dump(url, app.store) == dumps[landed], (k, landed)
            reader = TetherSessionService(app if url == "memory://" else tether.App(url))
            got = asyncio.run(reader.get_session(app_name="shop", user_id="ada", session_id="s"))
            listed = asyncio.run(reader.list_sessions(app_name="shop")).sessions
            if landed == len(writes):  # the create happened: all of it
                assert got is not None and got.state == whole and [s.state for s in listed] == [whole]
                with pytest.raises(AlreadyExistsError):
                    _create_shop_s(service, state)
            else:  # no part of it is there for a reader
                assert got is None and listed == []
                assert asyncio.run(reader.get_user_state(app_name="shop", user_id="ada")) == {}
                assert reader._shared("adk-app:shop") == {}
                assert _create_shop_s(service, state).state == whole  # the same create again: it converges
            assert _dump(url, app.store) == dumps[-1], (k, landed)
            app.close()
    finally:
        databases.drop()


def test_two_creates_finishing_one_unfinished_session(store_url: str) -> None:
    """A session left unfinished by a create that died: two creates of it at once finish it once.
    The one that writes first wins with its state and its shared keys; the other says
    AlreadyExistsError, and none of its keys is written."""
    app = tether.App(store_url)
    opened = Stream(app.log, "session:adk:shop:ada:s", SESSION_TYPE)
    assert opened.create(SessionOpened(session_id="adk:shop:ada:s", user_id="ada"), user_id="ada")
    first = TetherSessionService(app)
    second = TetherSessionService(app if store_url == "memory://" else tether.App(store_url))
    original = app.store.append_streams
    finished: list[AdkSession] = []
    calls = 0

    def second_finishes_first(*args: Any, **kwargs: Any) -> Any:
        nonlocal calls
        calls += 1
        if calls == 1:  # the other create finishes the session between this one's read and its write
            runner = threading.Thread(target=lambda: finished.append(_create_shop_s(second, {"won": 2, "app:b": 2})))
            runner.start()
            runner.join()
        return original(*args, **kwargs)

    app.store.append_streams = second_finishes_first  # type: ignore[method-assign]
    with pytest.raises(AlreadyExistsError):
        _create_shop_s(first, {"lost": 1, "app:a": 1, "user:u": 1})
    del app.store.append_streams
    assert finished and finished[0].state == {"won": 2, "app:b": 2}
    got = asyncio.run(first.get_session(app_name="shop", user_id="ada", session_id="s"))
    assert got is not None and got.state == {"won": 2, "app:b": 2}


def test_get_session_reads_only_recent_events(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A session of 600 events: reading the last 5 (with the state) reads a few dozen records,
    not 600 — a snapshot of the state, the events after it, and the 5 asked for."""
    app = tether.App(f"sqlite:///{tmp_path / 't.db'}")
    service = TetherSessionService(app)

    async def fill() -> None:
        session = await service.create_session(app_name="shop", user_id="ada", session_id="long", state={"n": -1})
        for i in range(600):
            await service.append_event(session, say("bot", f"m{i}", {"n": i}))

    asyncio.run(fill())
    read: list[int] = []
    original = app.store.read_events

    def counting(*args: Any, **kwargs: Any) -> Any:
        rows = original(*args, **kwargs)
        read.append(len(rows))
        return rows

    monkeypatch.setattr(app.store, "read_events", counting)
    recent = GetSessionConfig(num_recent_events=5)
    got = asyncio.run(service.get_session(app_name="shop", user_id="ada", session_id="long", config=recent))
    assert got is not None and texts(got.events) == [f"m{i}" for i in range(595, 600)]
    assert got.state == {"n": 599}
    assert sum(read) <= 5 + tether_adk._SNAPSHOT_EVERY, read
    read.clear()
    latest = GetSessionConfig(after_timestamp=time.time() - 1e-3)
    asyncio.run(service.get_session(app_name="shop", user_id="ada", session_id="long", config=latest))
    assert len(read) <= 20 and sum(read) <= 30 + tether_adk._SNAPSHOT_EVERY, read  # bisected, not scanned


class ScriptedLlm(BaseLlm):
    """An offline model: asks for the parcel's status, then answers from the tool's response."""

    model: str = "scripted"

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        last = llm_request.contents[-1]
        answered = [p.function_response for p in last.parts or [] if p.function_response]
        if answered:
            status = answered[0].response["status"]
            yield LlmResponse(content=types.Content(role="model", parts=[types.Part(text=f"It is {status}.")]))
        else:
            call = types.FunctionCall(id="fc-1", name="track", args={"order": "A-1"})
            yield LlmResponse(content=types.Content(role="model", parts=[types.Part(function_call=call)]))


def track(order: str) -> dict[str, str]:
    """Where a parcel is."""
    return {"order": order, "status": "lost"}


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_a_real_adk_agent_runs_on_the_service(store_url: str) -> None:
    app = tether.App(store_url)
    service = TetherSessionService(app)
    agent = LlmAgent(name="support", model=ScriptedLlm(), tools=[track], output_key="last_answer")

    async def scenario() -> list[Event]:
        runner = Runner(agent=agent, app_name="shop", session_service=service)
        session = await service.create_session(app_name="shop", user_id="ada", session_id="run-1")
        question = types.Content(role="user", parts=[types.Part(text="Where is A-1?")])
        return [e async for e in runner.run_async(user_id="ada", session_id=session.id, new_message=question)]

    produced = asyncio.run(scenario())
    assert texts(produced)[-1] == "It is lost."
    reader = TetherSessionService(app if store_url == "memory://" else tether.App(store_url))  # another process
    stored = asyncio.run(reader.get_session(app_name="shop", user_id="ada", session_id="run-1"))
    assert stored is not None and stored.state == {"last_answer": "It is lost."}
    assert [e.id for e in stored.events][1:] == [e.id for e in produced]  # the user's message, then the agent's
    assert stored.events[1].content.parts[0].function_call.name == "track"
    assert stored.events[2].content.parts[0].function_response.response == {"order": "A-1", "status": "lost"}
    # tether reads it as a conversation: the call and its result in one turn.
    messages = app.session("adk:shop:ada:run-1").messages()
    assert [m.role for m in messages] == ["system", "user", "assistant", "tool", "assistant"]
    assert messages[2].tool_calls[0].name == "track" and messages[3].answers == ("fc-1",)


def texts_of(found: Any) -> list[str]:
    return [m.content.parts[0].text for m in found.memories]


def test_memory_keyword_search(store_url: str) -> None:
    app = tether.App(store_url)
    sessions, memory = TetherSessionService(app), TetherMemoryService(app, limit=2)

    async def scenario() -> None:
        first = await sessions.create_session(app_name="shop", user_id="ada", session_id="m1")
        await sessions.append_event(first, say("user", "My seat preference is the aisle."))
        await sessions.append_event(first, say("bot", "Noted: aisle seat."))
        await memory.add_session_to_memory(first)
        await sessions.append_event(first, say("user", "I fly from Heathrow."))
        await memory.add_session_to_memory(first)  # added again as it grew: only the new event
        other = await sessions.create_session(app_name="shop", user_id="bob", session_id="m2")
        await sessions.append_event(other, say("user", "Aisle seat for me too."))
        await memory.add_session_to_memory(other)

        found = await memory.search_memory(app_name="shop", user_id="ada", query="Which seat? aisle or window")
        # Two words shared each (seat, aisle): the newer first; limit=2 leaves the third out.
        assert texts_of(found) == ["Noted: aisle seat.", "My seat preference is the aisle."]
        assert found.memories[0].author == "bot" and found.memories[0].custom_metadata == {"session_id": "m1"}
        heathrow = await memory.search_memory(app_name="shop", user_id="ada", query="heathrow")
        assert texts_of(heathrow) == ["I fly from Heathrow."]
        assert (await memory.search_memory(app_name="shop", user_id="ada", query="pizza")).memories == []
        bob = await memory.search_memory(app_name="shop", user_id="bob", query="aisle")
        assert texts_of(bob) == ["Aisle seat for me too."]  # users apart

    asyncio.run(scenario())
    assert len(app.session("adk-memory:shop:ada").messages()) == 3  # each event remembered once


def test_two_writers_adding_one_session_to_memory_remember_each_event_once(store_url: str) -> None:
    """The second writer adds the session while the first is between reading what memory holds and
    appending: the first's append is refused, it looks again and finds nothing new (both appended,
    each event was remembered twice; found by a review racing two threads)."""
    app = tether.App(store_url)
    sessions = TetherSessionService(app)
    other = TetherMemoryService(app if store_url == "memory://" else tether.App(store_url))

    class Overtaken(TetherMemoryService):
        raced = False

        def _memory(self, app_name: str, user_id: str) -> Any:
            memory = super()._memory(app_name, user_id)
            messages = memory.messages

            def looked() -> Any:
                held = messages()
                if not Overtaken.raced:  # once: the other writer adds everything right after this look
                    Overtaken.raced = True
                    racer = threading.Thread(target=lambda: asyncio.run(other.add_session_to_memory(shared)))
                    racer.start()
                    racer.join()
                return held

            memory.messages = looked
            return memory

    async def scenario() -> Any:
        created = await sessions.create_session(app_name="shop", user_id="ada", session_id="m1")
        for text in ("My seat is 2A.", "Noted: 2A.", "And a vegetarian meal."):
            await sessions.append_event(created, say("user", text))
        return created

    shared = asyncio.run(scenario())
    asyncio.run(Overtaken(app).add_session_to_memory(shared))
    assert Overtaken.raced
    stored = [m.content for m in app.session("adk-memory:shop:ada").messages()]
    assert sorted(stored) == sorted(["My seat is 2A.", "Noted: 2A.", "And a vegetarian meal."]), stored


# ----------------------------------------------------------------------------- real processes


@pytest.fixture
def children(fork_servers: ForkServers) -> tuple[ForkServer, ForkServer]:
    """Where the appending processes are forked from: servers with ADK imported (tests/_forkserver.py)."""
    return fork_servers(CHILD_IMPORTS, CHILD_ENV)


def child(
    server: ForkServer, url: str, name: str, count: int, gate: Path | None = None, stdout: Path | None = None
) -> ForkedProcess:
    args = [url, "shared", name, str(count), *([str(gate)] if gate else [])]
    return server.start(HERE / "_adk_child.py", *args, stdout=stdout)


def create_shared(url: str) -> None:
    service = TetherSessionService(tether.App(url))
    asyncio.run(service.create_session(app_name="shop", user_id="ada", session_id="shared"))


def check_session(url: str, expected: dict[str, int]) -> None:
    """Each writer's events stored once, in its order, with no gap; the state agrees with them."""
    service = TetherSessionService(tether.App(url))
    session = asyncio.run(service.get_session(app_name="shop", user_id="ada", session_id="shared"))
    assert session is not None
    for name, count in expected.items():
        mine = [t for e, t in zip(session.events, texts(session.events), strict=True) if e.author == name]
        assert mine == [f"{name}:{i}" for i in range(count)], (name, mine)
        if count:
            assert session.state[f"last_{name}"] == count - 1
            assert session.state[f"app:total_{name}"] == count - 1
    assert len(session.events) == sum(expected.values())
    assert not any(k.startswith("temp:") for k in session.state)


@pytest.mark.crash
@pytest.mark.timeout(300)
def test_sigkill_while_appending_then_resume(
    tmp_path: Path, make_url: Any, children: tuple[ForkServer, ForkServer]
) -> None:
    """A child appending events is SIGKILLed from outside at random moments; each time the session
    holds a prefix of its events with no duplicate and no torn event, its app: state agrees with its
    events (no delta without its event, none the other way round), and a fresh child finishes."""
    url = make_url(tmp_path)
    create_shared(url)
    rng = random.Random()
    count, landed = 400, 0  # enough appends that a kill in the first few tens of ms lands mid-way
    for life in range(4):
        lines = tmp_path / f"stdout-{life}"
        os.mkfifo(lines)
        proc = child(children[life % 2], url, "a", count, stdout=lines)
        with open(lines) as stdout:
            first = stdout.readline()  # it is appending
            time.sleep(rng.uniform(0.0, 0.05))
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=60)
            out = stdout.read()  # the rest, through the buffer readline() filled
        landed += proc.returncode == -signal.SIGKILL
        confirmed = [int(x) for x in (first + out).split() if x.isdigit()]
        session = asyncio.run(
            TetherSessionService(tether.App(url)).get_session(app_name="shop", user_id="ada", session_id="shared")
        )
        assert session is not None
        stored = texts(session.events)
        assert stored == [f"a:{i}" for i in range(len(stored))], stored  # a prefix, no duplicate, no gap
        assert len(stored) >= (max(confirmed) + 1 if confirmed else 0)  # every confirmed append is there
        if stored:  # the app: key lands with its event, in one transaction: never ahead of the session
            assert session.state["last_a"] == session.state["app:total_a"] == len(stored) - 1, session.state
        else:
            assert "app:total_a" not in session.state, session.state
    assert landed >= 1, "no kill landed while the child was appending"
    # A fresh child resumes after the last stored event and finishes: a few appends past the kills
    # show it (each append reads the whole session first, so going on to all 400 cost most of the test).
    final = min(count, len(stored) + 20)
    done = child(children[0], url, "a", final).result()
    assert done.returncode == 0, done.stderr
    check_session(url, {"a": final})


@pytest.mark.timeout(300)
def test_a_read_beside_a_writer_never_shows_app_keys_ahead_of_their_event(
    tmp_path: Path, make_url: Any, children: tuple[ForkServer, ForkServer]
) -> None:
    """Another process appends events whose app: keys change with them; every session read here meanwhile
    shows the keys of exactly the events it shows (the session and the app's document are read one
    after the other, and a commit between the two reads must not show through)."""
    url = make_url(tmp_path)
    create_shared(url)
    service = TetherSessionService(tether.App(url))
    writer = child(children[0], url, "a", 100)
    reads = 0
    try:
        while writer.poll() is None or reads == 0:
            session = asyncio.run(service.get_session(app_name="shop", user_id="ada", session_id="shared"))
            assert session is not None
            stored = texts(session.events)
            if stored:
                assert session.state["last_a"] == session.state["app:total_a"] == len(stored) - 1, session.state
            else:
                assert "app:total_a" not in session.state, session.state
            reads += 1
    finally:
        if writer.poll() is None:
            writer.kill()
    assert writer.wait() == 0 and reads > 10, reads


@pytest.mark.crash
@pytest.mark.timeout(300)
def test_two_processes_append_to_one_session(
    tmp_path: Path, make_url: Any, children: tuple[ForkServer, ForkServer]
) -> None:
    url = make_url(tmp_path)
    create_shared(url)
    gate, count = tmp_path / "go", 25
    procs = {name: child(server, url, name, count, gate) for server, name in zip(children, ("a", "b"), strict=True)}
    deadline = time.monotonic() + 60
    while not all((tmp_path / f"ready-{n}").exists() for n in procs):
        assert time.monotonic() < deadline and all(p.poll() is None for p in procs.values()), "children did not start"
        time.sleep(0.01)
    gate.touch()
    stale = 0
    for proc in procs.values():
        done = proc.result()
        assert done.returncode == 0, done.stderr
        stale += int(done.stdout.split("stale ")[1])
    check_session(url, {"a": count, "b": count})
    print(f"\nstale appends refused and retried: {stale}")


def test_each_text_and_function_response_is_stored_once(store_url: str) -> None:
    """An event's text and its function responses are the message's content, not stored again in the
    ADK event beside it; get_session gives the events back equal."""
    app = tether.App(store_url)
    service = TetherSessionService(app)
    calls = types.Content(
        role="model",
        parts=[
            types.Part(text="Looking "),
            types.Part(text="it up."),
            types.Part(function_call=types.FunctionCall(id="f1", name="lookup", args={"q": "parcel"})),
        ],
    )
    answers = types.Content(
        role="user",
        parts=[
            types.Part(function_response=types.FunctionResponse(id="f1", name="lookup", response={"where": "depot"})),
            types.Part(function_response=types.FunctionResponse(id="f2", name="lookup", response={"where": "van"})),
        ],
    )
    events = [
        say("user", "Where is\nmy parcel?"),
        Event(author="bot", content=calls),
        Event(author="bot", content=answers),
    ]

    async def scenario() -> None:
        session = await service.create_session(app_name="shop", user_id="ada", session_id="once")
        for e in events:
            await service.append_event(session, e)
        again = await service.get_session(app_name="shop", user_id="ada", session_id="once")
        assert again is not None and again.events == events

    try:
        asyncio.run(scenario())
        stored = [orjson.dumps(m.meta).decode() for m in app.session("adk:shop:ada:once").messages()[1:]]
        assert len(stored) == 3
        assert not any(text in meta for meta in stored for text in ("my parcel?", "it up.", "depot", "van"))
    finally:
        app.close()
