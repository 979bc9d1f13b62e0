"""The inspector's task page, server-rendered: its first screen tells the task's story.

From the top: the task's status with what was asked of it and not yet acted on (an answer, a
cancel, a retry), whether a worker holds it or why none does, where it stands and its latest
event; then what needs a person (a parked run, the failure, the question it waits on), the
steering actions, the timeline newest first beside the state (a tree the script draws from the
JSON here, the last event's changes marked), and the calls, decisions, output, fork tree and
conversation, each only when there is something in it.
"""

from __future__ import annotations

import time
from typing import Any

from tether.errors import TetherError
from tether.events import in_doubt_call
from tether.model import TaskState
from tether.model.status import TERMINAL, Status
from tether.runtime.app import App
from tether.runtime.liveness import liveness
from tether.serve._html import data, e, link, short, when
from tether.serve._ids import shown, visible
from tether.serve._json import jsonable, requested
from tether.store import TaskRow
from tether.telemetry import TaskUsage, Usage, task_usage
from tether.timetravel import HistoryEntry

__all__ = ["call_named", "doubt_section", "task_body"]

SHOWN_EVENTS = 200
"""Events the timeline shows at first, newest first; the older ones load on request."""
_IDLE = 30.0
"""Seconds a runnable task may go untaken before the page says no worker took it up."""
_REQUEST_EVENT = {"answer": "InputReceived", "cancel": "CancelRequested", "retry": "RetryRequested"}
_REQUEST_LABEL = {"answer": "answered", "cancel": "cancel requested", "retry": "retry requested"}


def task_body(app: App, row: TaskRow, state: TaskState, history: list[HistoryEntry], *, alive_within: float) -> str:
    """The task page's body (a worker seen in the last ``alive_within`` seconds counts as alive)."""
    now = time.time()
    return (
        f'<div id="task" data-task="{e(state.task_id)}" data-version="{state.version}" '
        f'data-status="{e(state.status.value)}">'
        f"{_header(state, row)}{_story(app, row, state, history, now, alive_within)}"
        f"{_parked(row.parked)}{_failure(state)}{_waiting(state)}{_actions(state)}"
        f'<div class="columns">{_timeline(history)}{_inspect(app, state)}</div>'
        f"{_calls(state)}{_decisions(state)}{_output(state)}"
        '<section id="fork-tree" hidden><h2>Fork tree</h2><div id="tree"></div></section>'
        f"{_conversation(state)}</div>"
    )


def _header(state: TaskState, row: TaskRow) -> str:
    parent = f" · fork of {link(row.parent_id)}" if row.parent_id else ""
    return (
        f'<h1>{shown(state.task_id)}</h1><p class="meta">{shown(state.type)} · '
        f'<span class="status {e(state.status.value)}">{e(state.status.value)}</span>{parent}</p>'
    )


def _story(
    app: App, row: TaskRow, state: TaskState, history: list[HistoryEntry], now: float, alive_within: float
) -> str:
    """Where the task stands, in sentences: status, request, worker, position, latest event."""
    kind = requested(state)
    status = state.status.value.replace("_", " ")
    latest = history[-1] if history else None
    latest_line = (
        f'<p class="latest">Latest: <a href="#timeline"><span class="seq">#{latest.seq}</span> '
        f"{e(latest.type)}</a> — {e(visible(latest.summary))} {when(latest.at)}</p>"
        if latest is not None
        else ""
    )
    return (
        f'<section id="story" aria-label="Where the task stands"><p class="headline">'
        f'<span class="pill {e(state.status.value)}">{e(status)}</span>'
        f"{_request_badge(kind)} <span>{e(state.position)}</span></p>"
        f"{_request_line(kind, history)}{_waits_line(state, kind)}"
        f"{_worker_line(app, row, state, kind, now, alive_within)}"
        f"{latest_line}</section>"
    )


def _request_badge(kind: str | None) -> str:
    return f' <span class="pill requested">{_REQUEST_LABEL[kind]}</span>' if kind else ""


