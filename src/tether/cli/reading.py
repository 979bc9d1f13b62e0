"""Reading what is stored: ``demo`` to make some, then ``tasks``, ``show``, ``history``, ``logs``."""

from __future__ import annotations

import json
import tempfile
import time
from datetime import UTC
from pathlib import Path

import click
import orjson
from rich.console import Console
from rich.markup import escape

import tether
from tether.checks import MAX_LIMIT, MAX_OFFSET, check_statuses
from tether.cli._base import (
    _open,
    _tid,
    db_option,
    errors_as_messages,
    json_option,
    main,
    store_url,
    task_argument,
    where_option,
)
from tether.cli._render import (
    _duration,
    _entry_text,
    _print_failure,
    _print_history,
    _print_in_doubt,
    _print_waiting,
    _shown_id,
    _state_json,
    _status,
    console,
    emit_json,
    fit,
    shorten,
    table,
)
from tether.cli.usage import print_usage
from tether.events import in_doubt_call
from tether.runtime.handles import failure_summary, requested
from tether.runtime.liveness import liveness, needs_worker
from tether.store import TaskFilter
from tether.timetravel import HistoryCursor, session_span


@main.command()
@click.option("--db", metavar="URL", default=None, help="store URL or SQLite path (default ./tether.db)")
def demo(db: str | None) -> None:
    """Run a 9-step agent, SIGKILL it at step 6, resume it in a second process."""
    from tether.cli.demo import run_demo

    url = store_url(db)
    with tempfile.TemporaryDirectory(prefix="tether-demo-") as folder:
        run_demo(url, Path(folder), console())


@main.command()
@db_option
@json_option
@click.option(
    "--status",
    multiple=True,
    type=click.Choice([s.value for s in tether.Status], case_sensitive=False),
    help="only tasks in this status (repeatable)",
)
@click.option("--type", "task_type", help="only tasks of this type")
@click.option("--user", "user_id", help="only this user's tasks")
@click.option("--limit", default=50, show_default=True, type=click.IntRange(1, MAX_LIMIT), help="tasks per page")
@click.option("--page", default=1, show_default=True, type=click.IntRange(1), help="which page of LIMIT tasks")
@click.option("--wide", is_flag=True, help="full task ids in a terminal too (a pipe always gets them)")
@errors_as_messages
def tasks(
    db: str | None,
    as_json: bool,
    status: tuple[str, ...],
    task_type: str | None,
    user_id: str | None,
    limit: int,
    page: int,
    wide: bool,
) -> None:
    """List tasks, newest first: status, position, what each waits for, who holds it; paged.

    With --json: {"items": [...], "total": N, "limit": L, "offset": O, "page": P, "next_page": P+1 or null}."""
    app = _open(db)
    offset = (page - 1) * limit
    statuses = [s.lower() for s in status] or None
    rows = app.list_tasks(status=statuses, type=task_type, user_id=user_id, limit=limit, offset=offset)
    total = _count_tasks(app, statuses, task_type, user_id)
    later = page + 1 if offset + len(rows) < total else None
    if as_json:
        items = [_summary_json(r) for r in rows]
        emit_json({"items": items, "total": total, "limit": limit, "offset": offset, "page": page, "next_page": later})
        return
    _print_tasks(rows, wide)
    if rows:
        first = f"{offset + 1:,}–{offset + len(rows):,}" if offset else f"{len(rows):,}"
        fit().print(f"{first} of {total:,}" + (f"; next: --page {later}" if later else ""))


def _summary_json(r: tether.TaskSummary) -> dict[str, object]:
    return {
        **{k: v for k, v in vars(r).items() if k not in ("status", "wakes_at", "updated_at")},
        "status": r.status.value,
        "wakes_at": r.wakes_at.isoformat() if r.wakes_at else None,
        "updated_at": r.updated_at.isoformat(),
    }


