"""The ``tether`` command: a thin click group over the public API.

Output is for people first (rich tables, colour in a terminal, plain text in a
pipe); every read verb takes ``--json`` for scripts. All rendering lives here.
"""

from __future__ import annotations

import functools
import getpass
import logging
import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
import orjson
from rich.console import Console
from rich.markup import escape
from rich.table import Table

import tether
from tether.errors import TetherError
from tether.runtime.handles import failure_summary

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


def _url(db: str | None) -> str:
    value = db or os.environ.get("TETHER_URL") or "tether.db"
    return value if "://" in value else f"sqlite:///{value}"


def _open(db: str | None, *, write: bool = False) -> tether.App:
    """The app over the store ``--db`` names, in the tenant ``--tenant`` names.

    Verbs that only read open SQLite read-only: they never create, migrate or re-configure a file
    (not even its journal mode). Only verbs that write (``fork``, ``send``) may.
    """
    url = _url(db)
    if url.startswith("sqlite:///") and not Path(url[len("sqlite:///") :]).exists():
        raise click.ClickException(
            f"no database at {url[len('sqlite:///') :]!r}; run `tether demo` or your app to create one, "
            "or point --db (or TETHER_URL) at yours"
        )
    if not write and not url.startswith("memory:"):
        return tether.App(tether.open_store(url, readonly=True), tenant=_tenant())
    return tether.App(url, tenant=_tenant())


def _tenant() -> str:
    return str(click.get_current_context().meta.get("tether.tenant") or "default")


