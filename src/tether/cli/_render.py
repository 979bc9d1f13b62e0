"""All of the CLI's rendering: rich tables and lines in a terminal, plain text in a pipe, JSON for
scripts."""

from __future__ import annotations

import os
import shlex
import sys
from typing import Any, Literal

import click
import orjson
from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table

import tether
from tether.runtime.handles import failure_summary


def plain(*, stderr: bool = False) -> bool:
    """Whether output is plain text: in a pipe or a file, or under ``NO_COLOR`` (https://no-color.org:
    set and not empty). Plain text has no colour, no box drawing and no spinner."""
    stream = sys.stderr if stderr else sys.stdout
    return not stream.isatty() or bool(os.environ.get("NO_COLOR"))


def console(*, stderr: bool = False) -> Console:
    """Rich's console for stdout (or stderr). In a terminal it wraps lines at the terminal's width;
    anywhere else (a pipe, a file) a line is never wrapped or cut, as rich would at 80 columns:
    one event, one line, for grep and the like. Tables still fit the console's width. Whether the
    stream is a terminal, not rich's guess (which ``FORCE_COLOR`` sways), decides; plain output
    (:func:`plain`) has no colour nor style."""
    stream = sys.stderr if stderr else sys.stdout
    # plain: no escape codes at all (no_color would still send bold and dim)
    colours: Literal["auto"] | None = None if plain(stderr=stderr) else "auto"
    return Console(highlight=False, stderr=stderr, soft_wrap=not stream.isatty(), color_system=colours)


def table(*columns: str, title: str | None = None, **options: Any) -> Table:
    """A table with these columns: ruled in a terminal, plain text (columns apart by two spaces, a
    header line, no box drawing) in a pipe and under ``NO_COLOR``. ``options`` go to every column."""
    if plain():
        made = Table(box=None, show_edge=False, pad_edge=False, header_style="", title=title, title_justify="left")
        made.padding = (0, 2, 0, 0)
    else:
        made = Table(box=box.SIMPLE_HEAD, title=title, title_justify="left")
    for column in columns:
        made.add_column(column, **options)
    return made


def fit(*, wide: bool = False) -> Console:
    """The console for a table: a pipe gets whole lines (``wide``: 250 columns, nothing folded); a
    terminal, its width."""
    out = console()
    if wide and not sys.stdout.isatty():
        out.width = max(out.width, 250)
    return out


def emit_json(value: Any) -> None:
    click.echo(orjson.dumps(value, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS).decode())


def _state_json(state: tether.TaskState) -> Any:
    return orjson.loads(state.model_dump_json())


def _shown_id(task_id: str, wide: bool) -> str:
    """Full ids in a pipe and with --wide; in a terminal the first 12 characters (any unique prefix
    is accepted wherever a task id is)."""
    if wide or not sys.stdout.isatty() or len(task_id) <= 13:
        return task_id
    return task_id[:12] + "…"


def _status(status: str) -> str:
    colour = {"completed": "green", "failed": "red", "running": "yellow", "cancelled": "magenta"}.get(status, "cyan")
    return f"[{colour}]{status}[/]"


def shorten(value: Any, limit: int = 100) -> str:
    text = orjson.dumps(value).decode() if not isinstance(value, str) else value
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _handle_json(handle: tether.TaskHandle) -> dict[str, Any]:
    return {
        "task_id": handle.task_id,
        "status": handle.status.value,
        "output": handle.output,
        "failure": orjson.loads(handle.failure.model_dump_json()) if handle.failure else None,
    }


def _handle(out: Console, handle: tether.TaskHandle, as_json: bool) -> None:
    """Where a run left the task; exit status 1 when it failed or was cancelled."""
    if as_json:
        emit_json(_handle_json(handle))
        return
    out.print(f"{handle.task_id}: {_status(handle.status.value)}  ({handle.position})")
    if handle.waiting is not None:
        out.print(f"waiting for {handle.waiting.key!r}: {handle.waiting.prompt or ''}")
    if handle.status in (tether.Status.FAILED, tether.Status.CANCELLED):
        out.print(f"[red]{escape(failure_summary(handle.state))}[/]")
        sys.exit(1)


def _duration(call: tether.ToolCall) -> str:
    spent = [a.duration for a in call.attempts if a.duration is not None]
    return f"{sum(spent):.3f}s" if spent else ""


def _print_failure(out: Console, failure: tether.Failure, full: bool) -> None:
    width = 10_000 if full else 100
    out.print(
        f"failure at {failure.at.isoformat(' ', 'seconds')}: {escape(failure.exception_type)}: "
        f"{escape(failure.message)}"
    )
    for label, value in (("step", failure.step), ("tool", failure.tool), ("call", failure.call_key)):
        if value is not None:
            out.print(f"  {label}: {escape(value)}")
    for label, data in (("input", failure.input), ("output", failure.output)):
        if data is not None:
            out.print(f"  {label}: {escape(shorten(data, width))}")
    if failure.traceback:
        lines = failure.traceback.rstrip().splitlines()
        shown = lines if full else lines[-3:]
        more = "" if full or len(lines) <= 3 else f"  (last 3 of {len(lines)} lines; --full for all)"
        out.print(f"  traceback{more}:")
        for line in shown:
            out.print(f"    {escape(line)}")


