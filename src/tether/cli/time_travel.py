"""Time travel: ``state`` at any point, ``diff`` between two, ``fork`` from one, ``replay`` and
``check`` against the current code, ``rewind`` to try again."""

from __future__ import annotations

import sys
from typing import Any

import click
import orjson
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
from tether.cli._render import _handle, _print_state_summary, _state_json, console, emit_json, shorten
from tether.cli.progress import progress_bar
from tether.timetravel import path_label, step_bounds, step_ref


@main.command()
@task_argument
@click.option("--at", "seq", type=click.IntRange(1), default=None, help="the state right after event SEQ")
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
    value = app.state(task_id, at=seq, before_step=step_ref(before_step), after_step=step_ref(after_step))
    if as_json:
        emit_json(_state_json(value))
        return
    if full:
        console().print_json(value.model_dump_json())
        return
    _print_state_summary(console(), value)


def _point(app: tether.App, task_id: str, text: str) -> int:
    """An event seq from a seq, a step name (right after it ended) or ``before:NAME``."""

    if text.isdigit():
        return int(text)
    before = text.startswith("before:")
    name = text.removeprefix("before:")
    start, end = step_bounds(app.log.events(task_id), step_ref(name))
    if before:
        return max(start - 1, 1)
    if end is None:
        raise click.BadParameter(f"step {name!r} has not ended; use before:{name} or a seq")
    return end


@main.command()
@task_argument
@click.argument("a")
@click.argument("b")
@click.option("--other", metavar="TASK", help="compare with this task's state at B (a fork, its parent)")
@db_option
@json_option
@errors_as_messages
def diff(task_id: str, a: str, b: str, other: str | None, db: str | None, as_json: bool) -> None:
    """What changed from point A to point B: an RFC 6902 JSON patch. A point is an event's seq, or a step's
    name (the state right after it ended; `before:NAME` just before it started).

    A patch's paths are RFC 6902's, whose list indices count from 0: each is labelled as history
    counts, from 1 (`/calls/7` is call #8)."""
    app = _open(db)
    task_id = _tid(app, task_id)
    other = _tid(app, other) if other is not None else None
    result = app.diff(task_id, _point(app, task_id, a), _point(app, other or task_id, b), other=other)
    if as_json:
        emit_json(result.patch)
        return
    out = console()
    out.print(f"[bold]{result.a} → {result.b}[/]" if result.patch else result.render())
    colours = {"add": "green", "remove": "red", "replace": "yellow"}
    for op in result.patch:
        value = f": {escape(shorten(op['value'], 90))}" if "value" in op else ""
        label = path_label(op["path"])
        where = escape(op["path"]) + (f" ({escape(label)})" if label else "")
        out.print(f"  [{colours.get(op['op'], 'cyan')}]{op['op']:7}[/] {where}{value}")


@main.command()
@task_argument
@click.option("--at", "seq", type=click.IntRange(1), required=True, help="the last event the fork shares")
@click.option("--id", "new_id", default=None, help="the fork's task id (default: a new one)")
@click.option("--inputs", default=None, help="new inputs for the fork, as a JSON object (needs --app)")
@click.option(
    "--app",
    "app_spec",
    default=None,
    metavar="MODULE:APP",
    help="where the task is registered (needed with --inputs); the fork is made in that app's store, not --db's",
)
@actor_option
@db_option
@json_option
@errors_as_messages
def fork(
    task_id: str,
    seq: int,
    new_id: str | None,
    inputs: str | None,
    app_spec: str | None,
    actor: str | None,
    db: str | None,
    as_json: bool,
) -> None:
    """A new task sharing TASK's history up to SEQ (by reference); resume it to run from there.

    New --inputs need the task's registered code: give --app MODULE:APP with them."""
    parsed = _fork_inputs(inputs)
    app = _fork_app(app_spec, db, with_inputs=parsed is not None)
    task_id = _tid(app, task_id)
    handle = app.fork(task_id, at=seq, new_id=new_id, inputs=parsed, actor=actor)
    if as_json:
        emit_json({"task_id": handle.task_id, "parent": task_id, "at": seq, "status": handle.status.value})
        return
    console().print(
        f"forked {task_id} at event {seq} → [bold]{handle.task_id}[/] ({handle.status.value}); "
        f"run it with `tether resume {handle.task_id} --app {escape(app_spec or 'MODULE:APP')}`"
    )


def _fork_app(app_spec: str | None, db: str | None, *, with_inputs: bool) -> tether.App:
    """The app to fork in: ``--app``'s, which has the task's code (a fork with new inputs needs it
    registered), in its own store and tenant; else the store ``--db`` names. ``--inputs`` without
    ``--app`` is refused before anything is opened."""
    if app_spec is None:
        if with_inputs:
            raise click.UsageError(
                "a fork with new --inputs needs the task's code: pass --app MODULE:APP (where the task is registered)"
            )
        return _open(db, write=True)
    if db is not None:
        raise click.UsageError("--app forks in its app's own store: give --app or --db, not both")
    app = _load_app(app_spec)
    tenant = click.get_current_context().meta.get("tether.tenant")
    if tenant is not None and tenant != app.tenant:
        raise click.UsageError(f"--tenant {tenant!r} is not the tenant of {app_spec} ({app.tenant!r})")
    return app


def _fork_inputs(inputs: str | None) -> dict[str, Any] | None:
    """``--inputs`` as the JSON object it must be (``None`` when not given)."""
    if inputs is None:
        return None
    try:
        parsed = orjson.loads(inputs)
    except orjson.JSONDecodeError as exc:
        raise click.BadParameter(f"not JSON: {exc}", param_hint="--inputs") from None
    if not isinstance(parsed, dict):
        raise click.BadParameter("must be a JSON object", param_hint="--inputs")
    return parsed


@main.command()
@task_argument
@click.option("--upto", type=click.IntRange(1), default=None, help="replay only the first UPTO events")
@app_option
@json_option
@errors_as_messages
def replay(task_id: str, upto: int | None, app_spec: str, as_json: bool) -> None:
    """Check that your current code replays TASK's log; runs no tool, writes nothing. Exit 1 if it diverges."""
    app = _load_app(app_spec)
    task_id = _tid(app, task_id)
    out = console()
    with out.status(f"replaying {task_id}…", spinner="dots"):
        report = app.replay(task_id, upto=upto)
    if as_json:
        emit_json(
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
@click.option(
    "--finished", type=click.IntRange(0), default=0, show_default=True, help="also the N most recent finished tasks"
)
@app_option
@json_option
@errors_as_messages
def check(finished: int, app_spec: str, as_json: bool) -> None:
    """Replay every unfinished task against your current code, running and writing nothing: run it before a
    deploy. One line per task that would diverge, then a summary; exit 1 if any diverges."""
    app = _load_app(app_spec)
    out = console()
    with progress_bar(out, quiet=as_json):  # counts and an ETA on a terminal; nothing in a pipe or with --json
        report = app.check(finished=finished)
    if as_json:
        emit_json(
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
@task_argument
@click.option("--to", "seq", type=click.IntRange(1), required=True, help="the last event to keep")
@actor_option
@app_option
@json_option
@errors_as_messages
def rewind(task_id: str, seq: int, actor: str | None, app_spec: str, as_json: bool) -> None:
    """Go back to event SEQ and try again; the abandoned branch stays listable as TASK~N."""
    app = _load_app(app_spec)
    _handle(console(), app.rewind(_tid(app, task_id), to=seq, actor=actor), as_json)
