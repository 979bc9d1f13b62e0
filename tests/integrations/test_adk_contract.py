"""TetherSessionService and TetherMemoryService against what ADK's own services do.

Each test runs one scenario on ADK's service (``InMemorySessionService``; ``SqliteSessionService``
where ADK's persistent services differ from the in-memory one) and on tether's, and compares what a
user sees; or checks, on every backend, a rule ADK's session-service contract tests hold its
services to (google/adk-python ``tests/unittests/sessions/test_session_service.py``).
"""

from __future__ import annotations

import asyncio
import datetime
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

pytest.importorskip("google.adk")

from google.adk.errors import StaleSessionError
from google.adk.events import Event, EventActions
from google.adk.memory import InMemoryMemoryService
from google.adk.memory.base_memory_service import BaseMemoryService
from google.adk.sessions import InMemorySessionService
from google.adk.sessions.base_session_service import BaseSessionService
from google.adk.sessions.session import Session as AdkSession
from google.adk.sessions.sqlite_session_service import SqliteSessionService
from google.genai import types

import tether
from tests.integrations.test_adk import say, texts
from tether.integrations.adk import TetherMemoryService, TetherSessionService
from tether.log import checksum
from tether.store import SnapshotRow

Scenario = Callable[[BaseSessionService], Awaitable[Any]]


def both(scenario: Scenario, theirs: BaseSessionService, url: str) -> tuple[Any, Any]:
    """What ``scenario`` returns on ADK's service and on tether's (on ``url``)."""
    return asyncio.run(scenario(theirs)), asyncio.run(scenario(TetherSessionService(tether.App(url))))


# ----------------------------------------------------------------------------- create, get, delete


async def created_and_read(service: BaseSessionService) -> list[tuple[bool, bool]]:
    """A session as create_session returns it, and as get_session and list_sessions read it."""
    found = []
    for user_id, state in (("ada", {"k": "v"}), ("bob", {"k": 1, "app:a": 1, "user:u": 2})):
        made = await service.create_session(app_name="shop", user_id=user_id, state=state)
        got = await service.get_session(app_name="shop", user_id=made.user_id, session_id=made.id)
        (listed,) = (await service.list_sessions(app_name="shop", user_id=made.user_id)).sessions
        found.append((got == made, listed.last_update_time == made.last_update_time))
    return found


def test_a_created_session_is_the_session_read_back(store_url: str) -> None:
    """ADK's contract (test_create_get_session): get_session returns a session equal to the one
    create_session returned. tether's differed in last_update_time (the time before the write, not
    the one stored), so ``got == created`` was False."""
    theirs, ours = both(created_and_read, InMemorySessionService(), store_url)  # type: ignore[no-untyped-call]
    assert theirs == ours == [(True, True), (True, True)]


async def padded_ids(service: BaseSessionService) -> tuple[Any, ...]:
    await service.create_session(app_name="shop", user_id="ada", session_id="s1")
    got = await service.get_session(app_name="shop", user_id="ada", session_id="  s1 ")
    await service.delete_session(app_name="shop", user_id="ada", session_id=" s1\t")
    return got is not None and got.id, await service.get_session(app_name="shop", user_id="ada", session_id="s1")


def test_a_padded_session_id_reads_and_deletes_its_session(store_url: str, tmp_path: Path) -> None:
    """create_session strips the id it is given (as ADK's in-memory and SQLite services do); so do
    their get_session and delete_session, and tether's did not: a padded id found nothing and
    deleted nothing (ADK's contract test_padded_session_id_reads_and_deletes)."""
    assert asyncio.run(padded_ids(InMemorySessionService())) == ("s1", None)  # type: ignore[no-untyped-call]
    assert asyncio.run(padded_ids(SqliteSessionService(str(tmp_path / "adk.db")))) == ("s1", None)
    assert asyncio.run(padded_ids(TetherSessionService(tether.App(store_url)))) == ("s1", None)


# ----------------------------------------------------------------------------- state that is not JSON


def _callback() -> None:
    """A value no JSON holds (its repr is what ADK's database services store)."""


