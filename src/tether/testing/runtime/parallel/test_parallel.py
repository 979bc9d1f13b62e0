"""Parallel recorded calls: asyncio.gather / TaskGroup / as_completed, ctx.map with threads.

A call's identity (its ordinal, so its key) comes from the order the code issues it;
results are recorded in the order they finish; resume, replay and fork treat a batch
in flight as a normal state of the record.
"""
# mypy: disable-error-code="arg-type,attr-defined,union-attr,unused-ignore"

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest

import tether
from tether.canonical import call_key
from tether.testing import dump_database


@pytest.fixture
def app(store_url: str) -> tether.App:
    return tether.App(store_url)


class Stop(BaseException):
    """Stands for a crash: a BaseException no task code catches, leaving the task as it was."""


def dump(app: tether.App, url: str) -> object:
    return dump_database(url, app.store)


def test_gather_orders_calls_by_issue_and_records_finishes(app: tether.App) -> None:
    # They finish b, c, a: each waits for the one before it to finish (not for a time, which a loaded
    # machine could stretch past the others'), then a few turns of the loop for its record.
    done = {q: asyncio.Event() for q in "abc"}
    after = {"a": "c", "c": "b"}

    @app.tool(readonly=True)
    async def lookup(q: str) -> str:
        if q in after:
            await done[after[q]].wait()
            for _ in range(20):
                await asyncio.sleep(0)
        done[q].set()
        return q.upper()

    @app.task
    async def research(ctx: tether.AsyncTaskContext) -> list[str]:
        return list(await asyncio.gather(*(ctx.call(lookup, q) for q in "abc")))

    run = app.run(research, task_id="g")
    assert run.output == ["A", "B", "C"]
    state = app.state("g")
    # Identity by issue order: call #1 is "a" although it finished last.
    assert [(c.n, c.args["q"], c.key) for c in state.calls] == [
        (n, q, call_key("g", n, "lookup", {"q": q})) for n, q in enumerate("abc", 1)
    ]
    finished = [r.event.n for r in app.log.events("g") if type(r.event).__name__ == "CallCompleted"]
    assert finished == [2, 3, 1]  # recorded as they finished
    assert app.replay("g").clean


def test_taskgroup_and_as_completed(app: tether.App) -> None:
    @app.tool
    async def work(x: int) -> int:
        await asyncio.sleep(0.01 * (3 - x))
        return x * 10

    @app.task
    async def grouped(ctx: tether.AsyncTaskContext) -> dict[str, Any]:
        async with asyncio.TaskGroup() as group:
            tasks = [group.create_task(ctx.call(work, x)) for x in range(3)]
        seen = [await done for done in asyncio.as_completed([ctx.call(work, x) for x in range(3, 5)])]
        return {"group": [t.result() for t in tasks], "completed": sorted(seen)}

    assert app.run(grouped, task_id="tg").output == {"group": [0, 10, 20], "completed": [30, 40]}
    assert [c.args["x"] for c in app.state("tg").calls] == [0, 1, 2, 3, 4]
    assert app.resume("tg").output == {"group": [0, 10, 20], "completed": [30, 40]}
    assert app.replay("tg").clean


def test_resume_mid_batch_runs_only_unfinished_calls_under_their_keys(app: tether.App) -> None:
    ran: list[tuple[str, str]] = []
    crash = {"on": "c"}

    @app.tool
    async def send(to: str) -> str:
        ran.append((to, tether.current_call().key))
        if to == crash["on"]:
            raise Stop  # the process dies inside this call: its intent is recorded, its result not
        await asyncio.sleep(0.01 if to == "a" else 0.0)
        return f"sent {to}"

    @app.task
    async def blast(ctx: tether.AsyncTaskContext) -> list[str]:
        return list(await asyncio.gather(*(ctx.call(send, to) for to in "abcd")))

    with pytest.raises(Stop):
        app.run(blast, task_id="m")
    before = {c.args["to"]: c.status for c in app.state("m").calls}
    assert before["c"] == "intended"
    crash["on"] = ""
    keys_before = dict(ran)
    ran.clear()
    assert app.resume("m").output == ["sent a", "sent b", "sent c", "sent d"]
    rerun = dict(ran)
    # Completed calls did not run again; the interrupted one ran again under its own key.
    assert not {to for to, status in before.items() if status == "completed"} & set(rerun)
    assert "c" in rerun and rerun["c"] == keys_before["c"]
    assert all(rerun[to] == call_key("m", "abcd".index(to) + 1, "send", {"to": to}) for to in rerun)
    assert app.replay("m").clean


