"""The tasks the serve tests inspect: a trip that waits for approval, a task that fails until fixed,
a chat that talks in its session, and one whose assistant calls a tool. Workers run them; the
server only has the store."""

from __future__ import annotations

from typing import Any

import tether

APPROVAL = {
    "type": "object",
    "properties": {
        "yes": {"type": "boolean", "title": "approve"},
        "note": {"type": "string", "title": "note"},
    },
    "required": ["yes"],
}


def build(store: str | tether.Store) -> tuple[tether.App, dict[str, bool]]:
    """An app over ``store`` with the test tasks, and the switch that makes ``broken`` work."""
    app = tether.App(store, inline_wait=0)
    flags = {"fail": True}

    @app.tool
    def lookup(city: str) -> dict[str, Any]:
        return {"city": city, "price": 120}

    @app.tool(retry=tether.Retry(max_attempts=2, backoff=0))
    def flaky(x: int) -> int:
        if flags["fail"]:
            raise RuntimeError("the booking service is down")
        return x * 2

    @app.task
    def trip(ctx: tether.TaskContext, city: str) -> dict[str, Any]:
        ctx.plan(["search", "approve", "book"])
        with ctx.step("search"):
            offer = ctx.call(lookup, city=city)
            ctx.decide("offer", choice=offer, rationale="the only offer")
            ctx.observe("price", offer["price"], source="lookup")
        with ctx.step("approve"):
            answer = ctx.wait_for_input("approve", prompt=f"Book {city} for {offer['price']}?", schema=APPROVAL)
        with ctx.step("book"):
            booked = bool(answer["yes"])
        return {"booked": booked, "note": answer.get("note")}

    @app.task
    def broken(ctx: tether.TaskContext, x: int) -> int:
        return int(ctx.call(flaky, x=x))

    @app.task
    def chat(ctx: tether.TaskContext, text: str) -> str:
        ctx.session.add("user", text)
        ctx.session.add("assistant", f"you said {text}")
        return text

    @app.task
    def talk(ctx: tether.TaskContext, text: str) -> str:
        ctx.session.add("user", text)  # a task started without a session: the one made for it
        more = ctx.wait_for_input("more", prompt="Anything else?")
        ctx.session.add("user", str(more))
        return text

    @app.task
    def tools(ctx: tether.TaskContext, city: str) -> str:
        ctx.session.add("user", f"weather in {city}?")
        call = {"id": "call_w1", "name": "weather", "arguments": {"city": city}}
        ctx.session.add("assistant", None, tool_calls=[call])
        ctx.session.add("tool", "18°C and sunny", tool_call_id="call_w1")
        ctx.session.add("assistant", f"It is 18°C in {city}.")
        return city

    return app, flags


def work(app: tether.App) -> int:
    """Run every runnable task to its next stop, here."""
    return app.run_worker(idle_exit=True, poll=0.05)
