"""ADK session service benchmark: tether's ``TetherSessionService`` beside ADK's own services.

Run: ``python bench/adk.py`` (``--quick``: 1,000 sessions, sessions of 20 and 200 events; ``--smoke``: 10,
2 and 5, each figure of 2 reads, for the test suite). Prints a
table, the figures the targets name (absolute ms, and tether / each ADK service), then one line of JSON.

- ``list_sessions`` over 10,000 sessions of one app (100 users, one state key each), and over one
  user's 100, each session with its merged state (app:, user:, its own) and no events, as ADK's own
  services return them. ADK's ``SqliteSessionService``, its ``DatabaseSessionService`` (SQLAlchemy
  over ``sqlite+aiosqlite``, when ``aiosqlite`` is installed; same machine, same disk) and
  ``InMemorySessionService`` are measured beside tether. ``list_cold_ms``: the first listing by a
  service just opened on the filled database (tether reads each session's state once then);
  ``list_all_ms``: the median of the 9 listings after it, nothing written between them (tether: one
  narrow read of the sessions' versions, the listing made again from what it kept);
  ``list_moved_ms``: the median of 9 listings each after one event was appended to one session
  (untimed; tether brings that session's state up to date and builds the listing again). Target:
  30 ms for 10,000 sessions, and within 1.5x of ADK's SQLite service. The machine may be shared:
  each figure is the median of several runs, and the minimum is printed beside it.
- ``get_session(num_recent_events=10)`` on sessions of 200 and 2,000 events (each event with a
  state delta): tether reads the last records and the state's snapshot plus what follows it.
  Target: 2,000 events within 2x of 200 — the cost does not grow with the session's history.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from typing import Any

import orjson

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))

from google.adk.events import Event, EventActions
from google.adk.sessions import InMemorySessionService
from google.adk.sessions.base_session_service import BaseSessionService, GetSessionConfig
from google.adk.sessions.sqlite_session_service import SqliteSessionService

try:
    import aiosqlite  # noqa: F401 - DatabaseSessionService's SQLite driver
    from google.adk.sessions.database_session_service import DatabaseSessionService
except ImportError:  # ADK's database service is an extra of its own
    DatabaseSessionService = None  # type: ignore[assignment,misc]
from google.genai import types

import tether
from tether.integrations.adk import TetherSessionService

USERS = 100


def event(i: int) -> Event:
    return Event(
        author="user" if i % 2 == 0 else "support",
        invocation_id=f"inv-{i // 2}",
        content=types.Content(role="model", parts=[types.Part(text=f"message {i}: where is my parcel? " * 3)]),
        actions=EventActions(state_delta={"turn": i, "app:seen": i}),
    )


async def timed_ms(fn: Callable[[], Awaitable[Any]], repeat: int) -> list[float]:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        await fn()
        times.append((time.perf_counter() - start) * 1000)
    return times


async def median_ms(fn: Callable[[], Awaitable[Any]], repeat: int) -> float:
    return statistics.median(await timed_ms(fn, repeat))


async def fill(service: BaseSessionService, sessions: int, lengths: list[int]) -> None:
    for n in range(sessions):
        await service.create_session(app_name="shop", user_id=f"u{n % USERS}", session_id=f"s{n}", state={"n": n})
    for length in lengths:
        session = await service.create_session(app_name="long", user_id="ada", session_id=f"len{length}")
        for i in range(length):
            await service.append_event(session, event(i))


async def moved_listings_ms(service: BaseSessionService, sessions: int, repeat: int) -> list[float]:
    """Listings each after one event appended (untimed) to one session, another each time."""
    times = []
    for i in range(repeat):
        n = (i * 997) % sessions
        session = await service.get_session(app_name="shop", user_id=f"u{n % USERS}", session_id=f"s{n}")
        assert session is not None
        await service.append_event(session, event(i))
        times += await timed_ms(lambda: service.list_sessions(app_name="shop"), 1)
    return times


async def measure(service: BaseSessionService, sessions: int, lengths: list[int], repeat: int) -> dict[str, float]:
    """Medians of ``repeat`` reads (a session's recent events: of twice as many)."""
    cold = (await timed_ms(lambda: service.list_sessions(app_name="shop"), 1))[0]
    listings = await timed_ms(lambda: service.list_sessions(app_name="shop"), repeat)
    listed = (await service.list_sessions(app_name="shop")).sessions
    assert len(listed) == sessions and all(s.state.get("n") is not None for s in listed)
    moved = await moved_listings_ms(service, sessions, repeat)
    row = {
        "list_cold_ms": cold,
        "list_all_ms": statistics.median(listings),
        "list_all_min_ms": min(listings),
        "list_moved_ms": statistics.median(moved),
        "list_user_ms": await median_ms(lambda: service.list_sessions(app_name="shop", user_id="u7"), repeat),
    }
    recent = GetSessionConfig(num_recent_events=10)
    for length in lengths:
        row[f"get_recent_{length}_ms"] = await median_ms(
            lambda length=length: service.get_session(
                app_name="long", user_id="ada", session_id=f"len{length}", config=recent
            ),
            2 * repeat,
        )
    return row


async def run(sessions: int, lengths: list[int], folder: str, repeat: int) -> dict[str, dict[str, float]]:
    services: dict[str, Callable[[], BaseSessionService]] = {
        "tether (SQLite)": lambda: TetherSessionService(tether.App(f"sqlite:///{folder}/tether.db")),
        "ADK SqliteSessionService": lambda: SqliteSessionService(f"{folder}/adk.db"),
    }
    if DatabaseSessionService is not None:
        services["ADK DatabaseSessionService"] = lambda: DatabaseSessionService(f"sqlite+aiosqlite:///{folder}/db.db")
    memory = InMemorySessionService()  # type: ignore[no-untyped-call]
    services["ADK InMemorySessionService"] = lambda: memory
    rows = {}
    for name, open_service in services.items():
        start = time.perf_counter()
        await fill(open_service(), sessions, lengths)
        print(f"filled {name} in {time.perf_counter() - start:.1f} s", file=sys.stderr)
        rows[name] = await measure(open_service(), sessions, lengths, repeat)  # opened afresh: nothing cached
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="the shortest run through every path, for the test suite: its figures mean nothing",
    )
    args = parser.parse_args()
    sessions, lengths = (10, [2, 5]) if args.smoke else (1_000, [20, 200]) if args.quick else (10_000, [200, 2_000])
    repeat = 2 if args.smoke else 9
    rows = asyncio.run(run(sessions, lengths, tempfile.mkdtemp(prefix="tether-bench-adk-"), repeat))
    ours, theirs = rows["tether (SQLite)"], rows["ADK SqliteSessionService"]
    short, long = lengths
    result: dict[str, Any] = {
        "sessions": sessions,
        "rows": rows,
        "list_all_vs_adk_sqlite": ours["list_all_ms"] / theirs["list_all_ms"],
        "list_moved_vs_adk_sqlite": ours["list_moved_ms"] / theirs["list_moved_ms"],
        "get_recent_vs_adk_sqlite": ours[f"get_recent_{long}_ms"] / theirs[f"get_recent_{long}_ms"],
        "get_recent_growth": ours[f"get_recent_{long}_ms"] / ours[f"get_recent_{short}_ms"],
        "target": {"list_all_ms": 30.0, "list_all_vs_adk_sqlite": 1.5, "get_recent_growth": 2.0},
    }
    result["pass"] = result["list_all_vs_adk_sqlite"] <= 1.5 and result["get_recent_growth"] <= 2.0
    columns = ["list_cold_ms", "list_all_ms", "list_all_min_ms", "list_moved_ms", "list_user_ms"]
    columns += [f"get_recent_{n}_ms" for n in lengths]
    print(f"{'service':<28}" + "".join(f"{c:>17}" for c in columns))
    for name, row in rows.items():
        print(f"{name:<28}" + "".join(f"{row[c]:>17.3f}" for c in columns))
    for name, row in rows.items():
        if name != "tether (SQLite)":
            print(
                f"list {sessions:,} sessions: tether {ours['list_all_ms']:.1f} ms, {name} {row['list_all_ms']:.1f} ms "
                f"(tether / it: {ours['list_all_ms'] / row['list_all_ms']:.2f}); one session moved: "
                f"{ours['list_moved_ms']:.1f} ms vs {row['list_moved_ms']:.1f} ms "
                f"({ours['list_moved_ms'] / row['list_moved_ms']:.2f})"
            )
    print(f"list {sessions:,} sessions, tether / ADK SQLite (target <= 1.5): {result['list_all_vs_adk_sqlite']:.2f}")
    print(f"get_session(10 recent) at {long:,} events, tether / ADK SQLite: {result['get_recent_vs_adk_sqlite']:.2f}")
    print(f"get_session(10 recent) at {long:,} vs {short:,} events (target <= 2.0): {result['get_recent_growth']:.2f}")
    print(orjson.dumps(result).decode())


if __name__ == "__main__":
    main()
