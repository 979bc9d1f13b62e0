"""The ADK adapter's list_sessions: what it returns is what get_session returns, session by session,
on every backend, however the sessions got there, and whatever the listing service saw before."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

pytest.importorskip("google.adk")

from google.adk.errors._stale_session_error import StaleSessionError
from google.adk.sessions.session import Session as AdkSession

import tether
from tests.integrations.test_adk import say
from tether.conversation import SESSION_TYPE, SessionOpened, stream_id
from tether.integrations import adk as tether_adk
from tether.integrations._adk_records import app_prefix, session_key
from tether.integrations.adk import TetherSessionService
from tether.log.streams import Stream
from tether.store import TaskFilter
from tether.userstate import USER_TYPE

EVERY = tether_adk._SNAPSHOT_EVERY


def summary(session: AdkSession) -> tuple[Any, ...]:
    """What a listing says of a session: all of it but its events (a listing holds none)."""
    return (session.app_name, session.user_id, session.id, session.state, session.last_update_time)


async def fresh_reads(url: str, app: tether.App, app_name: str, listed: list[AdkSession]) -> list[tuple[Any, ...]]:
    """Each listed session as a service that has never seen it reads it with get_session."""
    reader = TetherSessionService(app if url == "memory://" else tether.App(url))
    found = []
    for s in listed:
        got = await reader.get_session(app_name=app_name, user_id=s.user_id, session_id=s.id)
        assert got is not None, s.id
        found.append(summary(got))
    return found


async def check_listing(url: str, app: tether.App, service: TetherSessionService, expected_ids: set[str]) -> None:
    """The service's listing of "shop" (and of each user) holds exactly ``expected_ids``, oldest
    update first, each as get_session reads it; a service that has never seen them lists the same."""
    listed = (await service.list_sessions(app_name="shop")).sessions
    assert {s.id for s in listed} == expected_ids
    assert [summary(s) for s in listed] == await fresh_reads(url, app, "shop", listed)
    assert all(s.events == [] for s in listed)
    order = [(s.last_update_time, s.user_id, s.id) for s in listed]
    assert order == sorted(order)
    cold = TetherSessionService(app if url == "memory://" else tether.App(url))
    assert [summary(s) for s in (await cold.list_sessions(app_name="shop")).sessions] == [summary(s) for s in listed]
    for user in {s.user_id for s in listed}:
        mine = (await service.list_sessions(app_name="shop", user_id=user)).sessions
        assert [summary(s) for s in mine] == [summary(s) for s in listed if s.user_id == user]


def test_a_listing_is_what_get_session_reads(store_url: str) -> None:
    """Sessions short and long (past two snapshots), with state in every scope, created in one step
    and in two, appended to by this service and by another, deleted and made again: the warm
    listing, after each change, equals a fresh get_session of every session, in order."""
    app = tether.App(store_url)
    service = TetherSessionService(app)
    other = TetherSessionService(app if store_url == "memory://" else tether.App(store_url))

    async def scenario() -> None:
        ids: set[str] = set()
        for n in range(6):
            user = f"u{n % 3}"
            state = {"n": n, "nested": {"list": [n]}} | ({"user:seat": f"s{n}"} if n % 2 else {})
            s = await service.create_session(app_name="shop", user_id=user, session_id=f"s{n}", state=state)
            ids.add(s.id)
            for i in range(n * 27):  # up to 135 events: past two snapshots for the longest
                delta = {"n": i, f"k{n}": i} | ({"app:i": i} if i % 50 == 0 else {})
                await service.append_event(s, say("bot", f"m{i}", delta))
        await service.create_session(app_name="elsewhere", user_id="u0", session_id="s0", state={"app:x": 1})
        await check_listing(store_url, app, service, ids)
        await check_listing(store_url, app, service, ids)  # nothing moved: made again from what it kept

        # Another service appends (the listing's cache is behind) and changes only a shared document.
        s1 = await other.get_session(app_name="shop", user_id="u1", session_id="s1")
        assert s1 is not None
        await other.append_event(s1, say("bot", "more", {"n": 100, "user:seat": "front"}))
        await check_listing(store_url, app, service, ids)
        s2 = await other.get_session(app_name="shop", user_id="u2", session_id="s2")
        assert s2 is not None
        await other.append_event(s2, say("bot", "shared only", {"app:promo": [1, 2]}))
        await check_listing(store_url, app, service, ids)
        # The app's keys change while none of u0's sessions moves: u0's listing shows them.
        before = (await service.list_sessions(app_name="shop", user_id="u0")).sessions
        await other.append_event(s2, say("bot", "promo", {"app:promo": [3]}))
        after = (await service.list_sessions(app_name="shop", user_id="u0")).sessions
        assert [s.state["app:promo"] for s in before] == [[1, 2]] * 2
        assert [s.state["app:promo"] for s in after] == [[3]] * 2
        writer = app if store_url == "memory://" else tether.App(store_url)
        writer.user("adk-app:shop").set("promo", "set by tether's API")  # the document itself, no session
        await check_listing(store_url, app, service, ids)

        # Deleted and made again under the same id, with another state; one deleted for good.
        await other.delete_session(app_name="shop", user_id="u0", session_id="s0")
        await other.create_session(app_name="shop", user_id="u0", session_id="s0", state={"again": True})
        await other.delete_session(app_name="shop", user_id="u2", session_id="s5")
        await check_listing(store_url, app, service, ids - {"s5"})

        # A create that died between its two steps: an unfinished session, listed by nobody.
        opened = Stream(app.log, stream_id(session_key("shop", "u9", "half")), SESSION_TYPE)
        assert opened.create(SessionOpened(session_id="adk:shop:u9:half", user_id="u9"), user_id="u9")
        await check_listing(store_url, app, service, ids - {"s5"})
        assert await service.get_session(app_name="shop", user_id="u9", session_id="half") is None

    asyncio.run(scenario())


def test_a_listing_keeps_stale_sessions_stale(store_url: str) -> None:
    """A service that listed (and so cached) a session still refuses an append from an object read
    before another writer moved it; and its next listing shows the other writer's event."""
    app = tether.App(store_url)
    service = TetherSessionService(app)
    other = TetherSessionService(app if store_url == "memory://" else tether.App(store_url))

    async def scenario() -> None:
        mine = await service.create_session(app_name="shop", user_id="ada", session_id="s", state={"n": 0})
        await service.list_sessions(app_name="shop")
        theirs = await other.get_session(app_name="shop", user_id="ada", session_id="s")
        assert theirs is not None
        await other.append_event(theirs, say("bot", "theirs", {"n": 1}))
        assert [x.state for x in (await service.list_sessions(app_name="shop")).sessions] == [{"n": 1}]
        with pytest.raises(StaleSessionError):
            await service.append_event(mine, say("bot", "mine", {"n": 2}))
        assert [x.state for x in (await service.list_sessions(app_name="shop")).sessions] == [{"n": 1}]

    asyncio.run(scenario())


