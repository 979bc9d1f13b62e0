"""``tether demo``: the story tether exists for, for real, offline.

A 9-step trip-booking agent with 4 tools runs in a child process. At step 6
(holding the seat, a slow call to the airline) the parent kills the child with
SIGKILL. A second process resumes the task from its log: steps 1–5 return their
recorded results without running, the interrupted hold is retried with the same
idempotency key (the airline keeps one hold per key), and exactly one calendar
invite goes out. The planner is scripted; no model or network is involved.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import tether
from tether.store.base import redact_url

STEPS = ["understand", "search", "shortlist", "price", "choose", "hold", "invite", "itinerary", "summary"]


class World:
    """The outside world, in files: the airline's holds and the calendar's invites, keyed by idempotency key."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def event(self, **fields: Any) -> None:
        with open(self.folder / "timeline.jsonl", "a") as out:
            out.write(json.dumps({"t": time.time(), "pid": os.getpid(), **fields}) + "\n")

    def record(self, system: str, key: str, payload: dict[str, Any]) -> bool:
        """Deliver to an external system that deduplicates by key; True if it was new there."""
        path = self.folder / f"{system}.json"
        seen = json.loads(path.read_text()) if path.exists() else {}
        new = key not in seen
        seen.setdefault(key, payload)
        path.write_text(json.dumps(seen))
        return new

    def timeline(self) -> list[dict[str, Any]]:
        path = self.folder / "timeline.jsonl"
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]

    def count(self, system: str) -> int:
        path = self.folder / f"{system}.json"
        return len(json.loads(path.read_text())) if path.exists() else 0


def build_app(url: str, world: World) -> tuple[tether.App, Any]:
    app = tether.App(url)

    @app.tool(readonly=True)
    def search_flights(dest: str, day: str) -> list[dict[str, Any]]:
        world.event(kind="tool", tool="search_flights", attempt=tether.current_call().attempt)
        return [
            {"id": "BA117", "dest": dest, "day": day, "stops": 0, "base": 412},
            {"id": "AA100", "dest": dest, "day": day, "stops": 0, "base": 455},
            {"id": "UA901", "dest": dest, "day": day, "stops": 1, "base": 301},
        ]

    @app.tool(retry=tether.Retry(max_attempts=4, backoff=0.2, multiplier=2, jitter=0))
    def price_quote(flight: str, base: int) -> dict[str, Any]:
        call = tether.current_call()
        world.event(kind="tool", tool="price_quote", attempt=call.attempt)
        if call.attempt < 3:  # the third-party pricing API times out on its first attempts
            raise TimeoutError("pricing API did not answer within 2s")
        return {"flight": flight, "total": base + 38, "currency": "EUR"}

    @app.tool
    def hold_seat(flight: str) -> dict[str, Any]:
        call = tether.current_call()
        world.event(kind="tool", tool="hold_seat", attempt=call.attempt, key=call.key)
        time.sleep(1.0)  # the airline is slow; the process is killed in here
        new = world.record("airline_holds", call.key, {"flight": flight})
        return {"hold": f"H-{call.key[-6:]}", "flight": flight, "new_at_airline": new}

    @app.tool
    def send_calendar_invite(to: str, title: str, day: str) -> dict[str, Any]:
        call = tether.current_call()
        world.event(kind="tool", tool="send_calendar_invite", attempt=call.attempt, key=call.key)
        world.record("calendar_invites", call.key, {"to": to, "title": title, "day": day})
        return {"invite_id": f"INV-{call.key[-6:]}"}

    @app.task
    def book_trip(ctx: tether.TaskContext, goal: str) -> dict[str, Any]:
        ctx.plan(STEPS)

        def step(n: int) -> Any:
            world.event(kind="step", n=n, name=STEPS[n - 1], live=ctx.live)
            return ctx.step(STEPS[n - 1])

        with step(1):  # the scripted planner reads the goal
            parsed = ctx.decide(
                "goal", {"dest": "NYC", "day": "next Monday"}, rationale="scripted planner: parsed the goal"
            )
        with step(2):
            flights = ctx.call(search_flights, parsed["dest"], parsed["day"])
        with step(3):
            nonstop = [f for f in flights if f["stops"] == 0]
            ctx.observe("nonstop_options", [f["id"] for f in nonstop], source="search_flights")
        with step(4):
            quote = ctx.call(price_quote, nonstop[0]["id"], nonstop[0]["base"])
        with step(5):
            best = ctx.decide(
                "flight", nonstop[0], rationale=f"cheapest nonstop at {quote['total']} EUR", alternatives=nonstop[1:]
            )
        with step(6):
            hold = ctx.call(hold_seat, best["id"])
        with step(7):
            invite = ctx.call(send_calendar_invite, "me@example.com", f"Flight {best['id']} to NYC", parsed["day"])
        with step(8):
            ctx.observe("itinerary", {"flight": best["id"], "hold": hold["hold"], "price": quote["total"]})
        with step(9):
            return {"flight": best["id"], "hold": hold["hold"], "invite": invite["invite_id"], "price": quote["total"]}

    return app, book_trip


def child(url: str, folder: str, task_id: str) -> None:
    app, book_trip = build_app(url, World(Path(folder)))
    app.run(book_trip, "Fly me to NYC next Monday, nonstop, cheapest", task_id=task_id)


