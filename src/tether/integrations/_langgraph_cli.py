"""``tether langgraph`` (and ``python -m tether.integrations.langgraph``): LangGraph threads as tether
stores them.

A thread is an internal stream, so ``tether tasks`` (which lists tasks) does not show it and
``tether show`` (which folds a task's state) cannot read it; ``tether history langgraph:THREAD``
lists its events. These commands are the thread's own views: ``threads``, ``show``, ``history``.
"""

from __future__ import annotations

from typing import Any

import click
import orjson
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from tether.cli import (
    CONTEXT,
    console,
    current_tenant,
    db_option,
    emit_json,
    errors_as_messages,
    existing_url,
    json_option,
    shorten,
)
from tether.cli import table as plain_table
from tether.integrations._langgraph_log import (
    CheckpointSaved,
    CheckpointsDeleted,
    WritesSaved,
    decode_json,
    list_threads,
    read_thread,
    stream_id,
)
from tether.log import TaskLog


def _log(db: str | None) -> TaskLog:
    return TaskLog(existing_url(db), tenant=current_tenant())  # a missing database refused, as every verb does


# Threads are read as TetherSaver reads them (the fold in _langgraph_log), with the serializer it
# uses unless given another; no saver is needed, nor its worker thread.
_SERDE = JsonPlusSerializer()


@click.group(context_settings=CONTEXT)
def main() -> None:
    """LangGraph threads kept by TetherSaver: list them, show one's latest state, list its events."""


@main.command()
@db_option
@json_option
@errors_as_messages
def threads(db: str | None, as_json: bool) -> None:
    """Threads, most recently written first: checkpoints, namespaces, the newest checkpoint."""
    log = _log(db)
    infos = list_threads(log, _SERDE, lambda thread_id: read_thread(log, thread_id), limit=100)
    if as_json:
        emit_json(infos)
        return
    table = plain_table("thread", "checkpoints", "namespaces", "latest checkpoint", "step", "events")
    for i in infos:
        table.add_row(
            i["thread_id"],
            str(i["checkpoints"]),
            str(len(i["namespaces"])),
            i["latest"] or "",
            str(i["step"]),
            str(i["events"]),
        )
    console().print(table if infos else "no LangGraph threads")


@main.command()
@click.argument("thread_id")
@click.option("--ns", default="", help="the checkpoint namespace (default: the graph's own)")
@db_option
@json_option
@errors_as_messages
def show(thread_id: str, ns: str, db: str | None, as_json: bool) -> None:
    """The thread's newest checkpoint: its values (lists by their length and last item) and pending writes."""
    view = read_thread(_log(db), thread_id)
    saved = view.latest(ns)
    if saved is None:
        raise click.ClickException(f"no checkpoint for thread {thread_id!r} in namespace {ns!r}")
    values = {k: _describe(v) for k, v in view.values(_SERDE, saved).items()}
    writes = [{"task": t, "channel": c, "value": _describe(v)} for t, c, v in view.pending_writes(_SERDE, saved)]
    meta = decode_json(_SERDE, saved.metadata)
    if as_json:
        config = {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": saved.id}
        emit_json(
            {
                "config": {"configurable": config},
                "metadata": orjson.loads(orjson.dumps(meta, default=str)),
                "values": values,
                "pending_writes": writes,
            }
        )
        return
    out = console()
    out.print(f"[bold]{thread_id}[/] {ns or '(root)'} checkpoint {saved.id}")
    out.print(f"step {meta.get('step')} from {meta.get('source')}")
    for channel, text in values.items():
        out.print(f"  {channel}: {text}")
    for w in writes:
        out.print(f"  pending {w['channel']} from task {w['task'][:8]}: {w['value']}")


@main.command()
@click.argument("thread_id")
@db_option
@json_option
@errors_as_messages
def history(thread_id: str, db: str | None, as_json: bool) -> None:
    """Every event of the thread, in order: checkpoints (with what each stored), writes, deletions."""
    log = _log(db)
    rows = log.store.read_events(log.tenant, stream_id(thread_id))
    if not rows:
        raise click.ClickException(f"no LangGraph thread {thread_id!r}")
    entries = []
    for row in rows:
        rec = log.decode(row)
        ev = rec.event
        entry: dict[str, Any] = {
            "seq": rec.seq,
            "at": rec.time.isoformat(),
            "event": ev.event_type,
            "bytes": len(row.data),
        }
        if isinstance(ev, CheckpointSaved):
            meta = ev.metadata
            entry.update(
                ns=ev.ns,
                checkpoint=ev.id,
                step=meta.get("step"),
                source=meta.get("source"),
                stored={k: _stored(v) for k, v in ev.values.items()},
            )
        elif isinstance(ev, WritesSaved):
            entry.update(ns=ev.ns, checkpoint=ev.checkpoint_id, task=ev.task_id, channels=[w[1] for w in ev.writes])
        elif isinstance(ev, CheckpointsDeleted):
            entry.update(reason=ev.reason, checkpoints=[cid for _, cid in ev.checkpoints])
        entries.append(entry)
    if as_json:
        emit_json(entries)
        return
    table = plain_table("seq", "time", "event", "ns", "checkpoint", "details", "bytes")
    for e in entries:
        if e["event"] == "CheckpointSaved":
            details = f"step {e['step']} {e['source']}: " + ", ".join(f"{k} {v}" for k, v in e["stored"].items())
        elif e["event"] == "WritesSaved":
            details = f"task {e['task'][:8]}: " + ", ".join(e["channels"])
        else:
            details = f"{e['reason']}: {len(e['checkpoints'])} checkpoints"
        table.add_row(
            str(e["seq"]),
            e["at"][11:23],
            e["event"],
            shorten(e.get("ns", "") or "", 16),
            (e.get("checkpoint") or "")[-12:],
            shorten(details, 70),
            str(e["bytes"]),
        )
    console().print(table)


def _stored(spec: list[Any]) -> str:
    """What a stored value holds, in words: ``+2`` items appended, ``[5]`` a whole list, ``=`` a whole value."""
    kind = spec[0]
    if kind == "a":
        return f"+{len(spec[1])}" + (" (from another)" if len(spec) > 2 else "")
    if kind == "l":
        return f"[{len(spec[1])}]"
    if kind == "d":
        return "{" + ", ".join(f"{k} {_stored(v)}" for k, v in spec[1].items()) + "}"
    return "=" if kind == "f" else "empty"


def _describe(value: Any) -> str:
    if isinstance(value, list):
        last = shorten(_text(value[-1]), 60) if value else ""
        return f"{len(value)} items" + (f", last: {last}" if last else "")
    return shorten(_text(value), 80)


def _text(value: Any) -> str:
    content = getattr(value, "content", None)
    if content is not None:
        return f"{type(value).__name__}: {content}"
    try:
        return orjson.dumps(value, default=str).decode()
    except TypeError:
        return repr(value)