@pytest.mark.tether_requires("dump")
def test_composite_branches_keep_their_ordinals_on_replay(app: tether.App, store_url: str) -> None:
    """Each branch awaits one call and then issues another: the second calls' ordinals depend on
    the order the first ones finished, and replay hands results back in that order."""

    @app.tool(readonly=True)
    async def first(q: str, delay: float) -> str:
        await asyncio.sleep(delay)
        return f"first {q}"

    @app.tool(readonly=True)
    async def second(previous: str) -> str:
        return previous.replace("first", "second")

    delays = {"a": 0.05, "b": 0.0, "c": 0.02}

    @app.task
    async def branches(ctx: tether.AsyncTaskContext) -> list[str]:
        async def branch(q: str) -> str:
            with ctx.step(f"branch {q}"):
                got = await ctx.call(first, q, delays[q])
                return str(await ctx.call(second, got))

        return list(await asyncio.gather(*(branch(q) for q in "abc")))

    assert app.run(branches, task_id="cb").output == ["second a", "second b", "second c"]
    seconds = {c.n: c.args["previous"] for c in app.state("cb").calls if c.tool == "second"}
    assert seconds == {4: "first b", 5: "first c", 6: "first a"}  # by the order the firsts finished
    assert [s.status for s in app.state("cb").plan] == ["completed"] * 3
    before = dump(app, store_url)
    for _ in range(3):
        report = app.replay("cb")
        assert report.clean, report
    assert dump(app, store_url) == before  # replay wrote nothing


def test_fork_mid_batch_runs_the_rest_in_the_fork_only(app: tether.App) -> None:
    ran: list[str] = []

    @app.tool
    async def send(to: str) -> str:
        ran.append(to)
        return f"sent {to}"

    @app.task
    async def blast(ctx: tether.AsyncTaskContext) -> list[str]:
        return list(await asyncio.gather(*(ctx.call(send, to) for to in "abc")))

    app.run(blast, task_id="p")
    events = app.log.events("p")
    # The point where the first call finished and the others were still in flight.
    first = next(r for r in events if type(r.event).__name__ == "CallCompleted")
    done = "abc"[first.event.n - 1]  # type: ignore[attr-defined]
    fork = app.fork("p", at=first.seq, new_id="f")
    ran.clear()
    assert app.resume(fork.task_id).output == ["sent a", "sent b", "sent c"]
    assert sorted(ran) == [to for to in "abc" if to != done]  # the finished one is in the shared history
    assert app.state("p").output == ["sent a", "sent b", "sent c"]


def test_changed_arguments_are_a_divergence_and_never_get_the_old_result(app: tether.App) -> None:
    words = {"body": "hello"}
    sent: list[str] = []

    @app.tool
    def email(body: str) -> str:
        sent.append(body)
        if body == "hello":
            raise Stop  # dies inside the call: intent recorded, outcome unknown
        return body

    @app.task
    def notify(ctx: tether.TaskContext) -> str:
        return str(ctx.call(email, words["body"]))

    with pytest.raises(Stop):
        app.run(notify, task_id="e")
    words["body"] = "hello, with a new greeting"
    rows = app.store.read_events(app.tenant, "e")
    with pytest.raises(tether.NonDeterminismError) as info:
        app.resume("e")
    message = str(info.value)
    assert "call #1 email" in message and '"body":"hello"' in message and "new greeting" in message
    assert sent == ["hello"] and app.store.read_events(app.tenant, "e") == rows  # nothing ran, nothing written


def test_replay_check_name_lets_a_deliberate_argument_change_through(app: tether.App) -> None:
    prompt = {"text": "Summarise."}

    @app.tool(readonly=True, replay_check="name")
    def llm(text: str) -> str:
        return f"answer to {text}"

    @app.task
    def ask(ctx: tether.TaskContext) -> str:
        return str(ctx.call(llm, prompt["text"]))

    assert app.run(ask, task_id="r").output == "answer to Summarise."
    prompt["text"] = "Summarise, politely."
    assert app.replay("r").clean
    assert app.resume("r").output == "answer to Summarise."


def test_map_runs_in_threads_in_input_order(app: tether.App) -> None:
    threads: set[str] = set()
    started = threading.Barrier(3, timeout=5)

    @app.tool(readonly=True)
    def price(city: str) -> int:
        threads.add(threading.current_thread().name)
        started.wait()  # all three run at once, or this times out
        time.sleep({"Paris": 0.03, "Rome": 0.0, "Oslo": 0.01}[city])
        return len(city)

    @app.task
    def compare(ctx: tether.TaskContext) -> list[int]:
        return ctx.map(price, ["Paris", "Rome", "Oslo"])

    assert app.run(compare, task_id="mp").output == [5, 4, 4]
    assert len(threads) == 3
    assert [c.args["city"] for c in app.state("mp").calls] == ["Paris", "Rome", "Oslo"]
    assert app.replay("mp").clean


