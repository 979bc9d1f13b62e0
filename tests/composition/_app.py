"""The app the composition test runs: in its own process (``build``) and in ``tether worker
tests.composition._app:app`` processes, which read the store and the sink from the environment.

Four task types, each deterministic given its inputs and its recorded results:

* ``pipeline`` (async): sequential calls, an ``asyncio.gather`` of a side effect, a flaky side effect
  and a read, a reservation (compensated on failure or cancel), conversation appends;
* ``approval`` (async): a wait inside one gather branch (then a refund in that branch), beside a
  sibling branch that sends an email and a read; then more calls;
* ``chat`` (async): an agent loop over ``ctx.session`` (window -> model -> append), with gathered
  tool calls, waits for the user, its own compaction, optionally in a session shared by several tasks;
* ``batch`` (sync): ``ctx.map`` of side effects, a flaky call, steps, a wait, conversation appends.

Every message a task appends is ``"{tag}:{what}"`` (``tag`` is an input, kept by forks), so the test
knows the list each task writes, in order (:func:`expected_messages`).

Every side effect runs ``_effect``: one row in the sink (a SQLite file) per execution, with the
task that ran it, the logical call (its ``label``), its idempotency key, the process and the attempt.
A flaky tool fails before its effect (an API refusing the request), by a hash of its key and attempt.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import sqlite3
import time
from typing import Any

import tether

TTL = float(os.environ.get("TETHER_COMPOSITION_TTL", "5"))
INLINE_WAIT = 0.1


class TransientError(Exception):
    """A flaky API's refusal: nothing happened, try again."""


def _hash(*parts: object) -> int:
    return int.from_bytes(hashlib.sha256(":".join(map(str, parts)).encode()).digest()[:8], "big")


def fails(key: str, attempt: int) -> bool:
    """Whether a flaky call's attempt is refused. One call in five is refused four times (more than
    its three attempts: the task fails, and a retry's fresh round gets through); the others are
    refused a third of the time, on their first two attempts only."""
    if _hash(key, "bad") % 5 == 0:
        return attempt <= 4
    return attempt <= 2 and _hash(key, attempt) % 3 == 0


def sink_connect(sink: str) -> sqlite3.Connection:
    conn = sqlite3.connect(sink, isolation_level=None, timeout=60)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute(
        "CREATE TABLE IF NOT EXISTS raw (id INTEGER PRIMARY KEY, task TEXT, label TEXT, key TEXT, pid INTEGER,"
        " attempt INTEGER, at REAL)"
    )
    conn.execute("CREATE TABLE IF NOT EXISTS refused (task TEXT, label TEXT, key TEXT, pid INTEGER, attempt INTEGER)")
    return conn