def _request_line(kind: str | None, history: list[HistoryEntry]) -> str:
    """What was asked of the task and not acted on yet, by whom and when."""
    if kind is None:
        return ""
    entry = next((h for h in reversed(history) if h.type == _REQUEST_EVENT[kind]), None)
    actor = getattr(entry.event, "actor", None) if entry is not None else None
    by = f" by {shown(actor)}" if actor else ""
    at = f" {when(entry.at)}" if entry is not None else ""
    said = {
        "answer": f"Answered{by}{at}: a worker continues it from here.",
        "cancel": f"Cancel requested{by}{at}: a worker stops it and runs the compensations of its completed "
        "calls, newest first.",
        "retry": f"Retry requested{by}{at}: a worker runs it again; recorded calls return their results.",
    }[kind]
    return f'<p class="request" data-requested="{kind}">{said}</p>'


def _waits_line(state: TaskState, kind: str | None) -> str:
    if state.waiting is None or kind is not None:
        return ""
    w = state.waiting
    n = in_doubt_call(w.key)
    if n is not None:
        return f'<p class="waits">Waits for a person to settle call #{n}, in doubt (below).</p>'
    prompt = f": {e(w.prompt)}" if w.prompt else ""
    return (
        f'<p class="waits">Waits for an answer to <code>{shown(w.key)}</code>{prompt} <a href="#answer">Answer</a></p>'
    )


def _worker_line(app: App, row: TaskRow, state: TaskState, kind: str | None, now: float, alive_within: float) -> str:
    """Whether a worker holds the task, will take it up, or why nothing moves — and, when the task
    needs one, whether any worker is alive (their liveness records) and how to start one."""
    if state.status in TERMINAL:
        return f'<p class="worker">Finished {when(row.updated_at)}.</p>'
    held = row.held_by(now)
    if held is not None:
        until = f" (its lease runs to {when(row.lease_expires)})" if row.lease_expires else ""
        return f'<p class="worker live">Worker <code>{shown(held)}</code> holds it{until}.</p>'
    if row.parked is not None:
        return '<p class="worker idle">Parked: no worker runs it until someone acts on it (below).</p>'
    workers = liveness(app.store, app.tenant, now, within=alive_within)
    note = workers.note()
    if state.status is Status.AWAITING_INPUT and kind is None:
        later = f" Once it is, {_coded(note)}." if note else ""
        return f'<p class="worker" data-alive="{workers.alive}">No worker is needed until it is answered.{later}</p>'
    due = row.due_at
    if note is not None:
        then = f"at {when(due)} " if due is not None and due > now else ""
        return f'<p class="worker idle" data-alive="0">A worker is needed {then}to move it on, and {_coded(note)}.</p>'
    alive = f"{workers.alive} worker{'s' if workers.alive != 1 else ''} alive"
    if due is not None and due > now:
        return f'<p class="worker" data-alive="{workers.alive}">A worker continues it at {when(due)} ({alive}).</p>'
    since = due if due is not None else row.updated_at
    if now - since < _IDLE:
        return (
            f'<p class="worker" data-alive="{workers.alive}">Runnable: the next free worker takes it up ({alive}).</p>'
        )
    return (
        f'<p class="worker idle" data-alive="{workers.alive}">No worker has taken it up since {when(since)}; '
        f"{alive}, busy with other tasks or not running this task's type.</p>"
    )


def _coded(text: str) -> str:
    """``text`` escaped for HTML, each pair of backticks a ``<code>``: a sentence written for a
    terminal (:meth:`tether.runtime.liveness.Liveness.note`), as a page shows it."""
    parts = e(text).split("`")
    return "".join(f"<code>{part}</code>" if i % 2 else part for i, part in enumerate(parts))


def _parked(parked: str | None) -> str:
    """Why no worker runs the task (its run could not go on), and what moves it on."""
    if parked is None:
        return ""
    return (
        '<section class="parked failed"><h2>Parked: no worker runs it until someone acts on it</h2>'
        f'<p class="failure">{e(parked)}</p><p>Fix the code and resume it, or answer, cancel or retry it: '
        "any of these moves it on.</p></section>"
    )


