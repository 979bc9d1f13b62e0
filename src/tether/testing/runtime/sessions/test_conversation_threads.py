"""One conversation used from several threads at once, each with an event loop of its own (as the
Agents SDK's ``Runner.run_sync`` runs), and from several App instances: the in-process view of a
session (``Session.window``, ``view``, ``version``, ``pop``) holds exactly the stored messages, in
stored order, each once — on every backend."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable

import pytest

import tether
from tether.testing import opens_share

THREADS = 4
ADDS = 10


def _in_threads(names: str, work: Callable[[str], None]) -> None:
    """Run ``work(name)`` in one thread per name, all released at once; re-raise the first failure."""
    start = threading.Barrier(len(names))
    failures: list[BaseException] = []

    def body(name: str) -> None:
        try:
            start.wait()
            work(name)
        except BaseException as exc:  # surfaced in the test's own thread below
            failures.append(exc)

    threads = [threading.Thread(target=body, args=(name,)) for name in names]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if failures:
        raise failures[0]


def _shown(session: tether.Session) -> list[tuple[int, str]]:
    """What the session object's own view holds (its window has room for everything)."""
    return [(m.seq, m.content) for m in session.window(max_tokens=10**9, keep_last=0).messages]


def _stored(url: str, app: tether.App) -> list[tuple[int, str]]:
    """What the database holds, read by an App of its own (the same App for the memory store)."""
    reader = tether.App(url) if opens_share(url) else app
    return [(m.seq, m.content) for m in reader.session("shared").messages()]


def test_one_session_object_shared_by_threads_with_their_own_event_loops(store_url: str) -> None:
    app = tether.App(store_url)
    shared = app.session("shared")

    async def writer(name: str) -> None:
        for i in range(ADDS):
            shared.add("user", f"{name}:{i}")
            await asyncio.sleep(0)  # the loop runs other work between turns, as an agent run does
            _shown(shared)  # and the run reads its conversation: the view refreshes meanwhile

    _in_threads("abcd"[:THREADS], lambda name: asyncio.run(writer(name)))

    stored = _stored(store_url, app)
    assert sorted(c for _, c in stored) == sorted(f"{n}:{i}" for n in "abcd"[:THREADS] for i in range(ADDS))
    for name in "abcd"[:THREADS]:  # each thread's messages in the order it added them
        assert [c for _, c in stored if c.startswith(f"{name}:")] == [f"{name}:{i}" for i in range(ADDS)]
    assert _shown(shared) == stored  # exactly the stored messages, in stored order, each once
    assert [(m.seq, m.content) for m in shared.view().recent] == stored
    assert shared.version == app.session("shared").version
    assert [(m.seq, m.content) for m in shared.messages()] == stored

    # Pops from every thread at once: each message is removed and returned once, newest first.
    popped: dict[str, list[int]] = {}

    def popper(name: str) -> None:
        mine = popped.setdefault(name, [])
        while (m := shared.pop()) is not None:
            mine.append(m.seq)

    _in_threads("wxyz", lambda name: asyncio.run(asyncio.to_thread(popper, name)))
    everything = [seq for mine in popped.values() for seq in mine]
    assert sorted(everything) == [seq for seq, _ in stored]  # every message popped exactly once
    for mine in popped.values():
        assert mine == sorted(mine, reverse=True)
    assert _shown(shared) == [] == _stored(store_url, app)


@pytest.mark.tether_requires("cross_process")
def test_two_apps_and_their_threads_write_one_session(store_url: str) -> None:
    """Two App instances (two processes, as far as the store can tell), each session object shared by
    threads of its own: every view holds every stored message once, in the stored order."""
    first, second = tether.App(store_url), tether.App(store_url)
    sessions = {"a": first.session("shared"), "b": first.session("shared"), "c": second.session("shared")}
    by_thread = {"a": sessions["a"], "b": sessions["a"], "c": sessions["c"], "d": sessions["c"]}

    async def writer(name: str) -> None:
        session = by_thread[name]
        for i in range(ADDS):
            session.add_many([{"role": "user", "content": f"{name}:{i}:{j}"} for j in range(2)])
            await asyncio.sleep(0)
            _shown(session)

    _in_threads("abcd", lambda name: asyncio.run(writer(name)))
    stored = _stored(store_url, first)
    assert len(stored) == 4 * ADDS * 2
    for k in range(0, len(stored), 2):  # each add_many stays contiguous
        assert stored[k][1].rpartition(":")[0] == stored[k + 1][1].rpartition(":")[0]
    for session in sessions.values():
        assert _shown(session) == stored
        assert [(m.seq, m.content) for m in session.view().recent] == stored


def test_tasks_in_threads_with_their_own_event_loops_share_one_conversation(store_url: str) -> None:
    """Async tasks run at once, each in a thread with an event loop of its own, all on one session:
    each task's ``ctx.session`` reads hold the stored messages up to what they saw, in order, once."""
    app = tether.App(store_url)

    @app.task
    async def chat(ctx: tether.AsyncTaskContext, name: str) -> list[list[int | str]]:
        for i in range(ADDS):
            ctx.session.add("user", f"{name}:{i}")
            await asyncio.sleep(0)
        return [[m.seq, m.content] for m in ctx.session.messages()]

    reads: dict[str, list[tuple[int, str]]] = {}

    def run(name: str) -> None:
        done = asyncio.run(app.run_async(chat, name, task_id=f"chat-{name}", session_id="shared"))
        assert done.status is tether.Status.COMPLETED, done.failure
        reads[name] = [(int(seq), str(content)) for seq, content in done.output]

    _in_threads("abcd"[:THREADS], run)
    stored = _stored(store_url, app)
    assert sorted(c for _, c in stored) == sorted(f"{n}:{i}" for n in "abcd"[:THREADS] for i in range(ADDS))
    for name, read in reads.items():
        assert read == [m for m in stored if m[0] <= read[-1][0]], name  # as stored up to what it saw
        assert [c for _, c in read if c.startswith(f"{name}:")] == [f"{name}:{i}" for i in range(ADDS)]


def test_ctx_session_from_a_thread_the_task_did_not_start_is_refused(store_url: str) -> None:
    """A task's conversation operations are numbered in the order its code issues them; another
    thread (with its event loop) cannot keep that order, so its use is refused, writing nothing."""
    app = tether.App(store_url)

    @app.task
    def chat(ctx: tether.TaskContext) -> str:
        ctx.session.add("user", "hi")
        refused: list[str] = []

        async def elsewhere() -> None:
            try:
                ctx.session.add("user", "from another thread")
            except tether.TetherError as exc:
                refused.append(str(exc))

        thread = threading.Thread(target=lambda: asyncio.run(elsewhere()))
        thread.start()
        thread.join()
        return refused[0] if refused else "accepted"

    done = app.run(chat, task_id="c1")
    assert "ctx.session was called from a thread task 'c1' did not start" in done.output
    assert [m.content for m in app.session("c1").messages()] == ["hi"]