def build(url: str, sink: str, *, ttl: float = TTL) -> tether.App:
    """The app, its tasks and tools registered, on ``url``; side effects go to the file ``sink``."""
    app = tether.App(url, lease_ttl=ttl, inline_wait=INLINE_WAIT)

    def conn() -> sqlite3.Connection:
        return sink_connect(sink)  # a connection per effect: safe across ctx.map's threads and forks

    def _effect(tag: str, label: str) -> dict[str, Any]:
        call = tether.current_call()
        c = conn()
        try:
            c.execute(
                "INSERT INTO raw (task, label, key, pid, attempt, at) VALUES (?, ?, ?, ?, ?, ?)",
                (call.task_id, label, call.key, os.getpid(), call.attempt, time.time()),
            )
        finally:
            c.close()
        return {"tag": tag, "label": label, "done": True}

    def _refuse_maybe(label: str) -> None:
        call = tether.current_call()
        if fails(call.key, call.attempt):
            c = conn()
            try:
                c.execute(
                    "INSERT INTO refused VALUES (?, ?, ?, ?, ?)",
                    (call.task_id, label, call.key, os.getpid(), call.attempt),
                )
            finally:
                c.close()
            raise TransientError(f"{label}: refused (attempt {call.attempt})")

    # ------------------------------------------------------------------ tools
    @app.tool(readonly=True)
    async def lookup(tag: str, label: str) -> str:
        await asyncio.sleep(0.001 * (_hash(tag, label) % 5))
        return f"{label}:found"

    @app.tool
    async def effect(tag: str, label: str) -> dict[str, Any]:
        await asyncio.sleep(0.001 * (_hash(tag, label) % 4))
        return _effect(tag, label)

    @app.tool(
        retry=tether.Retry(
            max_attempts=3, backoff=0.02, multiplier=6.0, max_backoff=0.5, jitter=0, retry_on=(TransientError,)
        )
    )
    async def flaky(tag: str, label: str) -> dict[str, Any]:
        _refuse_maybe(label)
        return _effect(tag, label)

    @app.tool
    def release(result: dict[str, Any]) -> dict[str, Any]:
        return _effect(result["tag"], "undo:" + result["label"])

    @app.tool(compensate=release)
    def reserve(tag: str, label: str) -> dict[str, Any]:
        return _effect(tag, label)

    @app.tool(compensate=release)
    async def reserve_async(tag: str, label: str) -> dict[str, Any]:
        return _effect(tag, label)

    @app.tool(readonly=True)
    async def model(tag: str, turn: int, window: list[dict[str, Any]]) -> dict[str, Any]:
        """A scripted model: its answer depends on the turn only (the window it is shown is recorded)."""
        await asyncio.sleep(0.001 * (turn % 3))
        return {"content": f"{tag}:a{turn}", "seen": len(window)}

    @app.tool
    def item_effect(item: dict[str, Any]) -> dict[str, Any]:
        time.sleep(0.001 * (_hash(item["tag"], item["label"]) % 4))
        return _effect(item["tag"], item["label"])

    @app.tool(readonly=True, retry=tether.Retry(max_attempts=3, backoff=0.01, jitter=0, retry_on=(TransientError,)))
    def item_lookup(item: dict[str, Any]) -> str:
        call = tether.current_call()
        if _hash(call.key, call.attempt) % 4 == 0 and call.attempt == 1:
            raise TransientError("lookup refused once")
        return f"{item['label']}:found"

    @app.tool(retry=tether.Retry(max_attempts=3, backoff=0.02, jitter=0, retry_on=(TransientError,)))
    def sync_flaky(tag: str, label: str) -> dict[str, Any]:
        _refuse_maybe(label)
        return _effect(tag, label)

    # ------------------------------------------------------------------ tasks
    @app.task(name="pipeline")
    async def pipeline(ctx: tether.AsyncTaskContext, tag: str, width: int) -> list[Any]:
        ctx.session.add("user", f"{tag}:start")
        first = await ctx.call(lookup, tag, "l0")
        await ctx.call(reserve_async, tag, "r0")
        batch = await asyncio.gather(
            *(ctx.call(effect, tag, f"e{i}") for i in range(width)),
            ctx.call(flaky, tag, "f0"),
            ctx.call(lookup, tag, "l1"),
        )
        ctx.session.add("assistant", f"{tag}:middle")
        last = await ctx.call(effect, tag, "e-last")
        ctx.session.add("assistant", f"{tag}:end")
        return [first, len(batch), last["label"]]

    @app.task(name="approval")
    async def approval(ctx: tether.AsyncTaskContext, tag: str) -> list[Any]:
        await ctx.call(model, tag, 0, [])
        ctx.session.add("user", f"{tag}:asked")

        async def approve_then_refund() -> Any:
            ok = await ctx.wait_for_input("approve", prompt=f"refund {tag}?")
            if ok:
                return (await ctx.call(effect, tag, "refund"))["label"]
            return None

        async def email() -> str:
            return str((await ctx.call(effect, tag, "email"))["label"])

        done = await asyncio.gather(approve_then_refund(), email(), ctx.call(lookup, tag, "policy"))
        ctx.session.add("assistant", f"{tag}:decided")
        await ctx.call(flaky, tag, "notify")
        return list(done)

    @app.task(name="chat")
    async def chat(
        ctx: tether.AsyncTaskContext, tag: str, turns: int, waits: list[int], tools: list[int], compact: bool = True
    ) -> int:
        ctx.session.add("user", f"{tag}:u0")
        for turn in range(turns):
            window = ctx.session.window(max_tokens=4000, keep_last=2).to_openai()
            reply = await ctx.call(model, tag, turn, window)
            if turn in tools:
                ids = [f"{tag}-c{turn}a", f"{tag}-c{turn}b"]
                ctx.session.add(
                    "assistant",
                    reply["content"],
                    tool_calls=[{"id": i, "name": "lookup", "arguments": {"n": n}} for n, i in enumerate(ids)],
                )
                results = await asyncio.gather(
                    ctx.call(lookup, tag, f"t{turn}"), ctx.call(effect, tag, f"t{turn}-send")
                )
                ctx.session.add_many(
                    [
                        {"role": "tool", "tool_call_id": ids[0], "content": f"{tag}:r{turn}a"},
                        {"role": "tool", "tool_call_id": ids[1], "content": f"{tag}:r{turn}b"},
                    ]
                )
                del results
            else:
                ctx.session.add("assistant", reply["content"])
            if turn in waits:
                await ctx.wait_for_input(f"user-{turn}", prompt=f"{tag} turn {turn}")
                ctx.session.add("user", f"{tag}:u{turn + 1}")
            if compact and turn % 3 == 2:
                ctx.session.compact(keep_last=2)
        return turns

    @app.task(name="batch")
    def batch(ctx: tether.TaskContext, tag: str, n: int, wait: bool) -> int:
        ctx.plan(["fan-out", "check", "finish"])
        ctx.session.add("user", f"{tag}:go")
        with ctx.step("fan-out"):
            items = [{"tag": tag, "label": f"m{i}"} for i in range(n)]
            ctx.map(item_effect, items, max_concurrency=3)
            ctx.map(item_lookup, items)
        with ctx.step("check"):
            ctx.call(sync_flaky, tag, "s0")
            ctx.session.add("assistant", f"{tag}:checked")
        if wait:
            ctx.wait_for_input("confirm", prompt=f"{tag}: finish?")
            ctx.session.add("user", f"{tag}:confirmed")
        with ctx.step("finish"):
            ctx.call(reserve, tag, "r-last")
        return n

    return app