async def state_that_is_not_json(service: BaseSessionService) -> dict[str, Any]:
    made = await service.create_session(
        app_name="shop",
        user_id="ada",
        session_id="s",
        state={"when": datetime.datetime(2024, 1, 2, 3, 4), "tags": {7}, "app:day": datetime.date(2024, 1, 2)},
    )
    created = dict(made.state)
    delta = {"cb": _callback, "app:cb": _callback, "user:at": datetime.datetime(2024, 5, 6), "ok": 2}
    await service.append_event(made, Event(invocation_id="i", author="user", actions=EventActions(state_delta=delta)))
    await service.list_sessions(app_name="shop")  # a listing caches the state it read
    await service.append_event(made, say("bot", "again", {"cb2": _callback}))
    got = await service.get_session(app_name="shop", user_id="ada", session_id="s")
    assert got is not None
    return {"created": created, "got": got.state}


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_state_that_is_not_json_is_stored_as_adks_sqlite_service_stores_it(store_url: str, tmp_path: Path) -> None:
    """ADK's persistent services store a state value JSON cannot hold as pydantic makes it JSON
    (a datetime as its ISO text, a set as a list, anything else as its repr) instead of failing
    (ADK's test_append_event_with_non_serializable_state_delta). tether's create_session refused a
    set (InvalidInputError), an app:/user: value that was not JSON failed the append
    (NotSerializableError), and a session value that was not JSON failed the append *after* it
    was written (TypeError from the cache a listing had made) — a retry then stored it twice."""
    theirs, ours = both(state_that_is_not_json, SqliteSessionService(str(tmp_path / "adk.db")), store_url)
    assert ours == theirs
    assert ours["got"]["cb"] == repr(_callback) and ours["got"]["tags"] == [7]
    assert ours["created"] == {"when": "2024-01-02T03:04:00", "tags": [7], "app:day": "2024-01-02"}


def test_an_append_whose_state_is_not_json_writes_it_once(store_url: str) -> None:
    """The append that failed after writing: the session holds the event once, and the session
    object the append returned with agrees with the store."""
    service = TetherSessionService(tether.App(store_url))

    async def scenario() -> tuple[int, int, dict[str, Any]]:
        made = await service.create_session(app_name="shop", user_id="ada", session_id="s")
        await service.list_sessions(app_name="shop")
        await service.append_event(made, say("bot", "hi", {"cb": _callback}))
        got = await service.get_session(app_name="shop", user_id="ada", session_id="s")
        assert got is not None
        return len(made.events), len(got.events), got.state

    assert asyncio.run(scenario()) == (1, 1, {"cb": repr(_callback)})


# ----------------------------------------------------------------------------- stale sessions


async def stale_copies(service: BaseSessionService) -> list[str]:
    """Which appends a service accepts from session objects that do not carry its revision marker."""
    made = await service.create_session(app_name="shop", user_id="ada", session_id="s")
    await service.append_event(made, say("user", "one", at=made.last_update_time + 1))
    copied = AdkSession.model_validate(made.model_dump())  # sent over the wire: no marker
    await service.append_event(made, say("bot", "two", at=made.last_update_time + 1))
    outcomes = []
    try:
        await service.append_event(copied, say("user", "stale", {"x": 1}, at=made.last_update_time + 1))
        outcomes.append("accepted")
    except StaleSessionError:
        outcomes.append("stale")
    current = AdkSession.model_validate(made.model_dump())  # no marker, but nothing was appended since
    await service.append_event(current, say("user", "three", at=made.last_update_time + 1))
    outcomes.append("accepted")
    got = await service.get_session(app_name="shop", user_id="ada", session_id="s")
    assert got is not None
    return [*outcomes, *texts(got.events), str(got.state)]


def test_a_stale_session_without_a_marker_is_refused(store_url: str, tmp_path: Path) -> None:
    """A session object without a revision marker (one that went through JSON, or built by hand):
    ADK's persistent services refuse its append when the stored session was updated after its
    last_update_time and its last event is not the stored last event (StaleSessionError), and
    accept it when it is current. tether's accepted every append from such a session, stale or not."""
    theirs, ours = both(stale_copies, SqliteSessionService(str(tmp_path / "adk.db")), store_url)
    assert theirs == ours == ["stale", "accepted", "one", "two", "three", "{}"]


