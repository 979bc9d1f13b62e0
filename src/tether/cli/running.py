"""Running tasks: ``resume``, ``retry``, ``send`` an answer, ``resolve`` a call in doubt, ``cancel``, and
``worker``."""

from __future__ import annotations

import logging
from typing import Any

import click
import orjson
from rich.console import Console
from rich.markup import escape

import tether
from tether.cli._base import (
    _load_app,
    _open,
    _tid,
    actor_option,
    app_option,
    db_option,
    errors_as_messages,
    json_option,
    main,
    task_argument,
)
from tether.cli._render import _handle, _handle_json, _status, console, emit_json
from tether.errors import TetherError
from tether.runtime.calls import UNSET
from tether.runtime.handles import TaskHandle


@main.command()
@task_argument
@app_option
@json_option
@errors_as_messages
def resume(task_id: str, app_spec: str, as_json: bool) -> None:
    """Continue a task here from its log; recorded steps do not run again."""
    app = _load_app(app_spec)
    _handle(console(), app.resume(_tid(app, task_id)), as_json)


@main.command()
@task_argument
@actor_option
@app_option
@json_option
@errors_as_messages
def retry(task_id: str, actor: str | None, app_spec: str, as_json: bool) -> None:
    """Run a failed task again with the code as it is now: recorded calls before the failure are reused."""
    app = _load_app(app_spec)
    _handle(console(), app.retry(_tid(app, task_id), actor=actor), as_json)


@main.command()
@task_argument
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
        _handle(console(), handle, as_json)
        return
    out = console()
    row = app.log.get(task_id)
    runnable = handle.waiting is None and row.wake_at is not None
    after = "runnable: a `tether worker` continues it" if runnable else "it will read the answer when it asks"
    out.print(f"answered {key!r} for {task_id}: now {_status(handle.status.value)} ({handle.position}); {after}")


@main.command()
@task_argument
@click.argument("n", type=click.IntRange(1))
@click.option("--result", metavar="JSON", help="the call's result, as JSON, when its effect happened")
@click.option("--not-happened", is_flag=True, help="its effect did not happen: the call runs again under its key")
@db_option
@json_option
@actor_option
@errors_as_messages
def resolve(
    task_id: str, n: int, result: str | None, not_happened: bool, db: str | None, as_json: bool, actor: str | None
) -> None:
    """Settle call N of a task, whose outcome is unknown (its process stopped inside it).

    --result JSON if its effect happened (the task gets it as the call's result), --not-happened if
    it did not (the next run runs it again under the same key). A task waiting on the call is then
    runnable: a `tether worker` continues it."""
    if (result is None) == (not not_happened):
        raise click.UsageError("give one of --result JSON (its effect happened) and --not-happened")
    value: Any = UNSET
    if result is not None:
        try:
            value = orjson.loads(result)
        except orjson.JSONDecodeError as exc:
            hint = """a string is quoted: --result '"ch_123"'"""
            raise click.BadParameter(f"{result!r} is not JSON ({exc}); {hint}", param_hint="--result") from None
    app = _open(db, write=True)
    task_id = _tid(app, task_id)
    handle = TaskHandle.of(app.resolve_call(task_id, n, value, happened=not not_happened, actor=actor))
    if as_json:
        _handle(console(), handle, as_json)
        return
    done = "it runs again under its key" if not_happened else "its result is recorded"
    out = console()
    out.print(
        f"call #{n} of {task_id} settled: {done}; now {_status(handle.status.value)}, runnable: "
        f"a `tether worker` continues it (or `tether resume {task_id} --app MODULE:APP`)"
    )


