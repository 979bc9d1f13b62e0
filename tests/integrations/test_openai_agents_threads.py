"""One TetherSession shared by threads that each run their own event loop (``asyncio.run``, as the
SDK's ``Runner.run_sync`` does), beside another process on the same session: every reader gets
exactly the stored items, in the stored order, each once — on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("agents")

from agents import Agent, Runner, set_tracing_disabled
from agents.testing import ScriptedModel, assistant_message

import tether
from tests._forkserver import ForkServers
from tests.integrations._crash import CHILD_IMPORTS
from tests.integrations.conftest import CHILD_ENV, HERE
from tether.integrations.openai_agents import TetherSession

set_tracing_disabled(True)


def _in_threads(names: str, work: Callable[[str], None]) -> None:
    """``work(name)`` in one thread per name, released together; the first failure is raised here."""
    start = threading.Barrier(len(names))
    failures: list[BaseException] = []

    def body(name: str) -> None:
        try:
            start.wait()
            work(name)
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=body, args=(name,)) for name in names]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if failures:
        raise failures[0]


def _contents(items: list[Any]) -> list[str]:
    return [item["content"] for item in items]


def test_threads_with_their_own_event_loops_share_one_session(durable_url: str) -> None:
    """The reported case: four threads add 5 items each through one TetherSession; the session
    object gives the 20 items stored, as an App of its own reads them (it gave 28 to 33)."""
    session = TetherSession("shared", tether.App(durable_url))
    asyncio.run(session.get_items())

    async def add(name: str) -> None:
        for i in range(5):
            await session.add_items([{"role": "user", "content": f"{name}:{i}"}])
            await session.get_items()  # a run reads its history between turns

    _in_threads("abcd", lambda name: asyncio.run(add(name)))
    stored = asyncio.run(TetherSession("shared", tether.App(durable_url)).get_items())
    assert sorted(_contents(stored)) == sorted(f"{n}:{i}" for n in "abcd" for i in range(5))
    assert asyncio.run(session.get_items()) == stored
    assert asyncio.run(session.get_items(limit=3)) == stored[-3:]
    for name in "abcd":
        assert [c for c in _contents(stored) if c.startswith(name)] == [f"{name}:{i}" for i in range(5)]

    popped: list[str] = []

    def pop(name: str) -> None:
        while (item := asyncio.run(session.pop_item())) is not None:
            popped.append(item["content"])

    _in_threads("wxyz", pop)
    assert sorted(popped) == sorted(_contents(stored))  # each item popped once
    fresh = TetherSession("shared", tether.App(durable_url))
    assert asyncio.run(session.get_items()) == [] == asyncio.run(fresh.get_items())


def test_runner_run_sync_in_threads_on_one_session(durable_url: str) -> None:
    """``Runner.run_sync`` from four threads on one session: every turn's items are stored once, and the
    session object reads them as stored."""
    session = TetherSession("sync-runs", tether.App(durable_url))

    def turn(name: str) -> None:
        agent = Agent(name=name, model=ScriptedModel([[assistant_message(f"answer {name}")]]))
        asyncio.set_event_loop(asyncio.new_event_loop())  # run_sync's loop in a thread of its own
        try:
            assert Runner.run_sync(agent, f"question {name}", session=session).final_output == f"answer {name}"
        finally:
            asyncio.get_event_loop().close()
            asyncio.set_event_loop(None)

    _in_threads("abcd", turn)
    stored = asyncio.run(TetherSession("sync-runs", tether.App(durable_url)).get_items())
    assert asyncio.run(session.get_items()) == stored
    texts = [item["content"] if isinstance(item["content"], str) else item["content"][0]["text"] for item in stored]
    assert sorted(texts) == sorted([f"question {n}" for n in "abcd"] + [f"answer {n}" for n in "abcd"])


@pytest.mark.crash
def test_threads_and_another_process_write_one_session(
    durable_url: str, tmp_path: Path, fork_servers: ForkServers
) -> None:
    """Threads of this process share one TetherSession while a child process appends batches of three
    through its own: both readers see every item once, in one order, each batch contiguous."""
    session = TetherSession("shared", tether.App(durable_url))
    asyncio.run(session.get_items())
    gate = tmp_path / "go"
    server, _ = fork_servers(CHILD_IMPORTS["_agents_child.py"], CHILD_ENV)  # the SDK imported once
    child = server.start(HERE / "_agents_session_child.py", durable_url, "shared", "p", "add", "20", str(gate))
    ready = threading.Event()

    def wait_for_child() -> None:
        while not (tmp_path / "ready-p").exists():
            assert child.poll() is None, child.result().stderr
            ready.wait(0.01)
        gate.touch()

    async def add(name: str) -> None:
        for i in range(10):
            await session.add_items([{"role": "user", "content": f"{name}:{i}:{j}"} for j in range(3)])
            await session.get_items()

    wait_for_child()
    _in_threads("abcd", lambda name: asyncio.run(add(name)))
    done = child.result()
    assert done.returncode == 0, done.stderr

    stored = asyncio.run(TetherSession("shared", tether.App(durable_url)).get_items())
    contents = _contents(stored)
    expected = [f"{n}:{i}:{j}" for n in "abcd" for i in range(10) for j in range(3)]
    expected += [f"p:{i}:{j}" for i in range(20) for j in range(3)]
    assert sorted(contents) == sorted(expected)
    for k in range(0, len(contents), 3):  # every batch contiguous
        assert len({c.rpartition(":")[0] for c in contents[k : k + 3]}) == 1, contents[k : k + 3]
    assert asyncio.run(session.get_items()) == stored