def test_a_session_object_from_before_a_delete_cannot_append_to_the_session_made_again(store_url: str) -> None:
    """A session read before it was deleted and made again under the same id is stale: ADK's
    database services' marker is the stored update time, which the new session does not share.
    tether's marker was the version alone: once the new session reached the old object's version,
    the old object's append landed in the new session."""
    service = TetherSessionService(tether.App(store_url))

    async def scenario() -> list[str]:
        old = await service.create_session(app_name="shop", user_id="ada", session_id="s")
        await service.append_event(old, say("user", "old one"))
        await service.delete_session(app_name="shop", user_id="ada", session_id="s")
        new = await service.create_session(app_name="shop", user_id="ada", session_id="s")
        await service.append_event(new, say("user", "new one"))
        with pytest.raises(StaleSessionError):
            await service.append_event(old, say("user", "from the old session"))
        got = await service.get_session(app_name="shop", user_id="ada", session_id="s")
        assert got is not None
        return texts(got.events)

    assert asyncio.run(scenario()) == ["new one"]


# ----------------------------------------------------------------------------- an event delivered again


async def delivered_again(service: BaseSessionService) -> tuple[Any, ...]:
    made = await service.create_session(app_name="shop", user_id="ada", session_id="s")
    other = await service.get_session(app_name="shop", user_id="ada", session_id="s")
    assert other is not None
    event = say("user", "once", {"n": 1, "app:n": 1})
    await service.append_event(made, event)
    await service.append_event(made, event)  # the same object again
    await service.append_event(made, event.model_copy(deep=True))  # an equal copy
    await service.append_event(other, event.model_copy(deep=True))  # through a copy of the session read before
    same_id = Event(id=event.id, invocation_id="inv-2", author="bot")  # another event that shares its id
    await service.append_event(made, same_id)
    got = await service.get_session(app_name="shop", user_id="ada", session_id="s")
    assert got is not None
    return [e.author for e in got.events], [e.author for e in made.events], got.state


def test_an_event_delivered_again_is_stored_once(store_url: str) -> None:
    """ADK's in-memory service takes an equal re-delivery of an event (the same object or a copy,
    same id) as done: stored once, state applied once; a different event that shares an id is kept
    (ADK's test_append_event_is_idempotent_for_same_event_id and
    test_append_different_events_not_deduplicated). tether's stored every delivery (four events),
    or refused the one through the session copy as stale."""
    theirs, ours = both(delivered_again, InMemorySessionService(), store_url)  # type: ignore[no-untyped-call]
    assert ours == theirs == (["user", "bot"], ["user", "bot"], {"n": 1, "app:n": 1})


# ----------------------------------------------------------------------------- user state


async def user_state_changed_by_its_reader(service: BaseSessionService) -> tuple[Any, ...]:
    made = await service.create_session(app_name="shop", user_id="ada", state={"user:p": {"n": 1}, "app:c": {"m": 1}})
    read = await service.get_user_state(app_name="shop", user_id="ada")
    read["p"]["n"] = 99
    read["added"] = 1
    got = await service.get_session(app_name="shop", user_id="ada", session_id=made.id)
    assert got is not None
    return await service.get_user_state(app_name="shop", user_id="ada"), got.state


def test_get_user_state_returns_a_copy(store_url: str) -> None:
    """What get_user_state returns is the caller's (ADK's in-memory service copies it as deeply as
    a session's state): tether's shared its values with the service's cached document, so a caller
    changing a nested value changed every later read of the user's state in that process."""
    theirs, ours = both(user_state_changed_by_its_reader, InMemorySessionService(), store_url)  # type: ignore[no-untyped-call]
    assert ours == theirs == ({"p": {"n": 1}}, {"user:p": {"n": 1}, "app:c": {"m": 1}})


# ----------------------------------------------------------------------------- memory


def remembered(author: str, text: str, at: float, *, thought: str | None = None) -> Event:
    parts = [types.Part(text=text)] + ([types.Part(text=thought, thought=True)] if thought else [])
    event = Event(author=author, invocation_id="inv", content=types.Content(role="user", parts=parts))
    event.timestamp = at
    return event