def test_map_resume_and_first_failure_in_input_order(app: tether.App) -> None:
    ran: list[str] = []
    crash = {"x": "c"}

    @app.tool
    def act(x: str) -> str:
        ran.append(x)
        if x == crash["x"]:
            raise Stop
        if x == "b":
            raise ValueError("b is refused")
        return x

    @app.task
    def batch(ctx: tether.TaskContext) -> list[str]:
        try:
            return ctx.map(act, ["a", "b", "c", "d"], max_concurrency=2)
        except tether.ToolError as error:
            return [f"failed: {error.error_message}"]

    with pytest.raises(Stop):
        app.run(batch, task_id="mr")
    done = {c.args["x"] for c in app.state("mr").calls if c.status in ("completed", "failed")}
    crash["x"] = ""
    ran.clear()
    assert app.resume("mr").output == ["failed: b is refused"]
    assert not done & set(ran) and "c" in ran
    assert app.replay("mr").clean


def test_map_refuses_bad_concurrency(app: tether.App) -> None:
    @app.task
    def batch(ctx: tether.TaskContext) -> Any:
        return ctx.map(len, ["a"], max_concurrency=0)

    assert app.run(batch).failure.message.startswith("max_concurrency must be")


def test_a_call_from_a_foreign_thread_is_refused_naming_map(app: tether.App) -> None:
    @app.tool
    def noop() -> int:
        return 1

    @app.task
    def sneaky(ctx: tether.TaskContext) -> str:
        errors: list[BaseException] = []

        def worker() -> None:
            try:
                ctx.call(noop)
            except tether.TetherError as exc:
                errors.append(exc)

        thread = threading.Thread(target=worker)
        thread.start()
        thread.join()
        return str(errors[0])

    message = app.run(sneaky, task_id="th").output
    assert "ctx.map" in message and "thread" in message
    assert app.state("th").calls == ()


def test_long_backoff_waits_in_place_while_siblings_run(app: tether.App) -> None:
    """A retry backoff longer than inline_wait would suspend the task; while other calls of the
    batch are in flight it waits in place instead of abandoning them."""
    app.engine.inline_wait = 0.0
    attempts: dict[str, int] = {}

    @app.tool(retry=tether.Retry(max_attempts=2, backoff=0.05, jitter=0))
    async def flaky(x: str) -> str:
        attempts[x] = attempts.get(x, 0) + 1
        if x == "f" and attempts[x] == 1:
            raise TimeoutError("try again")
        await asyncio.sleep(0.1 if x == "slow" else 0)
        return x

    @app.task
    async def batch(ctx: tether.AsyncTaskContext) -> list[str]:
        return list(await asyncio.gather(ctx.call(flaky, "f"), ctx.call(flaky, "slow")))

    run = app.run(batch, task_id="bk")
    assert run.status is tether.Status.COMPLETED and run.output == ["f", "slow"]
    assert attempts == {"f": 2, "slow": 1}


class CountingAppends:
    """Counts the store's write transactions to one task."""

    def __init__(self, app: tether.App) -> None:
        self.count = 0
        original = app.store.append

        def append(*args: Any, **kwargs: Any) -> Any:
            self.count += 1
            return original(*args, **kwargs)

        app.store.append = append  # type: ignore[method-assign]


def test_branches_finishing_together_commit_together(app: tether.App) -> None:
    """Group commit: the results of a gather's calls that finish in the same turn of the event
    loop are written in one transaction, in the order they finished, and each is durable
    before its branch goes on."""

    @app.tool(readonly=True)
    async def lookup(i: int) -> str:
        return f"r{i}" * 100

    @app.tool
    async def send(i: int) -> str:
        return f"sent {i}"

    @app.task
    async def fan_out(ctx: tether.AsyncTaskContext) -> list[str]:
        found = await asyncio.gather(*(ctx.call(lookup, i) for i in range(8)))
        sent = await asyncio.gather(*(ctx.call(send, i) for i in range(8)))
        return [*found, *sent]

    appends = CountingAppends(app)
    run = app.run(fan_out, task_id="gc")
    assert run.output == [f"r{i}" * 100 for i in range(8)] + [f"sent {i}" for i in range(8)]
    # running, 8 readonly results, 8 intents, 8 results, completed: 5 writes, not 26.
    assert appends.count == 5
    state = app.state("gc")
    assert [c.status for c in state.calls] == ["completed"] * 16
    assert [c.n for c in state.calls] == list(range(1, 17))
    assert app.resume("gc").output == run.output
    assert app.replay("gc").clean