def _print_waiting(out: Console, task_id: str, waiting: tether.Waiting, where: str = "") -> None:
    """What the task waits for, and the command that answers it (``where``: the ``--db`` to repeat)."""
    out.print(
        f"waiting for input [bold]{escape(waiting.key)}[/] since {waiting.requested_at.isoformat(' ', 'seconds')}"
        + (f", until {waiting.timeout_at.isoformat(' ', 'seconds')}" if waiting.timeout_at else "")
    )
    if waiting.prompt:
        out.print(f"  prompt: {escape(waiting.prompt)}")
    if waiting.input_schema:
        out.print(f"  schema: {escape(orjson.dumps(waiting.input_schema).decode())}")
    value = "true" if (waiting.input_schema or {}).get("type") == "boolean" else "VALUE"
    out.print(f"  answer: tether send {shlex.quote(task_id)} {shlex.quote(waiting.key)} {value}{escape(where)}")


def _print_in_doubt(out: Console, state: tether.TaskState, n: int, db: str | None) -> None:
    """What a person must do for a task waiting on its call ``n``, in doubt: the commands, as they run."""
    call = state.call(n)
    assert state.waiting is not None and call is not None
    since = state.waiting.requested_at.isoformat(" ", "seconds")
    out.print(
        f"[yellow]call #{n} {escape(call.tool)}() is in doubt[/] (since {since}): it started, and its result "
        "was never recorded; its effect may or may not have happened. No worker runs the task until it is settled."
    )
    where = f" --db {shlex.quote(db)}" if db else ""
    task = shlex.quote(state.task_id)
    out.print(f"  check the other system for key {escape(call.key)}, then settle it:")
    settle = f"  tether resolve {escape(task)} {n}"
    out.print(f"{settle} --result JSON{escape(where)}   if it happened: JSON is its result")
    out.print(f"{settle} --not-happened{escape(where)}  if it did not: it runs again, under the same key")


def _print_history(out: Console, entries: list[tether.HistoryEntry]) -> None:
    """The history as a table, each step set apart: by rules in a terminal, by a blank line in plain text."""
    table = _history_table()
    ended = False  # the row before ended a step: one separator before the next row, none at the end
    for i, entry in enumerate(entries):
        if i and (ended or (entry.boundary or "").startswith("before")):
            _separate(table)
        table.add_row(
            str(entry.seq), entry.at.strftime("%H:%M:%S.%f")[:-3], escape(entry.step or ""), _entry_text(entry)
        )
        ended = (entry.boundary or "").startswith("after")
    out.print(table)


def _separate(made: Table) -> None:
    if plain():
        made.add_row()
    else:
        made.add_section()


def _history_table() -> Table:
    """seq, time and step keep their width (a step's name is cut with …); what happened wraps at
    word boundaries."""
    made = table("seq", "time", no_wrap=True)
    made.add_column("step", no_wrap=True, overflow="ellipsis", max_width=16)
    made.add_column("what happened", overflow="fold", ratio=1)
    return made


def _entry_text(entry: tether.HistoryEntry) -> str:
    text = escape(entry.summary)
    if entry.type in ("FailureRecorded", "CallFailed", "CallAttemptFailed", "StepFailed"):
        return f"[red]{text}[/]"
    if entry.type in ("InputRequested", "InputReceived"):
        return f"[cyan]{text}[/]"
    return text


def _print_state_summary(out: Console, value: tether.TaskState) -> None:
    out.print(f"[bold]{value.task_id}[/] at event {value.version}: {_status(value.status.value)}, {value.position}")
    out.print(f"inputs: {escape(shorten(value.inputs))}")
    done = [c for c in value.calls if c.status == "completed"]
    out.print(
        f"calls: {len(value.calls)} ({len(done)} completed)"
        + (f"; last: {escape(value.calls[-1].tool)} → {escape(shorten(value.calls[-1].result, 60))}" if done else "")
    )
    for decision in value.decisions:
        out.print(f"decided {escape(decision.name)}: {escape(shorten(decision.choice, 60))}")
    for key, observation in value.observations.items():
        out.print(f"observed {escape(key)} = {escape(shorten(observation.value, 60))}")
    if value.data:
        out.print(f"data: {escape(shorten(value.data))}")
    if value.waiting is not None:
        out.print(f"waiting for input {escape(value.waiting.key)!s}: {escape(value.waiting.prompt or '')}")
    if value.failure is not None:
        out.print(f"[red]failed: {escape(value.failure.exception_type)}: {escape(value.failure.message)}[/]")
    if value.output is not None:
        out.print(f"output: {escape(shorten(value.output))}")
    out.print("(--full for the whole state)")