def _remember_tenant(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    ctx.meta["tether.tenant"] = value
    return value


def db_option(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``--db`` and ``--tenant``: which store, and whose tasks in it."""
    fn = click.option(
        "--tenant",
        metavar="NAME",
        envvar="TETHER_TENANT",
        expose_value=False,
        callback=_remember_tenant,
        help="the tenant to look in (default: $TETHER_TENANT, then 'default')",
    )(fn)
    return click.option(
        "--db", metavar="URL", help="store URL or SQLite path (default: $TETHER_URL, then ./tether.db)"
    )(fn)


def json_option(fn: Callable[..., Any]) -> Callable[..., Any]:
    return click.option("--json", "as_json", is_flag=True, help="machine-readable JSON on stdout")(fn)


def _os_user() -> str | None:
    """Who runs this command, by the OS's account name; ``None`` where the OS cannot say."""
    try:
        return getpass.getuser() or None
    except (OSError, KeyError, ImportError):  # no login name in the environment and no passwd entry
        return None


def actor_option(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``--actor``: who does a write action, recorded in the task's history (default: the OS user)."""
    return click.option(
        "--actor", default=_os_user, show_default="your OS user name", help="who does this (recorded in the history)"
    )(fn)


def errors_as_messages(fn: Callable[..., Any]) -> Callable[..., Any]:
    """A TetherError becomes a one-line message (and its JSON body with --json), not a traceback."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except tether.TaskNotFoundError as exc:
            hint = _suggest(kwargs.get("db"), exc.task_id)
            raise click.ClickException(f"{exc}{hint}") from None
        except TetherError as exc:
            if kwargs.get("as_json"):
                click.echo(orjson.dumps(exc.to_dict()).decode())
                sys.exit(1)
            raise click.ClickException(str(exc)) from None

    return wrapper


def _suggest(db: str | None, task_id: str) -> str:
    import difflib

    try:
        ids = [row.task_id for row in _open(db).log.list(limit=1000)]
    except (TetherError, click.ClickException):
        return ""
    close = difflib.get_close_matches(task_id, ids, n=3, cutoff=0.5)
    prefixed = [i for i in ids if i.startswith(task_id)][:3]
    found = list(dict.fromkeys(prefixed + close))
    return f"; did you mean {', '.join(found)}?" if found else "; `tether tasks` lists the tasks"


def _tid(app: tether.App, text: str) -> str:
    """The task ``text`` names: its id, or the one task whose id starts with it. An ambiguous
    prefix is refused, listing the matches; no match is left for the verb to report."""
    if not text or app.store.get_task(app.tenant, text) is not None:
        return text
    matches = [r.task_id for r in app.log.list(limit=10_000) if r.task_id.startswith(text)]
    if len(matches) == 1:
        return matches[0]
    if matches:
        shown = "\n  ".join(matches[:10]) + (f"\n  … and {len(matches) - 10:,} more" if len(matches) > 10 else "")
        raise click.ClickException(f"{text!r} is the start of {len(matches):,} task ids:\n  {shown}")
    return text


def _shown_id(task_id: str, wide: bool) -> str:
    """Full ids in a pipe and with --wide; in a terminal the first 12 characters (any unique prefix
    is accepted wherever a task id is)."""
    if wide or not sys.stdout.isatty() or len(task_id) <= 13:
        return task_id
    return task_id[:12] + "…"


def _console() -> Console:
    return Console(highlight=False)


def _emit_json(value: Any) -> None:
    click.echo(orjson.dumps(value, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS).decode())


def _state_json(state: tether.TaskState) -> Any:
    return orjson.loads(state.model_dump_json())


def _load_app(spec: str) -> tether.App:
    """``module:attribute`` → the App object (the current directory is importable)."""
    import importlib

    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise click.BadParameter(f"expected module:app (e.g. myagent:app), got {spec!r}", param_hint="APP")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise click.BadParameter(f"cannot import {module_name!r}: {exc}", param_hint="APP") from None
    app = getattr(module, attribute, None)
    if not isinstance(app, tether.App):
        raise click.BadParameter(f"{spec!r} is {type(app).__name__}, not a tether.App", param_hint="APP")
    return app


def app_option(fn: Callable[..., Any]) -> Callable[..., Any]:
    return click.option(
        "--app",
        "app_spec",
        required=True,
        metavar="MODULE:APP",
        help="where your tasks are registered, e.g. myagent:app",
    )(fn)


def _handle(out: Console, handle: tether.TaskHandle, as_json: bool) -> None:
    if as_json:
        _emit_json(
            {
                "task_id": handle.task_id,
                "status": handle.status.value,
                "output": handle.output,
                "failure": orjson.loads(handle.failure.model_dump_json()) if handle.failure else None,
            }
        )
        return
    out.print(f"{handle.task_id}: {_status(handle.status.value)}  ({handle.state.position})")
    if handle.state.waiting is not None:
        out.print(f"waiting for {handle.state.waiting.key!r}: {handle.state.waiting.prompt or ''}")
    if handle.status in (tether.Status.FAILED, tether.Status.CANCELLED):
        out.print(f"[red]{escape(failure_summary(handle.state))}[/]")
        sys.exit(1)


class _InOrder(click.Group):
    """Commands listed in the order a user meets them, not alphabetically."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(self.commands)


@click.group(cls=_InOrder, context_settings=CONTEXT)
@click.version_option(tether.__version__, "-V", "--version")
def main() -> None:
    """tether: durable state for AI agents. Inspect tasks, their history and their state."""


@main.command()
@click.option("--db", metavar="URL", default=None, help="store URL or SQLite path (default ./tether.db)")
def demo(db: str | None) -> None:
    """Run a 9-step agent, SIGKILL it at step 6, resume it in a second process."""
    from tether.demo import run_demo

    url = _url(db)
    with tempfile.TemporaryDirectory(prefix="tether-demo-") as folder:
        run_demo(url, Path(folder), _console())


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
        _emit_json(
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
        waits = f"input {r.waiting_for!r}" if r.waiting_for else ""
        if r.wakes_at is not None:
            waits += (" until " if waits else "wakes ") + r.wakes_at.strftime("%Y-%m-%d %H:%M:%S")
        table.add_row(_shown_id(r.task_id, wide), r.type, _status(r.status.value), r.position, waits, r.held_by or "")
    out = _console()
    if not sys.stdout.isatty():
        out.width = max(out.width, 250)  # a pipe gets whole lines: full ids, nothing folded
    out.print(table if rows else "no tasks")
    total = _count_tasks(app, list(status) or None, task_type, user_id)
    if rows:
        more = f"; next: --page {page + 1}" if offset + len(rows) < total else ""
        first = f"{offset + 1:,}–{offset + len(rows):,}" if offset else f"{len(rows):,}"
        out.print(f"{first} of {total:,}{more}")


def _count_tasks(app: tether.App, status: list[str] | None, task_type: str | None, user_id: str | None) -> int:
    """How many tasks match: counted by pages of index rows (no state is loaded)."""
    total, offset, step = 0, 0, 10_000
    while True:
        found = len(app.log.list(status=status, type=task_type, user_id=user_id, limit=step, offset=offset))
        total += found
        if found < step:
            return total
        offset += step


def _status(status: str) -> str:
    colour = {"completed": "green", "failed": "red", "running": "yellow", "cancelled": "magenta"}.get(status, "cyan")
    return f"[{colour}]{status}[/]"


@main.command()
@click.argument("task_id")
@db_option
@json_option
@click.option("--full", is_flag=True, help="call args and results, inputs and tracebacks untruncated")
@errors_as_messages
def show(task_id: str, db: str | None, as_json: bool, full: bool) -> None:
    """Status, position, plan, calls (args, results, durations), failure, what it waits for, output."""
    app = _open(db)
    state = app.log.load(_tid(app, task_id))
    if as_json:
        _emit_json(_state_json(state))
        return
    out = _console()
    out.print(f"[bold]{state.task_id}[/]  {state.type}  {_status(state.status.value)}  v{state.version}")
    out.print(f"position: {state.position}")
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
    if state.calls:
        width = 10_000 if full else 40
        table = Table(title="calls", title_justify="left")
        for column in ("#", "tool", "status", "attempts", "duration", "args", "result", "key"):
            table.add_column(column, overflow="fold")
        for call in state.calls:
            table.add_row(
                str(call.n),
                call.tool + (" (undo)" if call.kind == "compensation" else ""),
                call.status,
                str(len(call.attempts)),
                _duration(call),
                escape(_short(call.args, width)),
                escape(_short(call.result, width)) if call.status == "completed" else "",
                call.key,
            )
        out.print(table)
    for decision in state.decisions:
        out.print(f"decided {decision.name}: {_short(decision.choice)} — {decision.rationale}")
    if state.failure or state.status is tether.Status.CANCELLED:
        out.print(f"[red]{escape(failure_summary(state))}[/]")
    if state.failure is not None:
        _print_failure(out, state.failure, full)
    if state.waiting is not None:
        _print_waiting(out, state.waiting)
    if state.output is not None:
        out.print(f"output: {escape(_short(state.output, 10_000 if full else 100))}")


def _duration(call: tether.ToolCall) -> str:
    spent = [a.duration for a in call.attempts if a.duration is not None]
    return f"{sum(spent):.3f}s" if spent else ""


def _print_failure(out: Console, failure: tether.Failure, full: bool) -> None:
    width = 10_000 if full else 100
    out.print(f"failure at {failure.at.isoformat(' ', 'seconds')}: {escape(failure.exception_type)}: "
              f"{escape(failure.message)}")
    for label, value in (("step", failure.step), ("tool", failure.tool), ("call", failure.call_key)):
        if value is not None:
            out.print(f"  {label}: {escape(value)}")
    for label, data in (("input", failure.input), ("output", failure.output)):
        if data is not None:
            out.print(f"  {label}: {escape(_short(data, width))}")
    if failure.traceback:
        lines = failure.traceback.rstrip().splitlines()
        shown = lines if full else lines[-3:]
        more = "" if full or len(lines) <= 3 else f"  (last 3 of {len(lines)} lines; --full for all)"
        out.print(f"  traceback{more}:")
        for line in shown:
            out.print(f"    {escape(line)}")


def _print_waiting(out: Console, waiting: tether.Waiting) -> None:
    out.print(f"waiting for input [bold]{escape(waiting.key)}[/] since {waiting.requested_at.isoformat(' ', 'seconds')}"
              + (f", until {waiting.timeout_at.isoformat(' ', 'seconds')}" if waiting.timeout_at else ""))
    if waiting.prompt:
        out.print(f"  prompt: {escape(waiting.prompt)}")
    if waiting.input_schema:
        out.print(f"  schema: {escape(orjson.dumps(waiting.input_schema).decode())}")
    out.print(f"  answer: tether send TASK {escape(waiting.key)} VALUE")


def _short(value: Any, limit: int = 100) -> str:
    text = orjson.dumps(value).decode() if not isinstance(value, str) else value
    return text if len(text) <= limit else text[: limit - 1] + "…"


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
        _print_history(_console(), app.history(task_id))
        return
    records = app.log.events(task_id)
    if as_json:
        _emit_json(
            [
                {"seq": r.seq, "at": r.time.isoformat(), "type": r.event.event_type, "data": r.event.to_dict()}
                for r in records
            ]
        )
        return


def _print_history(out: Console, entries: list[tether.HistoryEntry]) -> None:
    table = Table()
    for column in ("seq", "time", "step", "what happened"):
        table.add_column(column, overflow="fold")
    for entry in entries:
        if entry.boundary and entry.boundary.startswith("before"):
            table.add_section()
        table.add_row(
            str(entry.seq), entry.at.strftime("%H:%M:%S.%f")[:-3], escape(entry.step or ""), _entry_text(entry)
        )
        if entry.boundary and entry.boundary.startswith("after"):
            table.add_section()
    out.print(table)


def _entry_text(entry: tether.HistoryEntry) -> str:
    text = escape(entry.summary)
    if entry.type in ("FailureRecorded", "CallFailed", "CallAttemptFailed", "StepFailed"):
        return f"[red]{text}[/]"
    if entry.type in ("InputRequested", "InputReceived"):
        return f"[cyan]{text}[/]"
    return text


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
    out = _console()
    terminal = {"completed", "failed", "cancelled"}
    while True:
        row = app.log.get(task_id)  # before the events: the end is never seen ahead of the last ones
        for entry in app.history(task_id):
            if entry.seq <= after:
                continue
            after = entry.seq
            if as_json:
                click.echo(orjson.dumps({"seq": entry.seq, "at": entry.at.isoformat(), "type": entry.type,
                                         "step": entry.step, "summary": entry.summary}).decode())
            else:
                when = entry.at.astimezone().strftime("%H:%M:%S.%f")[:-3]
                step = f" [dim]{escape(entry.step)}[/]" if entry.step else ""
                out.print(f"{when} #{entry.seq:<4}{step} {_entry_text(entry)}")
        if not follow or row.status in terminal:
            return
        app.store.wait_for_change(5.0)


@main.command()
@click.argument("task_id")
@click.option("--at", "seq", type=int, default=None, help="the state right after event SEQ")
@click.option("--before-step", type=str, default=None, help="just before step N (number or name)")
@click.option("--after-step", type=str, default=None, help="right after step N ended")
@click.option("--full", is_flag=True, help="the whole state as JSON (default: a summary)")
@db_option
@json_option
@errors_as_messages
def state(
    task_id: str,
    seq: int | None,
    before_step: str | None,
    after_step: str | None,
    full: bool,
    db: str | None,
    as_json: bool,
) -> None:
    """A task's state — now, at any event, or around any step: a summary, or all of it with --full."""
    if sum(x is not None for x in (seq, before_step, after_step)) > 1:
        raise click.UsageError("use one of --at, --before-step, --after-step")
    app = _open(db)
    task_id = _tid(app, task_id)
    if seq is not None:
        value = app.state_at(task_id, seq)
    elif before_step is not None:
        value = app.state_before(task_id, _step(before_step))
    elif after_step is not None:
        value = app.state_after(task_id, _step(after_step))
    else:
        value = app.state(task_id)
    if as_json:
        _emit_json(_state_json(value))
        return
    if full:
        _console().print_json(value.model_dump_json())
        return
    _print_state_summary(_console(), value)


def _print_state_summary(out: Console, value: tether.TaskState) -> None:
    out.print(f"[bold]{value.task_id}[/] at event {value.version}: {_status(value.status.value)}, {value.position}")
    out.print(f"inputs: {escape(_short(value.inputs))}")
    done = [c for c in value.calls if c.status == "completed"]
    out.print(f"calls: {len(value.calls)} ({len(done)} completed)" + (
        f"; last: {escape(value.calls[-1].tool)} → {escape(_short(value.calls[-1].result, 60))}" if done else ""))
    for decision in value.decisions:
        out.print(f"decided {escape(decision.name)}: {escape(_short(decision.choice, 60))}")
    for key, observation in value.observations.items():
        out.print(f"observed {escape(key)} = {escape(_short(observation.value, 60))}")
    if value.data:
        out.print(f"data: {escape(_short(value.data))}")
    if value.waiting is not None:
        out.print(f"waiting for input {escape(value.waiting.key)!s}: {escape(value.waiting.prompt or '')}")
    if value.failure is not None:
        out.print(f"[red]failed: {escape(value.failure.exception_type)}: {escape(value.failure.message)}[/]")
    if value.output is not None:
        out.print(f"output: {escape(_short(value.output))}")
    out.print("(--full for the whole state)")


def _step(text: str) -> int | str:
    return int(text) if text.isdigit() else text


def _point(app: tether.App, task_id: str, text: str) -> int:
    """An event seq from a seq, a step name (right after it ended) or ``before:NAME``."""
    from tether.timetravel import step_bounds

    if text.isdigit():
        return int(text)
    before = text.startswith("before:")
    name = text.removeprefix("before:")
    start, end = step_bounds(app.log.events(task_id), _step(name))
    if before:
        return max(start - 1, 1)
    if end is None:
        raise click.BadParameter(f"step {name!r} has not ended; use before:{name} or a seq")
    return end


@main.command()
@click.argument("task_id")
@click.argument("a")
@click.argument("b")
@click.option("--other", metavar="TASK", help="compare with this task's state at B (a fork, its parent)")
@db_option
@json_option
@errors_as_messages
def diff(task_id: str, a: str, b: str, other: str | None, db: str | None, as_json: bool) -> None:
    """What changed from point A to point B: an RFC 6902 JSON patch. A point is an event's seq, or a step's
    name (the state right after it ended; `before:NAME` just before it started)."""
    app = _open(db)
    task_id = _tid(app, task_id)
    other = _tid(app, other) if other is not None else None
    result = app.diff(task_id, _point(app, task_id, a), _point(app, other or task_id, b), other=other)
    if as_json:
        _emit_json(result.patch)
        return
    out = _console()
    out.print(f"[bold]{result.a} → {result.b}[/]" if result.patch else result.render())
    colours = {"add": "green", "remove": "red", "replace": "yellow"}
    for op in result.patch:
        value = f": {_short(op['value'], 90)}" if "value" in op else ""
        out.print(f"  [{colours.get(op['op'], 'cyan')}]{op['op']:7}[/] {op['path']}{value}")


@main.command()
@click.argument("task_id")
@click.option("--at", "seq", type=int, required=True, help="the last event the fork shares")
@click.option("--id", "new_id", default=None, help="the fork's task id (default: a new one)")
@click.option("--inputs", default=None, help="new inputs for the fork, as a JSON object")
@db_option
@json_option
@errors_as_messages
def fork(task_id: str, seq: int, new_id: str | None, inputs: str | None, db: str | None, as_json: bool) -> None:
    """A new task sharing TASK's history up to SEQ (by reference); resume it to run from there."""
    parsed = None
    if inputs is not None:
        try:
            parsed = orjson.loads(inputs)
        except orjson.JSONDecodeError as exc:
            raise click.BadParameter(f"not JSON: {exc}", param_hint="--inputs") from None
        if not isinstance(parsed, dict):
            raise click.BadParameter("must be a JSON object", param_hint="--inputs")
    app = _open(db, write=True)
    task_id = _tid(app, task_id)
    handle = app.fork(task_id, at=seq, new_id=new_id, inputs=parsed)
    if as_json:
        _emit_json({"task_id": handle.task_id, "parent": task_id, "at": seq, "status": handle.status.value})
        return
    _console().print(
        f"forked {task_id} at event {seq} → [bold]{handle.task_id}[/] ({handle.status.value}); "
        f"run it with `tether resume {handle.task_id} --app MODULE:APP`"
    )


@main.command()
@click.argument("task_id")
@click.option("--upto", type=int, default=None, help="replay only the first UPTO events")
@app_option
@json_option
@errors_as_messages
def replay(task_id: str, upto: int | None, app_spec: str, as_json: bool) -> None:
    """Check that your current code replays TASK's log; runs no tool, writes nothing. Exit 1 if it diverges."""
    app = _load_app(app_spec)
    task_id = _tid(app, task_id)
    out = _console()
    with out.status(f"replaying {task_id}…", spinner="dots"):
        report = app.replay(task_id, upto=upto)
    if as_json:
        _emit_json(
            {
                "task_id": report.task_id,
                "clean": report.clean,
                "replayed": report.replayed,
                "recorded": report.recorded,
                "outcome": report.outcome,
                "divergence": report.divergence.to_dict() if report.divergence else None,
            }
        )
    else:
        out.print(("[green]✓[/] " if report.clean else "[red]✗[/] ") + str(report))
    if not report.clean:
        sys.exit(1)


@main.command()
@click.option("--finished", type=int, default=0, show_default=True, help="also the N most recent finished tasks")
@app_option
@json_option
@errors_as_messages
def check(finished: int, app_spec: str, as_json: bool) -> None:
    """Replay every unfinished task against your current code, running and writing nothing: run it before a
    deploy. One line per task that would diverge, then a summary; exit 1 if any diverges."""
    app = _load_app(app_spec)
    out = _console()
    with out.status("replaying stored tasks…", spinner="dots"):
        report = app.check(finished=finished)
    if as_json:
        _emit_json(
            {
                "checked": len(report.reports),
                "diverging": [
                    {
                        "task_id": r.task_id,
                        "outcome": r.outcome,
                        "divergence": r.divergence.to_dict() if r.divergence else None,
                    }
                    for r in report.diverging
                ],
                "unknown_types": report.unknown,
            }
        )
    else:
        for r in report.diverging:
            out.print(f"[red]✗[/] {escape(str(r))}")
        colour = "green" if report.clean else "red"
        out.print(f"[{colour}]{escape(str(report).splitlines()[-1])}[/]")
    if not report.clean:
        sys.exit(1)


@main.command()
@click.argument("task_id")
@app_option
@json_option
@errors_as_messages
def resume(task_id: str, app_spec: str, as_json: bool) -> None:
    """Continue a task here from its log; recorded steps do not run again."""
    app = _load_app(app_spec)
    _handle(_console(), app.resume(_tid(app, task_id)), as_json)


@main.command()
@click.argument("task_id")
@actor_option
@app_option
@json_option
@errors_as_messages
def retry(task_id: str, actor: str | None, app_spec: str, as_json: bool) -> None:
    """Run a failed task again with the code as it is now: recorded calls before the failure are reused."""
    app = _load_app(app_spec)
    _handle(_console(), app.retry(_tid(app, task_id), actor=actor), as_json)


@main.command()
@click.argument("task_id")
@click.argument("key")
@click.argument("value")
@db_option
@json_option
@actor_option
@errors_as_messages
def send(task_id: str, key: str, value: str, db: str | None, as_json: bool, actor: str | None) -> None:
    """Answer a task waiting for input KEY. VALUE is JSON if it parses as JSON, else a string."""
    app = _open(db, write=True)
    task_id = _tid(app, task_id)
    try:
        parsed: Any = orjson.loads(value)
    except orjson.JSONDecodeError:
        parsed = value
    handle = app.send_input(task_id, key, parsed, actor=actor)
    if as_json:
        _handle(_console(), handle, as_json)
        return
    out = _console()
    row = app.log.get(task_id)
    runnable = handle.state.waiting is None and row.wake_at is not None
    after = "runnable: a `tether worker` continues it" if runnable else "it will read the answer when it asks"
    out.print(f"answered {key!r} for {task_id}: now {_status(handle.status.value)} ({handle.state.position}); {after}")


@main.command()
@click.argument("task_id")
@click.option("--to", "seq", type=int, required=True, help="the last event to keep")
@app_option
@json_option
@errors_as_messages
def rewind(task_id: str, seq: int, app_spec: str, as_json: bool) -> None:
    """Go back to event SEQ and try again; the abandoned branch stays listable as TASK~N."""
    app = _load_app(app_spec)
    _handle(_console(), app.rewind(_tid(app, task_id), to=seq), as_json)


@main.command()
@click.argument("task_id")
@click.option("--reason", default="cancelled from the command line", show_default=True)
@app_option
@json_option
@actor_option
@errors_as_messages
def cancel(task_id: str, reason: str, app_spec: str, as_json: bool, actor: str | None) -> None:
    """Cancel a task; its completed calls are compensated in reverse order."""
    app = _load_app(app_spec)
    _handle(_console(), app.cancel(_tid(app, task_id), reason, actor=actor), as_json)


@main.command()
@click.argument("app_spec", metavar="MODULE:APP")
@click.option("--concurrency", "-c", default=1, show_default=True, help="tasks run at once")
@click.option("--idle-exit", is_flag=True, help="exit when there is nothing left to run")
@click.option("--poll", default=0.5, show_default=True, help="seconds between looks when idle")
@click.option("--grace", default=30.0, show_default=True, help="seconds to finish running tasks on SIGTERM")
@click.option("--quiet", "-q", is_flag=True, help="no line per task run")
@click.option("--verbose", "-v", is_flag=True, help="a line when each run starts too, and tether's warnings")
def worker(
    app_spec: str, concurrency: int, idle_exit: bool, poll: float, grace: float, quiet: bool, verbose: bool
) -> None:
    """Claim and run runnable tasks of an app until stopped (SIGTERM finishes running tasks first).

    One line per task run on stderr: when it started and ended, the task, its type, the status it
    reached and how long the run took (--verbose: a line as each run starts too; --quiet: none)."""
    app = _load_app(app_spec)
    err = Console(stderr=True, highlight=False)
    err.print(f"worker {app.worker_id} on {app.store.url} (concurrency {concurrency})")
    handler = _RunLines(app, err, verbose)
    worker_log = logging.getLogger("tether.worker")
    if not quiet:
        worker_log.addHandler(handler)
        worker_log.setLevel(logging.DEBUG if verbose else logging.INFO)
    try:
        runs = app.run_worker(concurrency=concurrency, idle_exit=idle_exit, poll=poll, grace=grace)
    finally:
        worker_log.removeHandler(handler)
    err.print(f"worker {app.worker_id}: {runs} task runs")


class _RunLines(logging.Handler):
    """The worker's run records as one line each; its warnings as they are."""

    def __init__(self, app: tether.App, out: Console, verbose: bool) -> None:
        super().__init__(logging.DEBUG)
        self.app = app
        self.out = out
        self.verbose = verbose

    def emit(self, record: logging.LogRecord) -> None:
        from datetime import datetime

        when = datetime.fromtimestamp(record.created).strftime("%H:%M:%S")
        run = getattr(record, "tether_run", None)
        if run is None:
            if record.levelno >= logging.WARNING:
                self.out.print(f"{when} [yellow]{escape(record.getMessage())}[/]")
            return
        task_id, status, seconds = run
        try:
            task_type = self.app.log.get(task_id).type
        except TetherError:
            task_type = "?"
        if status is None:
            if self.verbose:
                self.out.print(f"{when} {task_id} {task_type} started")
            return
        began = datetime.fromtimestamp(record.created - seconds).strftime("%H:%M:%S")
        self.out.print(f"{began}–{when} {task_id} {task_type} {_status(status)} in {seconds:.2f}s")


@main.command()
@click.option("--db", metavar="URL", help="store URL or SQLite path (default: $TETHER_URL, then ./tether.db)")
@click.option("--host", default="127.0.0.1", show_default=True, help="address to bind (loopback by default)")
@click.option("--port", default=8700, show_default=True, type=click.IntRange(0, 65535))
@click.option("--no-auth", is_flag=True, help="answer without API keys (loopback hosts only)")
@click.option("--tenant", default="default", show_default=True, help="the tenant of --no-auth mode")
def serve(db: str | None, host: str, port: int, no_auth: bool, tenant: str) -> None:
    """The HTTP API (/v1, OpenAPI at /openapi.json) and the web inspector (/), for one store."""
    import ipaddress

    try:
        loopback = host == "localhost" or ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        loopback = False
    if no_auth and not loopback:
        raise click.ClickException(f"--no-auth is refused on {host}: it would open every task to the network")
    try:
        import uvicorn

        from tether.serve import create_app
    except ImportError:
        raise click.ClickException("tether serve needs its extra: pip install 'tether[serve]'") from None
    from tether.store.base import redact_url

    url = _url(db)
    asgi = create_app(url, no_auth=no_auth, tenant=tenant)
    err = Console(stderr=True, highlight=False)
    mode = f"without keys, as tenant {tenant!r}" if no_auth else "API keys required (`tether keys create`)"
    err.print(f"tether serve on http://{host}:{port}/ for {redact_url(url)}; {mode}")
    uvicorn.run(asgi, host=host, port=port, log_level="warning")


@main.group()
def keys() -> None:
    """API keys for `tether serve`: each bound to one tenant; only a hash is stored."""


@keys.command("create")
@click.option("--db", metavar="URL", help="store URL or SQLite path (default: $TETHER_URL, then ./tether.db)")
@click.option("--tenant", required=True, help="the tenant the key acts in")
@click.option("--name", required=True, help="who holds it: recorded as the actor of its writes")
@errors_as_messages
def keys_create(db: str | None, tenant: str, name: str) -> None:
    """Make a key and print it once: it cannot be shown again."""
    from tether.serve.keys import KeyRing

    secret, key = KeyRing(tether.open_store(_url(db))).create(tenant=tenant, name=name)
    click.echo(secret)
    note = f"key {key.key_id} for tenant {tenant!r} ({name}); keep it: it is shown once"
    Console(stderr=True, highlight=False).print(note)


@keys.command("list")
@click.option("--db", metavar="URL", help="store URL or SQLite path (default: $TETHER_URL, then ./tether.db)")
@json_option
@errors_as_messages
def keys_list(db: str | None, as_json: bool) -> None:
    """The keys: id, tenant, name, when made, revoked or not (never the secret)."""
    from dataclasses import asdict

    from tether.serve.keys import KeyRing

    found = KeyRing(tether.open_store(_url(db))).list()
    if as_json:
        _emit_json([asdict(k) for k in found])
        return
    table = Table("id", "tenant", "name", "created", "revoked")
    for k in found:
        from datetime import datetime

        made = datetime.fromtimestamp(k.created_at).isoformat(" ", "seconds")
        table.add_row(k.key_id, k.tenant, k.name, made, "yes" if k.revoked else "")
    _console().print(table)


@keys.command("revoke")
@click.argument("key_id")
@click.option("--db", metavar="URL", help="store URL or SQLite path (default: $TETHER_URL, then ./tether.db)")
@errors_as_messages
def keys_revoke(key_id: str, db: str | None) -> None:
    """Revoke a key: requests made with it are refused from now on."""
    from tether.serve.keys import KeyRing

    key = KeyRing(tether.open_store(_url(db))).revoke(key_id)
    click.echo(f"revoked {key.key_id} ({key.tenant}, {key.name})")


if __name__ == "__main__":
    main()