def expected_messages(task_type: str, inputs: dict[str, Any]) -> list[str]:
    """The contents of the messages a task of this type appends, in order, when it completes."""
    tag = inputs["tag"]
    if task_type == "pipeline":
        return [f"{tag}:start", f"{tag}:middle", f"{tag}:end"]
    if task_type == "approval":
        return [f"{tag}:asked", f"{tag}:decided"]
    if task_type == "chat":
        out = [f"{tag}:u0"]
        for turn in range(inputs["turns"]):
            out.append(f"{tag}:a{turn}")
            if turn in inputs["tools"]:
                out += [f"{tag}:r{turn}a", f"{tag}:r{turn}b"]
            if turn in inputs["waits"]:
                out.append(f"{tag}:u{turn + 1}")
        return out
    if task_type == "batch":
        return [f"{tag}:go", f"{tag}:checked", *([f"{tag}:confirmed"] if inputs["wait"] else [])]
    raise ValueError(task_type)


def operations(task_type: str, inputs: dict[str, Any]) -> int:
    """How many things a task of this type records in a clean run (calls, waits, appends, steps):
    the yardstick for the bound on its events."""
    if task_type == "pipeline":
        return 3 + inputs["width"] + 2 + 3 + 1
    if task_type == "approval":
        return 1 + 1 + 3 + 1 + 1 + 1
    if task_type == "chat":
        turns = inputs["turns"]
        return 1 + turns * 3 + len(inputs["tools"]) * 3 + len(inputs["waits"]) * 2 + turns // 3
    if task_type == "batch":
        return 1 + 1 + 2 * inputs["n"] + 6 + 2 + 2 * bool(inputs["wait"])
    raise ValueError(task_type)


def __getattr__(name: str) -> Any:
    """``app`` for ``tether worker tests.composition._app:app``: built from the environment once."""
    if name == "app":
        built = build(os.environ["TETHER_COMPOSITION_URL"], os.environ["TETHER_COMPOSITION_SINK"])
        globals()["app"] = built
        return built
    raise AttributeError(name)