def failure_text(state: TaskState) -> str:
    """Why a failed or cancelled task ended, in words for the page (no command lines)."""
    if state.status is Status.CANCELLED:
        return "Cancelled" + (f": {state.cancel_reason}" if state.cancel_reason else ".")
    failure = state.failure
    if failure is None:
        return "Failed."
    where = f" at step {failure.step!r}" if failure.step else ""
    where += f" in tool {failure.tool!r}" if failure.tool else ""
    call = next((c for c in state.calls if c.key == failure.call_key), None) if failure.call_key else None
    tries = f" after {len(call.attempts)} attempt{'s' if len(call.attempts) != 1 else ''}" if call else ""
    return f"Failed{where}{tries}: {failure.exception_type}: {failure.message}"


def _failure(state: TaskState) -> str:
    """The failure banner, with the traceback folded away."""
    if state.status not in (Status.FAILED, Status.CANCELLED):
        return ""
    hint = (
        "<p>Fix the code the workers run, then retry it: a worker runs it again, and the calls it "
        "recorded return their results.</p>"
        if state.status is Status.FAILED
        else ""
    )
    out = f'<section class="failure" role="alert"><h2>{e(failure_text(state))}</h2>{hint}'
    if state.failure is not None and state.failure.traceback:
        out += f"<details><summary>Traceback</summary><pre>{e(state.failure.traceback)}</pre></details>"
    return out + "</section>"


def call_named(n: int, call: Any) -> str:
    return f"call #{n} <code>{shown(call.tool)}()</code>" if call is not None else f"call #{n}"


def doubt_section(task_id: str, n: int, call: Any, title: str) -> str:
    """A call in doubt (started, its result never recorded), for a person to settle instead of an
    answer: what it was, and the two actions the script posts to ``…/calls/N/resolve``."""
    key = f" under key <code>{shown(call.key)}</code>" if call is not None else ""
    args = f'<p class="args">args: <code>{e(short(call.args, 2000))}</code></p>' if call is not None else ""
    return (
        f'<section class="doubt" data-task="{e(task_id)}" data-n="{n}">{title}'
        f'<p class="prompt">It started{key}, and its result was never recorded (its process '
        "stopped inside it): its effect may or may not have happened. Check the other system, then say what "
        f"happened. No worker runs the task until then.</p>{args}"
        '<form class="happened"><label>its result, as JSON '
        '<textarea name="result" rows="3" required placeholder="{&quot;id&quot;: &quot;ch_123&quot;}"></textarea>'
        '</label><button type="submit">It happened</button></form>'
        '<form class="not-happened"><button type="submit">It did not happen</button> '
        '<span class="hint">the call runs again, under the same key</span></form>'
        '<p class="result" role="status" aria-live="polite"></p></section>'
    )


def _waiting(state: TaskState) -> str:
    """The question a task waits on, with the form the script fills from its JSON schema; for a
    call in doubt, the call and the two ways to settle it instead."""
    if state.waiting is None:
        return ""
    w = state.waiting
    n = in_doubt_call(w.key)
    if n is not None:
        call = state.call(n)
        title = f"<h2>Waiting for a person: {call_named(n, call)} is in doubt</h2>"
        return doubt_section(state.task_id, n, call, title)
    return (
        f'<section class="input" id="answer" data-task="{e(state.task_id)}" data-key="{e(w.key)}"><h2>Answer '
        f'<code>{shown(w.key)}</code></h2><p class="prompt">{e(w.prompt or "")}</p>'
        f'<script type="application/json" class="schema">{data(w.input_schema)}</script>'
        '<form class="answer"></form><p class="result" role="status" aria-live="polite"></p></section>'
    )