def test_listed_states_share_nothing(store_url: str) -> None:
    """Every state a listing returns is its own: changing a nested value of one (its own keys, or
    the app's and user's it shares with others) changes no other session, no later listing, no
    get_session, and no document; the same for the states get_session and create_session return."""
    service = TetherSessionService(tether.App(store_url))

    async def scenario() -> None:
        shared = {"app:tags": ["a"], "user:seat": {"row": 1}}
        made = await service.create_session(
            app_name="shop", user_id="ada", session_id="s1", state={"own": [1], **shared}
        )
        made.state["app:tags"].append("made")
        await service.create_session(app_name="shop", user_id="ada", session_id="s2")
        one, two = (await service.list_sessions(app_name="shop")).sessions
        one.state["app:tags"].append("x")
        one.state["user:seat"]["row"] = 99
        one.state["own"].append(2)
        assert two.state == {"app:tags": ["a"], "user:seat": {"row": 1}}
        got = await service.get_session(app_name="shop", user_id="ada", session_id="s1")
        assert got is not None and got.state == {"own": [1], "app:tags": ["a"], "user:seat": {"row": 1}}
        got.state["app:tags"].append("got")
        again = (await service.list_sessions(app_name="shop")).sessions
        assert [s.state for s in again] == [{"own": [1], **shared}, shared]
        assert await service.get_user_state(app_name="shop", user_id="ada") == {"seat": {"row": 1}}

    asyncio.run(scenario())


def test_positions_are_what_list_tasks_says(store_url: str) -> None:
    """The listing's narrow read gives each stream's id, creation time and version as the store's
    own list_tasks does, for sessions at and around the index row's refresh (every 64th event), an
    unfinished one, other apps' and users' left out; and the shared documents' the same."""
    app = tether.App(store_url)
    service = TetherSessionService(app)

    async def fill() -> None:
        for n, length in enumerate([0, 1, 62, 63, 64, 65, 130]):
            s = await service.create_session(app_name="shop", user_id=f"u{n % 2}", session_id=f"s{n}")
            for i in range(length):
                await service.append_event(s, say("bot", f"m{i}", {"user:i": i} if i % 40 == 0 else {}))
        await service.create_session(app_name="shop2", user_id="u0", session_id="s0", state={"app:a": 1})
        await service.create_session(app_name="sho", user_id="u0", session_id="s0")

    asyncio.run(fill())
    opened = Stream(app.log, stream_id(session_key("shop", "u1", "half")), SESSION_TYPE)
    assert opened.create(SessionOpened(session_id="half"), user_id="u1")
    store, tenant = app.store, app.log.tenant

    def from_list_tasks(type: str, prefix: str, user_id: str | None = None) -> list[tuple[str, float, int]]:
        rows = store.list_tasks(tenant, TaskFilter(type=type, user_id=user_id), limit=1_000_000)
        return sorted((r.task_id, r.created_at, r.version) for r in rows if r.task_id.startswith(prefix))

    shop = app_prefix("shop")
    expected = from_list_tasks(SESSION_TYPE, shop)
    versions = {task_id.rpartition(":")[2]: version for task_id, _, version in expected}
    assert versions == {"s0": 1, "s1": 2, "s2": 63, "s3": 64, "s4": 65, "s5": 66, "s6": 131, "half": 1}
    assert sorted(store.stream_positions(tenant, SESSION_TYPE, shop)) == expected
    assert sorted(store.stream_positions(tenant, SESSION_TYPE, shop + "u1:", user_id="u1")) == from_list_tasks(
        SESSION_TYPE, shop + "u1:", "u1"
    )
    docs = from_list_tasks(USER_TYPE, "user:adk-")
    assert len(docs) == 7  # the app documents of shop, shop2 and sho; their users' (u0, u1 of shop; u0 of each other)
    assert sorted(store.stream_positions(tenant, USER_TYPE, "user:adk-")) == docs
    assert sorted(store.stream_positions(tenant, USER_TYPE, "user:adk-user:shop:")) == from_list_tasks(
        USER_TYPE, "user:adk-user:shop:"
    )
