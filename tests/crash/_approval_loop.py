"""An agent loop with a person in the batch, run in a child that SIGKILLs itself at a chosen point.

Usage: python _approval_loop.py URL WORK KIND:K [replay]

The loop keeps its conversation in ``ctx.session`` and asks a scripted model (no network), which
answers with six parallel tool calls: two readonly searches, an email (side-effecting, retried),
a weather API that fails twice and then works, a charge made through ``app.ledger.once``, and a
question for a person (``ctx.wait_for_input`` in the batch). Once approved, it asks for a booking
(``on_unknown="raise"``: at most once), another email and a search, then answers. Every real side
effect appends a line to ``WORK/effects.log`` (tool, key, what); the weather API counts its real
runs in ``WORK/weather.count``.

Checkpoints are passed after every commit to the task log and to the session, before and after
every effect, and inside the model and the searches. The process SIGKILLs itself at the K-th
checkpoint of KIND (``none:0`` never does); each life appends how many of each kind it passed to
``WORK/tally`` (one JSON line a life). ``replay`` replays the task and prints the report.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import sys
from typing import Any

from pydantic import BaseModel

import tether
from tether.log import TaskLog
from tether.log.streams import Stream

URL, WORK = sys.argv[1], sys.argv[2]
KILL_KIND, _, KILL_AT = sys.argv[3].partition(":")
REPLAY = sys.argv[4:] == ["replay"]
_hits: dict[str, int] = {}
_rng = random.Random()  # another finishing order in every process


def checkpoint(where: str) -> None:
    _hits[where] = _hits.get(where, 0) + 1
    if where == KILL_KIND and _hits[where] == int(KILL_AT):
        with open(os.path.join(WORK, "killed"), "a") as note:
            note.write(where + "\n")
        os.kill(os.getpid(), signal.SIGKILL)


def _after(method: Any, where: str) -> Any:
    def patched(*args: Any, **kwargs: Any) -> Any:
        done = method(*args, **kwargs)
        checkpoint(where)
        return done

    return patched


TaskLog.append = _after(TaskLog.append, "commit")  # type: ignore[method-assign]
TaskLog.append_together = _after(TaskLog.append_together, "commit")  # type: ignore[method-assign]
Stream.append = _after(Stream.append, "session")  # type: ignore[method-assign]


def effect(tool: str, what: str) -> None:
    """A real side effect: one line in effects.log, under the call's key."""
    checkpoint("before_effect")
    line = f"{tool}\t{tether.current_call().key}\t{what}\n"
    fd = os.open(os.path.join(WORK, "effects.log"), os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    os.write(fd, line.encode())
    os.close(fd)
    checkpoint("after_effect")


app = tether.App(URL, lease_ttl=5.0)


class Approval(BaseModel):
    approved: bool
    note: str = ""


def _call(call_id: str, name: str, **args: Any) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}


@app.tool(readonly=True)
def model(messages: list[dict[str, Any]]) -> dict[str, Any]:
    """The scripted model: answers from the conversation it is shown, in OpenAI's shape."""
    checkpoint("in_model")
    results = [m for m in messages if m["role"] == "tool"]
    if not results:
        calls = [
            _call("c1", "search", q="flights NYC"),
            _call("c2", "send_email", to="alice", body="We are on it."),
            _call("c3", "weather", city="NYC"),
            _call("c4", "charge", cents=4200),
            _call("c5", "search", q="hotels NYC"),
            _call("c6", "ask_human", question="Book BA117 for 420?"),
        ]
        return {"role": "assistant", "content": "Let me check a few things.", "tool_calls": calls}
    if len(results) == 6:
        calls = [_call("d1", "send_email", to="alice", body="Booking now."), _call("d2", "search", q="restaurants")]
        if json.loads(results[-1]["content"])["approved"]:
            calls.insert(1, _call("d3", "book", item="BA117"))
        return {"role": "assistant", "content": "Booking.", "tool_calls": calls}
    return {"role": "assistant", "content": f"All set ({len(results)} results)."}


@app.tool(readonly=True)
async def search(q: str) -> str:
    checkpoint("in_search")
    await asyncio.sleep(_rng.uniform(0, 0.01))
    return f"results for {q}"


@app.tool(retry=tether.Retry(max_attempts=3, backoff=0.01, jitter=0))
async def send_email(to: str, body: str) -> dict[str, Any]:
    await asyncio.sleep(_rng.uniform(0, 0.01))
    effect("send_email", f"{to}: {body}")
    return {"sent_to": to}


@app.tool(retry=tether.Retry(max_attempts=4, backoff=0.02, jitter=0))
async def weather(city: str) -> str:
    effect("weather", city)
    with open(os.path.join(WORK, "weather.count"), "a+") as count:
        count.seek(0)
        runs = len(count.read())
        count.write("x")
    if runs < 2:  # the API times out twice, then answers
        raise TimeoutError(f"the weather API timed out ({runs + 1})")
    return f"sunny in {city}"


@app.tool
def charge(cents: int) -> dict[str, Any]:
    def pay() -> dict[str, Any]:
        effect("charge", str(cents))
        return {"charged": cents}

    return app.ledger.once(tether.current_call().key, pay)


@app.tool(on_unknown="raise")
async def book(item: str) -> dict[str, Any]:
    effect("book", item)
    return {"booked": item}


TOOLS = {"search": search, "send_email": send_email, "weather": weather, "charge": charge, "book": book}


async def run_tool(ctx: tether.AsyncTaskContext, call: dict[str, Any]) -> Any:
    name, args = call["function"]["name"], json.loads(call["function"]["arguments"])
    if name == "ask_human":
        answer = await ctx.wait_for_input("approve", prompt=args["question"], schema=Approval)
        return answer.model_dump()
    return await ctx.call(TOOLS[name], **args)


@app.task(name="trip")
async def trip(ctx: tether.AsyncTaskContext, goal: str) -> str:
    if not ctx.session.messages():
        prompt = {"role": "system", "content": "You are a travel agent."}
        ctx.session.add_many([prompt, {"role": "user", "content": goal}])
    while True:
        reply = await ctx.call(model, ctx.session.window(max_tokens=8_000).to_openai())
        ctx.session.add(reply)
        calls = reply.get("tool_calls") or []
        if not calls:
            return str(reply["content"])
        results = await asyncio.gather(*(run_tool(ctx, call) for call in calls))
        ctx.session.add_many(
            [
                {"role": "tool", "tool_call_id": call["id"], "content": json.dumps(result, sort_keys=True)}
                for call, result in zip(calls, results, strict=True)
            ]
        )


if __name__ == "__main__" and REPLAY:
    report = app.replay("trip-1")
    print(json.dumps({"clean": report.clean, "report": str(report)}))
elif __name__ == "__main__":
    handle = app.run(trip, "Book me a trip to NYC", task_id="trip-1")
    with open(os.path.join(WORK, "tally"), "a") as tally:
        tally.write(json.dumps(_hits) + "\n")
    print(json.dumps({"status": handle.status.value}))