def test_a_sequential_call_writes_at_once(app: tether.App) -> None:
    """With no sibling in flight a call's record is written at once, not queued for a later turn."""
    order: list[str] = []

    @app.tool
    async def step(i: int) -> int:
        order.append(f"ran {i}")
        return i

    @app.task
    async def one_by_one(ctx: tether.AsyncTaskContext) -> int:
        total = 0
        for i in range(3):
            total += await ctx.call(step, i)
            order.append(f"recorded {len(ctx.state.calls)}")
        return total

    appends = CountingAppends(app)
    assert app.run(one_by_one, task_id="seq").output == 3
    assert appends.count == 2 + 3 * 2  # start, end, and an intent and a result per call
    assert order == ["ran 0", "recorded 1", "ran 1", "recorded 2", "ran 2", "recorded 3"]


def test_one_unstorable_result_in_a_batch_fails_only_its_own_call(store_url: str) -> None:
    app = tether.App(store_url, max_value_bytes=2000)

    @app.tool(readonly=True)
    async def fetch(i: int) -> str:
        return "x" * (5000 if i == 2 else 10)

    @app.task
    async def batch(ctx: tether.AsyncTaskContext) -> list[Any]:
        outcomes = await asyncio.gather(*(ctx.call(fetch, i) for i in range(4)), return_exceptions=True)
        return [o if isinstance(o, str) else type(o).__name__ for o in outcomes]

    run = app.run(batch, task_id="big")
    assert run.output == ["x" * 10, "x" * 10, "ToolError", "x" * 10]
    calls = {c.n: c.status for c in app.state("big").calls}
    assert calls == {1: "completed", 2: "completed", 3: "failed", 4: "completed"}
    assert app.replay("big").clean


def test_a_store_fault_during_a_group_commit_reaches_every_branch_and_resumes(app: tether.App) -> None:
    """A batch that could not be written is written by nobody: every branch hears the fault,
    the task is left resumable, and the resume runs each unrecorded call once more."""
    runs: dict[int, int] = {}

    @app.tool(readonly=True)
    async def lookup(i: int) -> int:
        runs[i] = runs.get(i, 0) + 1
        return i

    outcomes: list[list[Any]] = []

    @app.task
    async def batch(ctx: tether.AsyncTaskContext) -> list[int]:
        got = await asyncio.gather(*(ctx.call(lookup, i) for i in range(5)), return_exceptions=True)
        outcomes.append([type(o).__name__ if isinstance(o, BaseException) else o for o in got])
        for o in got:
            if isinstance(o, BaseException):
                raise o
        return list(got)

    original = app.store.append
    failing = {"left": 1}

    def append(tenant: str, task_id: str, events: Any, *args: Any, **kwargs: Any) -> Any:
        if len(events) == 5 and failing["left"]:
            failing["left"] -= 1
            raise tether.StoreUnavailableError("disk went away")
        return original(tenant, task_id, events, *args, **kwargs)

    app.store.append = append  # type: ignore[method-assign]
    with pytest.raises(tether.StoreUnavailableError):
        app.run(batch, task_id="fault")
    assert failing["left"] == 0  # the five results were one transaction
    assert outcomes == [["StoreUnavailableError"] * 5]  # every branch heard the fault, not only the first
    assert app.state("fault").calls == ()  # nothing of the batch was written
    assert app.resume("fault").output == [0, 1, 2, 3, 4]
    assert outcomes[1] == [0, 1, 2, 3, 4]
    assert runs == {i: 2 for i in range(5)}
    assert app.replay("fault").clean


def test_a_finished_run_frees_its_context_without_the_cycle_collector(app: tether.App) -> None:
    """Nothing a run builds keeps its context (and the record it walked) in a reference cycle: a
    finished context is freed at once, not left for the cycle collector, whose passes grow with
    the heap (a loop of long tasks slowed threefold)."""
    import gc
    import weakref

    contexts: list[weakref.ref[Any]] = []

    @app.tool(readonly=True)
    async def lookup(i: int) -> int:
        return i

    @app.tool
    def send(i: int) -> int:
        return i

    @app.task
    async def fan_out(ctx: tether.AsyncTaskContext) -> int:
        contexts.append(weakref.ref(ctx))
        ctx.session.add("user", "hi")
        return sum(await asyncio.gather(*(ctx.call(lookup, i) for i in range(4))))

    @app.task
    def one_by_one(ctx: tether.TaskContext) -> int:
        contexts.append(weakref.ref(ctx))
        return sum(ctx.map(send, range(3)))

    gc.collect()
    gc.disable()
    try:
        assert app.run(fan_out).output == 6
        assert app.run(one_by_one).output == 3
        assert [ref() for ref in contexts] == [None, None]
    finally:
        gc.enable()