def _print_tasks(rows: list[tether.TaskSummary], wide: bool) -> None:
    listing = table("task", "type", "status", no_wrap=True)
    listing.add_column("position", ratio=1)
    listing.add_column("waiting / wakes", ratio=1)
    listing.add_column("held by", ratio=1)
    for r in rows:
        doubt = in_doubt_call(r.waiting_for) if r.waiting_for else None
        waits = f"input {r.waiting_for!r}" if r.waiting_for else ""
        if r.status is tether.Status.AWAITING_INPUT and not r.waiting_for:
            waits = "answered: for a worker"  # it reads awaiting_input until a worker continues it
        if doubt is not None:
            waits = f"call #{doubt} in doubt: see tether show"
        if r.wakes_at is not None:
            waits += (" until " if waits else "wakes ") + r.wakes_at.astimezone(UTC).isoformat(" ", "seconds")
        if r.parked is not None:
            waits = f"[red]parked[/] (no worker runs it): {escape(shorten(r.parked, 80))}; see tether show"
        listing.add_row(_shown_id(r.task_id, wide), r.type, _status(r.status.value), r.position, waits, r.held_by or "")
    fit(wide=True).print(listing if rows else "no tasks")  # a pipe gets whole lines: full ids, nothing folded


def _count_tasks(app: tether.App, status: list[str] | None, task_type: str | None, user_id: str | None) -> int:
    """How many tasks match, counted on the index (no row built): one statement, whose cost grows with
    the tasks counted (paging through the listing to count took 1-13 s beside 100,000 tasks)."""
    flt = TaskFilter(status=check_statuses(status), type=task_type, user_id=user_id)
    return app.store.count_tasks(app.tenant, flt, cap=MAX_OFFSET + MAX_LIMIT)


@main.command()
@task_argument
@db_option
@json_option
@click.option("--full", is_flag=True, help="call args and results, keys, inputs and tracebacks untruncated")
@errors_as_messages
def show(task_id: str, db: str | None, as_json: bool, full: bool) -> None:
    """Status, position, plan, calls (args, results, durations), failure, what it waits for, output."""
    app = _open(db)
    state = app.state(_tid(app, task_id))
    if as_json:
        emit_json(_state_json(state))
        return
    out = console()
    out.print(f"[bold]{state.task_id}[/]  {state.type}  {_status(state.status.value)}  v{state.version}")
    out.print(f"position: {state.position}")
    row, now = app.log.get(state.task_id), time.time()
    if row.parked is not None:
        out.print(
            f"[red]parked[/]: no worker runs it until someone acts on it: {escape(row.parked)}\n"
            f"  fix the code, then: tether resume {state.task_id} --app MODULE:APP (or retry, cancel, or answer it)"
        )
    note = liveness(app.store, app.tenant, now).note() if needs_worker(row, now) else None
    if note is not None:  # runnable, and nothing will run it: say so, and how to start a worker
        out.print(f"[yellow]worker[/]: {escape(note)}")
    if state.session_id is not None:
        out.print(f"conversation: {state.session_id}" + (f" ({session_span(state)})" if state.session_version else ""))
    if state.plan:
        marks = {"completed": "[green]✓[/]", "failed": "[red]✗[/]", "running": "[yellow]…[/]", "pending": " "}
        for i, step in enumerate(state.plan, start=1):
            count = len(step.messages)
            added = f"  (+{count} message{'s' if count != 1 else ''})" if count else ""
            out.print(
                f"  {marks[step.status]} {i}. {step.name}{added}" + (f"  [red]{step.error}[/]" if step.error else "")
            )
    doubt = in_doubt_call(state.waiting.key) if state.waiting is not None else None
    if state.calls:
        _print_calls(out, state, doubt, full)
        print_usage(out, state)
    for decision in state.decisions:
        out.print(f"decided {decision.name}: {shorten(decision.choice)} — {decision.rationale}")
    if state.failure or state.status is tether.Status.CANCELLED:
        out.print(f"[red]{escape(failure_summary(state))}[/]")
    if state.failure is not None:
        _print_failure(out, state.failure, full)
    if doubt is not None:
        _print_in_doubt(out, state, doubt, db)
    elif state.waiting is not None:
        _print_waiting(out, state.task_id, state.waiting, where_option(db))
    asked = requested(state)
    if asked is not None:  # what was asked of it and not yet acted on, as the inspector says it
        out.print(f"[yellow]{escape(_asked(state, asked))}[/]")
    if state.output is not None:
        out.print(f"output: {escape(shorten(state.output, 10_000 if full else 100))}")


def _asked(state: tether.TaskState, asked: str) -> str:
    """A request no worker has acted on yet, in words: the answer given, the cancel or the retry."""
    if asked == "answer" and state.received:
        key, value = list(state.received.items())[-1]  # the answer to the wait it was in: the latest
        return f"answered {key} = {shorten(value, 60)}: a worker continues it from there"
    if asked == "cancel":
        return f"cancel requested ({state.cancel_reason}): a worker carries it out, compensating completed calls"
    if asked == "retry":
        return "retry requested: a worker runs it again"
    return "answered: a worker continues it from there"


