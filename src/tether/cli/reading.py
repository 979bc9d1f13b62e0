"""Reading what is stored: ``demo`` to make some, then ``tasks``, ``show``, ``history``, ``logs``."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import click
import orjson
from rich.markup import escape
from rich.table import Table

import tether
from tether.checks import MAX_LIMIT, MAX_OFFSET, check_statuses
from tether.cli._base import _open, _tid, db_option, errors_as_messages, json_option, main, store_url
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
    shorten,
)
from tether.cli.usage import print_usage
from tether.events import in_doubt_call
from tether.runtime.handles import failure_summary
from tether.store import TaskFilter
from tether.timetravel import HistoryCursor


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
@click.option("--status", multiple=True, help="only tasks in this status (repeatable)")
@click.option("--type", "task_type", help="only tasks of this type")
@click.option("--user", "user_id", help="only this user's tasks")
@click.option("--limit", default=50, show_default=True, help="tasks per page")
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
    """List tasks, newest first: status, position, what each waits for, who holds it; paged."""
    app = _open(db)
    offset = (page - 1) * limit
    rows = app.list_tasks(status=list(status) or None, type=task_type, user_id=user_id, limit=limit, offset=offset)
    if as_json:
        emit_json(
            [
                {
                    **{k: v for k, v in vars(r).items() if k not in ("status", "wakes_at", "updated_at")},
                    "status": r.status.value,
                    "wakes_at": r.wakes_at.isoformat() if r.wakes_at else None,
                    "updated_at": r.updated_at.isoformat(),
                }
                for r in rows
            ]
        )
        return
    table = Table()
    for column in ("task", "type", "status", "position", "waiting / wakes", "held by"):
        table.add_column(column, no_wrap=column == "task")
    for r in rows:
        doubt = in_doubt_call(r.waiting_for) if r.waiting_for else None
        waits = f"input {r.waiting_for!r}" if r.waiting_for else ""
        if doubt is not None:
            waits = f"call #{doubt} in doubt: see tether show"
        if r.wakes_at is not None:
            waits += (" until " if waits else "wakes ") + r.wakes_at.strftime("%Y-%m-%d %H:%M:%S")
        if r.parked is not None:
            waits = f"[red]parked[/] (no worker runs it): {escape(shorten(r.parked, 80))}; see tether show"
        table.add_row(_shown_id(r.task_id, wide), r.type, _status(r.status.value), r.position, waits, r.held_by or "")
    out = console()
    if not sys.stdout.isatty():
        out.width = max(out.width, 250)  # a pipe gets whole lines: full ids, nothing folded
    out.print(table if rows else "no tasks")
    total = _count_tasks(app, list(status) or None, task_type, user_id)
    if rows:
        more = f"; next: --page {page + 1}" if offset + len(rows) < total else ""
        first = f"{offset + 1:,}–{offset + len(rows):,}" if offset else f"{len(rows):,}"
        out.print(f"{first} of {total:,}{more}")


def _count_tasks(app: tether.App, status: list[str] | None, task_type: str | None, user_id: str | None) -> int:
    """How many tasks match, counted on the index (no row built): one statement, whose cost grows with
    the tasks counted (paging through the listing to count took 1-13 s beside 100,000 tasks)."""
    flt = TaskFilter(status=check_statuses(status), type=task_type, user_id=user_id)
    return app.store.count_tasks(app.tenant, flt, cap=MAX_OFFSET + MAX_LIMIT)


@main.command()
@click.argument("task_id")
@db_option
@json_option
@click.option("--full", is_flag=True, help="call args and results, inputs and tracebacks untruncated")
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
    parked = app.get(state.task_id).parked
    if parked is not None:
        out.print(
            f"[red]parked[/]: no worker runs it until someone acts on it: {escape(parked)}\n"
            f"  fix the code, then: tether resume {state.task_id} --app MODULE:APP (or retry, cancel, or answer it)"
        )
    if state.session_id is not None:
        upto = f" (up to message {state.session_version})" if state.session_version else ""
        out.print(f"conversation: {state.session_id}{upto}")
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
        width = 10_000 if full else 40
        table = Table(title="calls", title_justify="left")
        for column in ("#", "tool", "status", "attempts", "duration", "args", "result", "key"):
            table.add_column(column, overflow="fold")
        for call in state.calls:
            table.add_row(
                str(call.n),
                call.tool + (" (undo)" if call.kind == "compensation" else ""),
                "[yellow]in doubt[/]" if call.n == doubt else call.status,
                str(len(call.attempts)),
                _duration(call),
                escape(shorten(call.args, width)),
                escape(shorten(call.result, width)) if call.status == "completed" else "",
                call.key,
            )
        out.print(table)
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
        _print_waiting(out, state.waiting)
    if state.output is not None:
        out.print(f"output: {escape(shorten(state.output, 10_000 if full else 100))}")


@main.command()
@click.argument("task_id")
@db_option
@json_option
@errors_as_messages
def history(task_id: str, db: str | None, as_json: bool) -> None:
    """Every event of a task, in order, in words, with the steps' boundaries."""
    app = _open(db)
    task_id = _tid(app, task_id)
    if not as_json:
        _print_history(console(), app.history(task_id))
        return
    emit_json(
        [
            {"seq": r.seq, "at": r.time.isoformat(), "type": r.event.event_type, "data": r.event.to_dict()}
            for r in app.log.events(task_id)
        ]
    )


@main.command()
@click.argument("task_id")
@click.option("--follow", "-f", is_flag=True, help="keep streaming events as they land, until the task ends")
@click.option("--after", type=int, default=0, help="only events after seq AFTER")
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
                when = entry.at.astimezone().strftime("%H:%M:%S.%f")[:-3]
                step = f" [dim]{escape(entry.step)}[/]" if entry.step else ""
                out.print(f"{when} #{entry.seq:<4}{step} {_entry_text(entry)}")
        if not follow or row.status in terminal:
            return
        app.store.wait_for_change(5.0)
