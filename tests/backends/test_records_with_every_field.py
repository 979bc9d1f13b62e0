"""A database whose records carry every field (as tether stored them before it left out the fields at
their defaults) replays and folds as it did: the call keys, the fold and the replay's comparisons
read events, never their stored bytes."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import orjson

import tether
from tether.events import EVENT_TYPES


def _app(path: Path) -> tuple[tether.App, object]:
    """An app whose task makes every kind of call record: readonly, retried, compensated, failed."""
    app = tether.App(f"sqlite:///{path}", inline_wait=0)
    attempts: list[str] = []

    @app.tool(readonly=True)
    def search(dest: str) -> list[dict[str, object]]:
        return [{"id": "f1", "price": 120}, {"id": "f2", "price": 90}]

    @app.tool(retry=tether.Retry(max_attempts=2, backoff=0.0))
    def book(flight: str) -> dict[str, str]:
        attempts.append(flight)
        if len(attempts) == 1:
            raise ConnectionError("flaky")
        return {"booking": "b-" + flight}

    @app.tool
    def cancel_booking(booking: dict[str, str]) -> None:
        return None

    @app.tool
    def charge(amount: int) -> dict[str, int]:
        raise ValueError("card declined")

    @app.task
    def trip(ctx: tether.TaskContext, goal: str) -> dict[str, str]:
        ctx.plan(["search", "book", "approve"])
        with ctx.step("search"):
            flights = ctx.call(search, dest="NYC")
        best = ctx.decide("flight", choice=flights[1], rationale="cheapest")
        ctx.observe("price", best["price"], source="search")
        with ctx.step("book"):
            booking = ctx.call(book, flight=best["id"], compensate=cancel_booking)
        if ctx.wait_for_input("approve", prompt="Book it?"):
            ctx.call(charge, amount=best["price"])
        return booking

    return app, trip


def test_a_task_whose_records_carry_every_field_replays_and_reads_alike(tmp_path: Path) -> None:
    path = tmp_path / "t.db"
    app, trip = _app(path)
    app.run(trip, goal="NYC", task_id="trip", session_id="s1")  # type: ignore[arg-type]
    app.send_input("trip", "approve", True)
    app.resume("trip")
    session = app.session("s1")
    session.add({"role": "user", "content": "hello"})
    session.add({"type": "message", "role": "user", "content": "hi"}, format="openai_responses")
    before = app.state("trip")
    messages = session.messages()
    assert before.status == "failed" and [c.kind for c in before.calls] == ["call", "call", "call", "compensation"]
    app.close()

    # Every record rewritten as the earlier tether stored it, every field; no snapshot to read past them.
    conn = sqlite3.connect(path)
    rows = conn.execute("SELECT task, seq, type, data FROM events").fetchall()
    full = [
        (orjson.dumps(EVENT_TYPES[kind](**orjson.loads(data))).decode(), task, seq) for task, seq, kind, data in rows
    ]
    conn.executemany("UPDATE events SET data = ? WHERE task = ? AND seq = ?", full)
    conn.execute("DELETE FROM snapshots")
    conn.commit()
    conn.close()
    assert sum(len(row[3]) for row in rows) < sum(len(data) for data, _, _ in full)  # they were left out

    reopened, _ = _app(path)
    report = reopened.replay("trip")
    assert report.clean and report.replayed == report.recorded, str(report)
    after = reopened.state("trip")
    assert after.model_dump() == before.model_dump()
    assert [c.key for c in after.calls] == [c.key for c in before.calls]  # the idempotency keys are the ones recorded
    assert reopened.session("s1").messages() == messages
    assert reopened.check().clean
    reopened.close()
