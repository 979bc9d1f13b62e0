"""``tether usage``: tokens and cost read from the record, per task or summed over tasks and grouped;
and the usage lines of ``tether show``."""

from __future__ import annotations

from datetime import UTC, datetime

import click
from rich.console import Console
from rich.markup import escape
from rich.table import Table

import tether
from tether.cli._base import _open, _tid, db_option, errors_as_messages, json_option, main
from tether.cli._render import console, emit_json
from tether.cli._render import table as listing  # the CLI's one table: plain in a pipe and under NO_COLOR
from tether.telemetry import GROUPS, TaskUsage, Usage, task_usage

__all__ = ["print_usage"]


def _utc(epoch: float | None) -> str | None:
    """A time for --json as every verb writes one: ISO 8601 in UTC, with the offset."""
    return None if epoch is None else datetime.fromtimestamp(epoch, UTC).isoformat()


def _cost(usage: Usage) -> str:
    return f"{usage.cost:.4f}" if usage.cost is not None else "-"


def _row(table: Table, label: str, usage: Usage) -> None:
    table.add_row(
        label,
        str(usage.calls),
        str(usage.input_tokens),
        str(usage.output_tokens),
        str(usage.total_tokens),
        _cost(usage),
    )


@main.command()
@click.argument("task_id", required=False)
@click.option("--by", type=click.Choice(GROUPS), default=None, help="group the totals (over tasks)")
@click.option("--since", default=None, help="only what was spent since: 7d, 12h, 30m, an ISO date, or epoch seconds")
@click.option("--user", "user_id", default=None, help="only this user's tasks")
@click.option("--session", "session_id", default=None, help="only this session's tasks")
@click.option("--type", "task_type", default=None, help="only tasks of this type")
@db_option
@json_option
@errors_as_messages
def usage(
    task_id: str | None,
    by: str | None,
    since: str | None,
    user_id: str | None,
    session_id: str | None,
    task_type: str | None,
    db: str | None,
    as_json: bool,
) -> None:
    """Tokens and cost from the record: of TASK (its own and, for a fork, inherited), or summed over the
    tenant's tasks (--by task, type, user, session, model or day). Each call counts once, however often
    its task was resumed. Costs are those reported with ctx.usage."""
    app = _open(db)
    out = console()
    if task_id is not None:
        found = app.usage(_tid(app, task_id), since=since)
        if as_json:
            body = found.to_dict()
            emit_json({**body, "calls": [{**c, "at": _utc(c["at"])} for c in body["calls"]]})
            return
        _print_task(out, found)
        return
    report = app.usage(user_id=user_id, session_id=session_id, type=task_type, by=by, since=since)
    if as_json:
        emit_json({**report.to_dict(), "since": _utc(report.since)})
        return
    table = listing("group" if by else "", "calls", "input", "output", "total", "cost", title="usage")
    for name, part in report.groups.items():
        _row(table, escape(name), part)
    _row(table, "[bold]all[/]", report.total)
    out.print(table)
    out.print(f"{report.tasks} task{'s' if report.tasks != 1 else ''} read")


def _print_task(out: Console, found: TaskUsage) -> None:
    table = listing("#", "tool", "model", "input", "output", "cost", title=f"usage of {escape(found.task_id)}")
    for c in found.calls:
        mark = " (inherited)" if c.inherited else ""
        table.add_row(
            str(c.n),
            escape(c.tool or "-") + mark,
            escape(c.model or "-"),
            str(c.usage.input_tokens),
            str(c.usage.output_tokens),
            _cost(c.usage),
        )
    out.print(table)
    print_totals(out, found)


def print_totals(out: Console, found: TaskUsage) -> None:
    own = found.own
    calls = f"{own.calls} call{'s' if own.calls != 1 else ''}"
    line = f"usage: {own.input_tokens} in, {own.output_tokens} out, cost {_cost(own)} over {calls}"
    if found.inherited.calls:
        inherited = found.inherited
        line += f"; inherited from the parent: {inherited.total_tokens} tokens, cost {_cost(inherited)}"
    out.print(line)


def print_usage(out: Console, state: tether.TaskState) -> None:
    """``tether show``'s usage: each call's tokens and cost, and the task's total (nothing when no
    call carries usage)."""
    found = task_usage(state)
    if found.calls:
        _print_task(out, found)
