"""A trip-booking agent run in a child process that kills itself with SIGKILL at a chosen point.

Usage: python _agent.py URL SINK TASK_ID KIND:K

Checkpoints of several kinds are passed on the way: after every commit to the task log,
inside a tool before and after its effect reaches the sink, in the middle of a backoff.
The process SIGKILLs itself at the K-th checkpoint of KIND (``none:0`` never does, and
writes how many of each kind it passed to SINK.tally). The parent picks KIND and K at random.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import sys
import time
from typing import Any

import tether
from tether.log import TaskLog

DB, SINK, TASK_ID = sys.argv[1], sys.argv[2], sys.argv[3]
KILL_KIND, _, KILL_AT = sys.argv[4].partition(":")
_hits: dict[str, int] = {}


def checkpoint(where: str) -> None:
    _hits[where] = _hits.get(where, 0) + 1
    if where == KILL_KIND and _hits[where] == int(KILL_AT):
        with open(SINK + ".killed", "a") as note:
            note.write(where + "\n")
        os.kill(os.getpid(), signal.SIGKILL)


_append = TaskLog.append


def append_then_maybe_die(self: TaskLog, *args: Any, **kwargs: Any) -> Any:
    state = _append(self, *args, **kwargs)
    checkpoint("after_commit")
    return state


TaskLog.append = append_then_maybe_die  # type: ignore[method-assign]

_sleep = time.sleep


def sleep_then_maybe_die(seconds: float) -> None:
    _sleep(seconds / 2)
    checkpoint("in_backoff")
    _sleep(seconds / 2)


time.sleep = sleep_then_maybe_die


class Sink:
    """The outside world: records every delivery, keeps one effect per idempotency key."""

    def __init__(self, path: str) -> None:
        self.conn = sqlite3.connect(path, isolation_level=None, timeout=30)
        self.conn.execute("CREATE TABLE IF NOT EXISTS raw (key TEXT, kind TEXT, payload TEXT)")
        self.conn.execute("CREATE TABLE IF NOT EXISTS effects (key TEXT PRIMARY KEY, kind TEXT, payload TEXT)")

    def deliver(self, kind: str, payload: Any) -> dict[str, Any]:
        key = tether.current_call().key
        checkpoint("in_tool_before_effect")
        body = json.dumps(payload, sort_keys=True)
        self.conn.execute("INSERT INTO raw VALUES (?, ?, ?)", (key, kind, body))
        self.conn.execute("INSERT OR IGNORE INTO effects VALUES (?, ?, ?)", (key, kind, body))
        checkpoint("in_tool_after_effect")
        return {"confirmation": f"{kind}-{key[-6:]}"}


app = tether.App(DB, lease_ttl=5.0)
sink = Sink(SINK)


@app.tool(readonly=True)
def search_flights(dest: str) -> list[dict[str, Any]]:
    checkpoint("in_tool_readonly")
    return [{"id": "BA117", "price": 420}, {"id": "AA100", "price": 515}]


@app.tool(retry=tether.Retry(max_attempts=4, backoff=0.04, jitter=0))
def price_quote(flight: str) -> int:
    checkpoint("in_tool_flaky")
    if tether.current_call().attempt < 3:
        raise TimeoutError("pricing API timed out")
    return 420


@app.tool(compensate=lambda hold: None)
def hold_seat(flight: str) -> dict[str, Any]:
    return sink.deliver("hold", {"flight": flight})


@app.tool
def charge_card(amount: int) -> dict[str, Any]:
    key = tether.current_call().key
    return app.ledger.once(key, lambda: sink.deliver("charge", {"amount": amount}))


@app.tool(retry=tether.Retry(max_attempts=3, backoff=0.02, jitter=0))
def send_invite(to: str, flight: str) -> dict[str, Any]:
    return sink.deliver("invite", {"to": to, "flight": flight})


@app.task
def book_trip(ctx: tether.TaskContext, dest: str) -> dict[str, Any]:
    ctx.plan(["search", "price", "pick", "hold", "charge", "invite"])
    with ctx.step("search"):
        flights = ctx.call(search_flights, dest)
    with ctx.step("price"):
        price = ctx.call(price_quote, flights[0]["id"])
        ctx.observe("price", price, source="price_quote")
    with ctx.step("pick"):
        best = ctx.decide("flight", flights[0], rationale="cheapest nonstop", alternatives=flights[1:])
    with ctx.step("hold"):
        hold = ctx.call(hold_seat, best["id"])
    with ctx.step("charge"):
        receipt = ctx.call(charge_card, price)
    with ctx.step("invite"):
        invite = ctx.call(send_invite, "me@example.com", best["id"])
    return {"hold": hold, "receipt": receipt, "invite": invite}


if __name__ == "__main__":
    run = app.run(book_trip, "NYC", task_id=TASK_ID)
    with open(SINK + ".tally", "w") as tally:
        json.dump(_hits, tally)
    print(json.dumps({"status": run.status.value}))