def _actions(state: TaskState) -> str:
    """Retry (a failed task), cancel (asked to confirm first: it runs compensations) and fork (at an
    event, under a name of the reader's choosing)."""
    buttons = []
    if state.status is Status.FAILED:
        buttons.append('<button type="button" class="retry">Retry</button>')
    if state.status not in TERMINAL and state.cancel_reason is None:  # once asked, a cancel is on its way
        buttons.append(
            '<button type="button" class="cancel" aria-haspopup="dialog">Cancel…</button>'
            '<dialog id="confirm-cancel" aria-labelledby="confirm-cancel-title"><form method="dialog">'
            '<h2 id="confirm-cancel-title">Cancel this task?</h2><p>A worker stops it and runs the '
            "compensations of its completed calls, newest first. A cancelled task cannot go on.</p>"
            '<label>Reason <input name="reason" maxlength="2000" value="cancelled from the inspector"></label>'
            '<div class="buttons"><button value="confirm" class="danger">Yes, cancel it</button>'
            '<button value="keep" autofocus>Keep it</button></div></form></dialog>'
        )
    return (
        f'<section class="actions" aria-label="Steer this task">{"".join(buttons)}'
        '<form class="fork"><label>Fork at event <input type="number" name="at" min="1" '
        f'max="{state.version}" value="{state.version}" required></label>'
        '<label>named <input name="new_id" maxlength="512" placeholder="new id (optional)" autocomplete="off"></label>'
        '<button type="submit">Fork</button></form></section>'
        '<p class="result" id="action-result" role="status" aria-live="polite"></p>'
    )


def _timeline(history: list[HistoryEntry]) -> str:
    """The events, newest first: the latest are what a person came to see."""
    newest = history[::-1][:SHOWN_EVENTS]
    older = len(history) - len(newest)
    more = (
        f'<button type="button" id="older" data-before="{newest[-1].seq}">Show {older:,} older events</button>'
        if older
        else ""
    )
    return (
        f'<section id="history"><h2>Timeline <span class="count">{len(history):,} events, newest first</span></h2>'
        f'<ol id="timeline">{"".join(point(h) for h in newest)}</ol>{more}</section>'
    )


def point(h: HistoryEntry) -> str:
    """One event of the timeline, a button that shows the state after it."""
    boundary = f'<span class="boundary">{e(h.boundary)}</span>' if h.boundary else ""
    return (
        f'<li class="point {e(h.type)}" data-seq="{h.seq}"><button type="button" class="at" '
        f'aria-label="Show the state after event #{h.seq}">{boundary}<span class="seq">#{h.seq}</span> '
        f'<span class="type">{e(h.type)}</span> <span class="what">{e(visible(h.summary))}</span></button>'
        f"{when(h.at)}</li>"
    )


def _inspect(app: App, state: TaskState) -> str:
    """The state now, for the script to draw as a tree, with the paths the last event changed."""
    changes: dict[str, Any] = {"at": state.version, "patch": [], "text": "the first event"}
    if state.version > 1:
        try:
            diff = app.diff(state.task_id, state.version - 1, state.version)
            changes.update(patch=jsonable(diff.patch), text=diff.render())
        except TetherError as exc:  # a history the diff cannot read still shows its state
            changes["text"] = str(exc)
    return (
        '<section id="inspect"><h2>State <span id="at">now</span></h2>'
        f'<p class="changes-title">Changed by event <span id="changes-at">#{state.version}</span></p>'
        f'<pre id="diff">{e(_lines_visible(changes["text"]))}</pre><div id="state-tree" class="tree-view"></div>'
        f'<script type="application/json" id="state-data">{data({"state": state, "changes": changes})}</script>'
        "</section>"
    )


def _lines_visible(text: str) -> str:
    """Text of several lines with each line's invisible characters made visible (its breaks kept)."""
    return "\n".join(visible(line) for line in text.split("\n"))