def _spawn(url: str, folder: Path, task_id: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "tether.cli.demo", url, str(folder), task_id],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def run_demo(url: str, folder: Path, out: Any) -> dict[str, Any]:
    """Run the story; print as it goes through ``out`` (a rich Console); return the facts."""
    world = World(folder)
    task_id = f"trip-{uuid.uuid4().hex[:8]}"
    started = time.time()
    out.print(f"[bold]tether demo[/] — a 9-step trip-booking agent, task [cyan]{task_id}[/] in {redact_url(url)}")
    out.print("Process A runs the agent. At step 6 (holding the seat) it is killed with SIGKILL.\n")

    pid_a = _killed_while_holding(url, folder, task_id, world)
    out.print(f"[red]✗ process A (pid {pid_a}) killed with SIGKILL during step 6[/]")
    out.print("Process B resumes the task from its log.\n")

    second = _spawn(url, folder, task_id)
    _, err = second.communicate(timeout=60)
    if second.returncode != 0:
        raise RuntimeError(f"process B failed: {err.decode()}")
    pid_b = second.pid

    state = tether.App(url).state(task_id)
    timeline = world.timeline()
    _print_timeline(out, timeline, state, pid_a, pid_b, started)

    ran_again = [
        e
        for e in timeline
        if e["pid"] == pid_b and e["kind"] == "tool" and e["tool"] in ("search_flights", "price_quote")
    ]
    facts = {
        "task_id": task_id,
        "status": state.status.value,
        "output": state.output,
        "steps_1_to_5_run_again_by_b": len(ran_again),
        "calendar_invites_sent": world.count("calendar_invites"),
        "airline_holds": world.count("airline_holds"),
        "hold_attempts": sum(1 for e in timeline if e["kind"] == "tool" and e["tool"] == "hold_seat"),
        "seconds": round(time.time() - started, 2),
    }
    _print_facts(out, facts)
    return facts


def _killed_while_holding(url: str, folder: Path, task_id: str, world: World) -> int:
    """Process A runs the task until it is inside the airline call of step 6, then is SIGKILLed: its pid."""
    first = _spawn(url, folder, task_id)
    deadline = time.time() + 60
    while time.time() < deadline:
        if any(e["kind"] == "tool" and e["tool"] == "hold_seat" for e in world.timeline()):
            break
        if first.poll() is not None:
            raise RuntimeError(f"process A ended before step 6: {first.stderr.read().decode() if first.stderr else ''}")
        time.sleep(0.02)
    time.sleep(0.2)  # well inside the airline call: its intent is committed, its result is not
    first.send_signal(signal.SIGKILL)
    first.wait()
    if first.stderr:
        first.stderr.close()
    return first.pid


def _print_facts(out: Any, facts: dict[str, Any]) -> None:
    """What the story proved, one tick a fact."""
    task_id = facts["task_id"]
    out.print()
    tick = "[green]✓[/]"
    out.print(f"{tick} task {facts['status']}: {facts['output']}")
    out.print(
        f"{tick} steps 1–5 run again by process B: {facts['steps_1_to_5_run_again_by_b']} "
        "(their results came from the log)"
    )
    out.print(
        f"{tick} the interrupted hold ran {facts['hold_attempts']} times under one key; "
        f"holds at the airline: {facts['airline_holds']}"
    )
    out.print(f"{tick} calendar invites sent: {facts['calendar_invites_sent']}")
    out.print(f"\n{facts['seconds']}s. Look closer: [bold]tether show {task_id}[/], [bold]tether history {task_id}[/]")


def _print_timeline(
    out: Any, timeline: list[dict[str, Any]], state: tether.TaskState, pid_a: int, pid_b: int, started: float
) -> None:
    from tether.cli._render import table as listing  # the CLI's one table: plain in a pipe

    names = {pid_a: "A", pid_b: "B"}
    table = listing("t (s)", "process", "step", "what happened", title="timeline")
    tools_by_step: dict[tuple[int, int], list[dict[str, Any]]] = {}
    current: dict[int, int] = {}
    for event in timeline:
        if event["kind"] == "step":
            current[event["pid"]] = event["n"]
        elif event["pid"] in current:
            tools_by_step.setdefault((event["pid"], current[event["pid"]]), []).append(event)
    price_call = next((c for c in state.calls if c.tool == "price_quote"), None)
    for event in timeline:
        if event["kind"] != "step":
            continue
        pid, n = event["pid"], event["n"]
        tools = tools_by_step.get((pid, n), [])
        what: list[str] = []
        if not event["live"] and not tools:
            what.append("[dim]replayed from the log — nothing ran[/]")
        for tool in tools:
            label = f"ran {tool['tool']} (attempt {tool['attempt']})"
            if tool["tool"] == "price_quote" and price_call is not None:
                attempt = (
                    price_call.attempts[tool["attempt"] - 1] if tool["attempt"] <= len(price_call.attempts) else None
                )
                if attempt is not None and attempt.error_type:
                    label += f" → {attempt.error_type}, backoff {attempt.backoff:.1f}s"
            if tool["tool"] == "hold_seat" and pid == pid_a:
                label += " → [red]killed here[/]"
            elif tool["tool"] == "hold_seat":
                label += " — same key as before: the airline keeps one hold"
            what.append(label)
        if not what:
            what.append("ran (no tool)")
        table.add_row(f"{event['t'] - started:5.2f}", names.get(pid, str(pid)), f"{n} {STEPS[n - 1]}", "\n".join(what))
    out.print(table)


if __name__ == "__main__":
    child(sys.argv[1], sys.argv[2], sys.argv[3])