def _print_calls(out: Console, state: tether.TaskState, doubt: int | None, full: bool) -> None:
    """The calls as a table that reads at 80 columns: the short columns keep their width, and the
    arguments and result share one column that wraps. Keys (each starts with the task's id, printed
    above) get a column of their own at 140 columns and up, and whole with ``full``."""
    width = 10_000 if full else 40
    calls = table("#", "tool", "status", "tries", "time", title="calls", no_wrap=True)
    calls.columns[1].max_width, calls.columns[1].overflow = 24, "ellipsis"
    calls.columns[2].min_width = len("completed")
    calls.add_column("args → result", overflow="fold", ratio=3, min_width=20)
    keys = full or out.width >= 140
    if keys:
        calls.add_column("key", overflow="fold", ratio=2)
    for call in state.calls:
        result = f" → {_spaced(call.result, width)}" if call.status == "completed" else ""
        cells = [
            str(call.n),
            call.tool + (" (undo)" if call.kind == "compensation" else ""),
            "[yellow]in doubt[/]" if call.n == doubt else call.status,
            str(len(call.attempts)),
            _duration(call),
            escape(_spaced(call.args, width) + result),
        ]
        if keys:
            short = "…" + call.key.removeprefix(state.task_id) if call.key.startswith(state.task_id) else call.key
            cells.append(call.key if full else short)
        calls.add_row(*cells)
    out.print(calls)


def _spaced(value: object, limit: int) -> str:
    """JSON with a space after each comma and colon, so a narrow column wraps between values."""
    text = json.dumps(value, ensure_ascii=False, separators=(", ", ": "), default=str)
    return text if len(text) <= limit else text[: limit - 1] + "…"


@main.command()
@task_argument
@db_option
@json_option
@errors_as_messages
def history(task_id: str, db: str | None, as_json: bool) -> None:
    """Every event of a task, in order, in words, with the steps' boundaries.

    With --json: one object per event: seq, at, type, step, summary (the line shown here) and data."""
    app = _open(db)
    task_id = _tid(app, task_id)
    entries = app.history(task_id)
    if not as_json:
        _print_history(console(), entries)
        return
    emit_json(
        [
            {
                "seq": e.seq,
                "at": e.at.isoformat(),
                "type": e.type,
                "step": e.step,
                "summary": e.summary,
                "data": e.event.to_dict(),
            }
            for e in entries
        ]
    )


@main.command()
@task_argument
@click.option("--follow", "-f", is_flag=True, help="keep streaming events as they land, until the task ends")
@click.option("--after", type=click.IntRange(0), default=0, help="only events after seq AFTER")
@db_option
@json_option
@errors_as_messages
def logs(task_id: str, follow: bool, after: int, db: str | None, as_json: bool) -> None:
    """A task's events as lines (one JSON object each with --json); --follow streams new ones as they land,
    woken by the store's change notifications, and stops when the task ends."""
    app = _open(db)
    task_id = _tid(app, task_id)
    out = console()
    terminal = {"completed", "failed", "cancelled"}
    cursor = HistoryCursor(task_id, after=after)  # each wake-up reads the new events alone
    while True:
        row = app.log.get(task_id)  # before the events: the end is never seen ahead of the last ones
        entries = cursor.read(app.log)
        if cursor.replaced and as_json:
            click.echo(orjson.dumps({"replaced": True, "task_id": task_id}).decode())
        elif cursor.replaced:
            out.print("[yellow]the task's history was replaced (rewound, or deleted and made again): from the start[/]")
        for entry in entries:
            if as_json:
                click.echo(
                    orjson.dumps(
                        {
                            "seq": entry.seq,
                            "at": entry.at.isoformat(),
                            "type": entry.type,
                            "step": entry.step,
                            "summary": entry.summary,
                        }
                    ).decode()
                )
            else:
                when = entry.at.strftime("%H:%M:%S.%f")[:-3]  # UTC, as history's and every time shown
                step = f" [dim]{escape(entry.step)}[/]" if entry.step else ""
                out.print(f"{when} #{entry.seq:<4}{step} {_entry_text(entry)}")
        if not follow or row.status in terminal:
            return
        app.store.wait_for_change(5.0)
