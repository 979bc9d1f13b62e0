"""An agent loop run in a child process that kills itself with SIGKILL at a chosen point.

Usage: python _loop_agent.py URL SINK TASK_ID KIND:K MODE

Three rounds of: read the conversation's window, ask a scripted model, which answers
with six tool calls, run the six in parallel, append the results to the conversation.
MODE ``async`` runs them with ``asyncio.gather`` (two of the six are branches that
await a lookup and then send: their second call's ordinal depends on the order the
lookups finished); MODE ``threads`` runs them with ``ctx.map`` in a sync task. Every
tool takes a random time, so calls finish in a different order in every process.

Checkpoints are passed after every commit to the task log and to the session, inside
tools before and after their effect, inside flaky and readonly tools, and halfway
through every sleep (backoffs and the tools' own). The process SIGKILLs itself at the
K-th checkpoint of KIND (``none:0`` never does, and writes how many of each kind it
passed to SINK.tally). ``replay:0`` replays the task instead and prints the report.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import sqlite3
import sys
import threading
import time
from typing import Any

import tether
from tether.log import TaskLog
from tether.log.streams import Stream

DB, SINK, TASK_ID = sys.argv[1], sys.argv[2], sys.argv[3]
KILL_KIND, _, KILL_AT = sys.argv[4].partition(":")
MODE = sys.argv[5]
ROUNDS = 3
_hits: dict[str, int] = {}
_hits_lock = threading.Lock()
_rng = random.Random()  # a different finishing order in every process


def checkpoint(where: str) -> None:
    with _hits_lock:
        _hits[where] = _hits.get(where, 0) + 1
        hit = where == KILL_KIND and _hits[where] == int(KILL_AT)
    if hit:
        with open(SINK + ".killed", "a") as note:
            note.write(where + "\n")
        os.kill(os.getpid(), signal.SIGKILL)


_append = TaskLog.append


def append_then_maybe_die(self: TaskLog, *args: Any, **kwargs: Any) -> Any:
    version = _append(self, *args, **kwargs)
    checkpoint("after_commit")
    return version


TaskLog.append = append_then_maybe_die  # type: ignore[method-assign]

_stream_append = Stream.append


def session_append_then_maybe_die(self: Stream, *args: Any, **kwargs: Any) -> Any:
    version = _stream_append(self, *args, **kwargs)
    checkpoint("after_session_append")
    return version


Stream.append = session_append_then_maybe_die  # type: ignore[method-assign]

_sleep, _async_sleep = time.sleep, asyncio.sleep


def sleep_then_maybe_die(seconds: float) -> None:
    _sleep(seconds / 2)
    checkpoint("in_sleep")
    _sleep(seconds / 2)


async def async_sleep_then_maybe_die(seconds: float, result: Any = None) -> Any:
    await _async_sleep(seconds / 2)
    checkpoint("in_sleep")
    return await _async_sleep(seconds / 2, result)


time.sleep = sleep_then_maybe_die
asyncio.sleep = async_sleep_then_maybe_die  # type: ignore[assignment]


class Sink:
    """The outside world: every run of a tool, every delivery, one effect per idempotency key."""

    def __init__(self, path: str) -> None:
        self.conn = sqlite3.connect(path, isolation_level=None, timeout=30, check_same_thread=False)
        self.lock = threading.Lock()
        self.conn.execute("CREATE TABLE IF NOT EXISTS runs (key TEXT, tool TEXT)")
        self.conn.execute("CREATE TABLE IF NOT EXISTS raw (key TEXT, payload TEXT)")
        self.conn.execute("CREATE TABLE IF NOT EXISTS effects (key TEXT PRIMARY KEY, payload TEXT)")

    def ran(self, tool: str) -> str:
        key = tether.current_call().key
        with self.lock:
            self.conn.execute("INSERT INTO runs VALUES (?, ?)", (key, tool))
        return key

    def deliver(self, payload: Any) -> dict[str, Any]:
        key = tether.current_call().key
        checkpoint("in_tool_before_effect")
        body = json.dumps(payload, sort_keys=True)
        with self.lock:
            self.conn.execute("INSERT INTO raw VALUES (?, ?)", (key, body))
            self.conn.execute("INSERT OR IGNORE INTO effects VALUES (?, ?)", (key, body))
        checkpoint("in_tool_after_effect")
        return {"delivered": payload}


app = tether.App(DB, lease_ttl=5.0)
sink = Sink(SINK)


def script(round_no: int) -> dict[str, Any]:
    """What the scripted model answers in round ``round_no``: six tool calls, or the final answer."""
    if round_no == ROUNDS:
        return {"role": "assistant", "content": "All done.", "tool_calls": []}
    kinds = ["lookup", "flaky", "send", "lookup_then_send", "flaky", "lookup_then_send"]
    calls = [
        {"id": f"r{round_no}c{i}", "name": kind, "arguments": {"q": f"r{round_no}-{i}"}}
        for i, kind in enumerate(kinds)
    ]
    return {"role": "assistant", "content": f"round {round_no}", "tool_calls": calls}


def _duration() -> float:
    return _rng.uniform(0.0, 0.012)


# ---------------------------------------------------------------- the async agent
@app.tool(readonly=True)
async def model(round_no: int, window: list[dict[str, Any]]) -> dict[str, Any]:
    sink.ran("model")
    checkpoint("in_tool_readonly")
    return script(round_no)


@app.tool(readonly=True)
async def lookup(q: str) -> str:
    sink.ran("lookup")
    checkpoint("in_tool_readonly")
    await asyncio.sleep(_duration())
    return f"found {q}"


@app.tool(retry=tether.Retry(max_attempts=4, backoff=0.02, jitter=0))
async def flaky(q: str) -> str:
    sink.ran("flaky")
    checkpoint("in_tool_flaky")
    await asyncio.sleep(_duration())
    if tether.current_call().attempt < 2:
        raise TimeoutError("the search API timed out")
    return f"flaky {q}"


@app.tool(retry=tether.Retry(max_attempts=3, backoff=0.02, jitter=0))
async def send(q: str) -> dict[str, Any]:
    sink.ran("send")
    await asyncio.sleep(_duration())
    return sink.deliver({"q": q})


async def run_tool(ctx: tether.AsyncTaskContext, call: dict[str, Any]) -> Any:
    q = call["arguments"]["q"]
    if call["name"] == "lookup_then_send":
        found = await ctx.call(lookup, q)
        return await ctx.call(send, found)
    tool = {"lookup": lookup, "flaky": flaky, "send": send}[call["name"]]
    return await ctx.call(tool, q)


@app.task
async def support_loop(ctx: tether.AsyncTaskContext) -> dict[str, Any]:
    if not ctx.session.messages():
        ctx.session.add("user", "Please sort out my three orders.")
    for round_no in range(ROUNDS + 1):
        window = ctx.session.window(max_tokens=100_000).to_openai()
        reply = await ctx.call(model, round_no, window)
        ctx.session.add_many([{"role": "assistant", "content": reply["content"], "tool_calls": reply["tool_calls"]}])
        if not reply["tool_calls"]:
            break
        results = await asyncio.gather(*(run_tool(ctx, call) for call in reply["tool_calls"]))
        ctx.session.add_many(
            [
                {"role": "tool", "tool_call_id": call["id"], "content": json.dumps(result, sort_keys=True)}
                for call, result in zip(reply["tool_calls"], results, strict=True)
            ]
        )
    return {"messages": len(ctx.session.messages())}


# ---------------------------------------------------------------- the same with threads
@app.tool(readonly=True)
def model_sync(round_no: int, window: list[dict[str, Any]]) -> dict[str, Any]:
    sink.ran("model")
    checkpoint("in_tool_readonly")
    return script(round_no)


@app.tool(retry=tether.Retry(max_attempts=4, backoff=0.02, jitter=0))
def tool_sync(call: dict[str, Any]) -> Any:
    kind, q = call["name"], call["arguments"]["q"]
    sink.ran(kind)
    if kind in ("lookup", "lookup_then_send"):
        checkpoint("in_tool_readonly")
    time.sleep(_duration())
    if kind == "flaky":
        checkpoint("in_tool_flaky")
        if tether.current_call().attempt < 2:
            raise TimeoutError("the search API timed out")
        return f"flaky {q}"
    if kind == "lookup":
        return f"found {q}"
    return sink.deliver({"q": q if kind == "send" else f"found {q}"})


@app.task
def support_loop_threads(ctx: tether.TaskContext) -> dict[str, Any]:
    if not ctx.session.messages():
        ctx.session.add("user", "Please sort out my three orders.")
    for round_no in range(ROUNDS + 1):
        window = ctx.session.window(max_tokens=100_000).to_openai()
        reply = ctx.call(model_sync, round_no, window)
        ctx.session.add_many([{"role": "assistant", "content": reply["content"], "tool_calls": reply["tool_calls"]}])
        if not reply["tool_calls"]:
            break
        results = ctx.map(tool_sync, reply["tool_calls"], max_concurrency=6)
        ctx.session.add_many(
            [
                {"role": "tool", "tool_call_id": call["id"], "content": json.dumps(result, sort_keys=True)}
                for call, result in zip(reply["tool_calls"], results, strict=True)
            ]
        )
    return {"messages": len(ctx.session.messages())}


if __name__ == "__main__" and KILL_KIND == "replay":
    report = app.replay(TASK_ID)
    print(json.dumps({"clean": report.clean, "report": str(report)}))
elif __name__ == "__main__":
    task = support_loop if MODE == "async" else support_loop_threads
    run = app.run(task, task_id=TASK_ID)
    with open(SINK + ".tally", "w") as tally:
        json.dump(_hits, tally)
    print(json.dumps({"status": run.status.value}))