@main.command()
@task_argument
@click.option(
    "--reason",
    default="cancelled from the command line",
    show_default=True,
    help="why, recorded in the history and shown with the task",
)
@app_option
@json_option
@actor_option
@errors_as_messages
def cancel(task_id: str, reason: str, app_spec: str, as_json: bool, actor: str | None) -> None:
    """Cancel a task; its completed calls are compensated in reverse order. Cancelling a cancelled
    task changes nothing and says so (exit 0); a task that finished otherwise is refused (exit 1)."""
    app = _load_app(app_spec)
    task_id = _tid(app, task_id)
    already = app.log.get(task_id).status == tether.Status.CANCELLED.value
    try:
        handle = app.cancel(task_id, reason, actor=actor)
    except (tether.TaskBusyError, tether.ConflictError) as busy:  # recorded: the run that holds the task acts
        held = app.get(task_id)
        owner = getattr(busy, "owner", None) or "the run that holds it"
        failing = held.state.failure is not None  # it compensates its failure, and ends failed
        if as_json:
            emit_json({**_handle_json(held), "cancel_requested": True, "held_by": owner, "ends_failed": failing})
            return
        then = (
            "is compensating the task's failure and ends it failed (the cancel is recorded)"
            if failing
            else "is running it and carries the cancel out itself (a run inside a call keeps its lease until "
            "the call returns: its effect may be under way)"
        )
        console().print(f"cancel of {escape(task_id)} requested: {escape(str(owner))} {then}")
        return
    if handle.status is not tether.Status.CANCELLED:  # it did not end cancelled: say how it ended
        _handle(console(), handle, as_json)
        return
    if as_json:
        emit_json({**_handle_json(handle), "already_cancelled": already})
        return
    state = handle.state
    why = f": {escape(state.cancel_reason)}" if state.cancel_reason else ""
    if already:
        console().print(f"{escape(task_id)} was already cancelled{why}; nothing changed")
        return
    undone = sum(1 for call in state.calls if call.kind == "compensation")
    console().print(f"cancelled {escape(task_id)}{why} ({undone} call{'s' if undone != 1 else ''} compensated)")


@main.command()
@click.argument("app_spec", metavar="MODULE:APP")
@click.option(
    "--concurrency", "-c", default=1, show_default=True, type=click.IntRange(1, 1024), help="tasks run at once"
)
@click.option("--idle-exit", is_flag=True, help="exit when there is nothing left to run")
@click.option(
    "--poll",
    default=0.5,
    show_default=True,
    type=click.FloatRange(0, min_open=True),
    help="seconds between looks when idle",
)
@click.option(
    "--grace",
    default=30.0,
    show_default=True,
    type=click.FloatRange(0),
    help="seconds to finish running tasks on SIGTERM",
)
@click.option(
    "--heartbeat",
    default=30.0,
    show_default=True,
    type=click.FloatRange(0, 30, min_open=True),
    help="seconds between the worker's records that it is alive (what show and the inspector read)",
)
@click.option("--quiet", "-q", is_flag=True, help="no line per task run")
@click.option("--verbose", "-v", is_flag=True, help="a line when each run starts too, and tether's warnings")
@errors_as_messages
def worker(
    app_spec: str,
    concurrency: int,
    idle_exit: bool,
    poll: float,
    grace: float,
    heartbeat: float,
    quiet: bool,
    verbose: bool,
) -> None:
    """Claim and run runnable tasks of an app until stopped (SIGTERM finishes running tasks first).

    One line per task run on stderr: when it started and ended, the task, its type, the status it
    reached and how long the run took (--verbose: a line as each run starts too; --quiet: none)."""
    app = _load_app(app_spec)
    err = console(stderr=True)
    err.print(f"worker {app.worker_id} on {app.store.url} (concurrency {concurrency})")
    handler = _RunLines(app, err, verbose)
    worker_log = logging.getLogger("tether.worker")
    if not quiet:
        worker_log.addHandler(handler)
        worker_log.setLevel(logging.DEBUG if verbose else logging.INFO)
    try:
        runs = app.run_worker(
            concurrency=concurrency, idle_exit=idle_exit, poll=poll, grace=grace, target=app_spec, heartbeat=heartbeat
        )
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
        from datetime import UTC, datetime

        # UTC, as history, logs and the API give times: a line is matched against them
        when = datetime.fromtimestamp(record.created, UTC).strftime("%H:%M:%S")
        action = getattr(record, "tether_action", None)
        if action not in ("claimed", "finished"):
            if record.levelno >= logging.WARNING:
                self.out.print(f"{when} [yellow]{escape(record.getMessage())}[/]")
            return
        task_id: str = record.tether_task_id  # type: ignore[attr-defined]
        status: str | None = getattr(record, "tether_status", None)
        seconds: float = getattr(record, "tether_duration_s", 0.0)
        try:
            task_type = self.app.log.get(task_id).type
        except TetherError:
            task_type = "?"
        if status is None:
            if self.verbose:
                self.out.print(f"{when} {task_id} {task_type} started")
            return
        began = datetime.fromtimestamp(record.created - seconds, UTC).strftime("%H:%M:%S")
        self.out.print(f"{began}–{when} {task_id} {task_type} {_status(status)} in {seconds:.2f}s")