async def memories(memory: BaseMemoryService, sessions: BaseSessionService) -> dict[str, list[str]]:
    """What searches find after a session, some events and a deletion are remembered."""
    session = await sessions.create_session(app_name="shop", user_id="ada", session_id="m1")
    for event in [
        remembered("user", "私はPythonを使う", 1000.0),
        remembered("bot", "Un café au lait, s'il vous plaît", 1001.0),
        remembered("user", "Python is great", 1002.0),
    ]:
        await sessions.append_event(session, event)
    await memory.add_session_to_memory(session)
    extra = [remembered("user", "Another python fact", 1003.0)]
    await memory.add_events_to_memory(app_name="shop", user_id="ada", events=extra, session_id="m2")
    found: dict[str, list[str]] = {}

    async def search(name: str, query: str) -> None:
        result = await memory.search_memory(app_name="shop", user_id="ada", query=query)
        found[name] = sorted(m.content.parts[0].text or "" for m in result.memories if m.content.parts)

    for query in ("python", "使う", "CAFÉ", "cafe\u0301"):  # the last in Unicode's decomposed form
        await search(query, query)
    great = (await memory.search_memory(app_name="shop", user_id="ada", query="great")).memories[0]
    await memory.delete_memory(app_name="shop", user_id="ada", memory_id=great.id)
    await memory.add_session_to_memory(session)  # a deleted memory is not remembered again
    await search("after the delete", "python")
    return found


def test_memory_finds_what_adks_in_memory_service_finds(store_url: str) -> None:
    """ADK's in-memory memory service matches a word inside a run of another script (Python in
    私はPythonを使う), a non-ASCII query word inside an event's text (使う), words in either Unicode
    normal form; it implements add_events_to_memory (which ADK's context.add_events_to_memory
    calls) and delete_memory (a deleted memory is not remembered again). tether's matched none of
    these and raised NotImplementedError for both methods."""
    app = tether.App(store_url)
    theirs = asyncio.run(memories(InMemoryMemoryService(), InMemorySessionService()))  # type: ignore[no-untyped-call]
    ours = asyncio.run(memories(TetherMemoryService(app), TetherSessionService(app)))
    assert ours == theirs
    assert theirs["python"] == ["Another python fact", "Python is great", "私はPythonを使う"]
    assert theirs["after the delete"] == ["Another python fact", "私はPythonを使う"]


# ----------------------------------------------------------------------------- state outside events


async def state_changed_outside_events(service: BaseSessionService) -> dict[str, Any]:
    """A caller changes its session object's state directly (not through an event's state_delta),
    then appends events past a snapshot of the session's state."""
    made = await service.create_session(app_name="shop", user_id="ada", session_id="s", state={"n": 0})
    made.state["direct"] = "not through an event"
    for i in range(70):
        await service.append_event(made, say("bot", f"m{i}", {"n": i + 1}))
    got = await service.get_session(app_name="shop", user_id="ada", session_id="s")
    assert got is not None
    return got.state


def test_state_changed_outside_an_event_is_not_stored(store_url: str) -> None:
    """ADK stores state only through events' deltas: a key set directly on a session object is not
    stored. tether's snapshot of the session's state (every 64 events) was taken from the session
    object, so the key got stored with it, and a session read from that snapshot had it while one
    folded from the events did not."""
    theirs = asyncio.run(state_changed_outside_events(InMemorySessionService()))  # type: ignore[no-untyped-call]
    app = tether.App(store_url)
    asyncio.run(state_changed_outside_events(TetherSessionService(app)))
    fresh = TetherSessionService(app if store_url == "memory://" else tether.App(store_url))
    got = asyncio.run(fresh.get_session(app_name="shop", user_id="ada", session_id="s"))
    assert got is not None and got.state == theirs == {"n": 70}


def test_a_snapshot_written_from_a_session_object_is_not_read(store_url: str) -> None:
    """Snapshots written before (schema 1001, from the session object: they may hold a key set
    outside any event) are not read: the state is folded from the events, as if there were none."""
    app = tether.App(store_url)
    service = TetherSessionService(app)

    async def fill() -> None:
        made = await service.create_session(app_name="shop", user_id="ada", session_id="s", state={"n": 0})
        for i in range(70):
            await service.append_event(made, say("bot", f"m{i}", {"n": i + 1}))

    asyncio.run(fill())
    stream = "session:adk:shop:ada:s"
    old = orjson.dumps({"n": 64, "direct": "not through an event"}).decode()
    app.store.put_snapshot(app.log.tenant, stream, SnapshotRow(65, 1001, checksum(old), old))
    fresh = TetherSessionService(app if store_url == "memory://" else tether.App(store_url))
    got = asyncio.run(fresh.get_session(app_name="shop", user_id="ada", session_id="s"))
    assert got is not None and got.state == {"n": 70}
    (listed,) = asyncio.run(
        TetherSessionService(tether.App(store_url) if store_url != "memory://" else app).list_sessions(app_name="shop")
    ).sessions
    assert listed.state == {"n": 70}