def _calls(state: TaskState) -> str:
    """The calls, one row each; with the tokens and cost of those that reported usage (a column,
    and the task's total above the table) when any did."""
    calls = list(state.calls)
    if not calls:
        return ""
    spent = task_usage(state)
    by_n = {c.n: c.usage for c in spent.calls}
    # Each cell names its column (data-label): on a narrow screen a row stacks as a card of
    # labelled lines (style.css), so no column runs off the side. The table's elements say their
    # roles: a table whose rows and cells CSS displays as blocks is no longer a table to some screen
    # readers (Safari's), which then read the cards as loose text.
    rows = "".join(
        f'<tr role="row" class="call {e(c.kind)}">{_cell("#", str(c.n))}'
        + _cell("tool", e(c.tool) + (" (compensation)" if c.kind == "compensation" else ""))
        + _cell("status", e(c.status))
        + _cell("args", f"<code>{e(short(c.args))}</code>")
        + _cell("result", f"<code>{e(short(c.result))}</code>")
        + _cell("attempts", _attempts(c))
        + _cell("duration", e(_duration(c)))
        + (_cell("tokens", e(_spent(by_n[c.n]) if c.n in by_n else ""), ' class="usage"') if by_n else "")
        + "</tr>"
        for c in calls
    )
    total = _usage_total(spent) if spent.calls else ""
    heads = ["#", "tool", "status", "args", "result", "attempts", "duration"] + (["tokens"] if by_n else [])
    return (
        f'<section id="calls"><h2>Calls</h2>{total}<div class="scroll"><table role="table" class="calls">'
        '<thead role="rowgroup"><tr role="row">'
        + "".join(f'<th role="columnheader" scope="col">{e(h)}</th>' for h in heads)
        + f'</tr></thead><tbody role="rowgroup">{rows}</tbody></table></div></section>'
    )


def _cell(label: str, html: str, attributes: str = "") -> str:
    return f'<td role="cell"{attributes} data-label="{label}">{html}</td>'


def _spent(usage: Usage) -> str:
    """Tokens in and out, and the cost when one was reported (``ctx.usage(cost=...)``)."""
    cost = f" · cost {usage.cost:.4f}" if usage.cost is not None else ""
    return f"{usage.input_tokens:,} in · {usage.output_tokens:,} out{cost}"


def _usage_total(spent: TaskUsage) -> str:
    """The task's usage: what it spent itself, and for a fork what its parent spent before it."""
    own = spent.own
    line = f"Usage: {_spent(own)} over {own.calls} call{'s' if own.calls != 1 else ''}"
    if spent.inherited.calls:
        line += f"; inherited from before the fork: {_spent(spent.inherited)}"
    return f'<p class="usage-total">{e(line)}</p>'


def _attempts(call: Any) -> str:
    """How many attempts, and each failed one's error and backoff."""
    failed = "".join(
        f"<li>#{a.number}: {e(a.error_type)}: {e(a.message)}"
        + (f" (backoff {a.backoff:.2f}s)" if a.backoff else "")
        + "</li>"
        for a in call.attempts
        if a.error_type
    )
    return f"{len(call.attempts)}" + (f'<ul class="attempts">{failed}</ul>' if failed else "")


def _duration(call: Any) -> str:
    total = sum((a.duration or 0.0) for a in call.attempts if getattr(a, "duration", None) is not None)
    return f"{total * 1000:.0f} ms" if call.attempts else ""


def _decisions(state: TaskState) -> str:
    if not state.decisions:
        return ""
    items = "".join(
        f"<li><b>{e(d.name)}</b>: {e(short(d.choice))} — {e(d.rationale or '')}</li>" for d in state.decisions
    )
    return f'<section id="decisions"><h2>Decisions</h2><ul>{items}</ul></section>'


def _output(state: TaskState) -> str:
    if state.output is None:
        return ""
    return f'<section id="output"><h2>Output</h2><pre>{e(short(state.output, 2000))}</pre></section>'


def _conversation(state: TaskState) -> str:
    if not state.session_id:
        return ""
    return (
        f'<section id="conversation" data-session="{e(state.session_id)}">'
        '<h2>Conversation</h2><div class="chat" aria-live="polite"></div></section>'
    )
