"""The web inspector: server-rendered HTML pages, a little vanilla JavaScript, no build step, no CDN.

Pages: the task list (live over SSE, with search and filters), a task (timeline, calls, state at
any point and the diff from the point before, the fork tree, the conversation), the inbox of
pending inputs (forms made from their JSON schemas; for a call in doubt, the two ways to settle
it) and the failed tasks (with a retry button).
The JavaScript calls the same ``/v1`` API as any client, authenticated by the login cookie and
the CSRF header (see :mod:`tether.serve.auth`); the one plain form, log out, carries the CSRF
token as a field. Ids are linked percent-encoded and shown with their invisible characters
visible (see :mod:`tether.serve._ids`).
"""

from __future__ import annotations

import html
import json
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from typing import Any
from urllib.parse import parse_qs

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from tether.errors import TaskNotFoundError, TetherError
from tether.events import in_doubt_call
from tether.model.status import Status
from tether.runtime.app import App, failure_summary
from tether.serve._ids import segment, shown, visible
from tether.serve._json import jsonable, summary_json
from tether.serve.auth import CSRF_COOKIE, CSRF_HEADER, KEY_COOKIE, AuthError, Principal, csrf_matches, new_csrf_token
from tether.serve.keys import KeyRing
from tether.store import TaskFilter

__all__ = ["build_pages"]

_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; script-src 'self'; style-src 'self'; frame-ancestors 'none'",
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}
_STATIC = {"app.js": "text/javascript", "style.css": "text/css"}


def e(value: Any) -> str:
    """Escaped for HTML text and attribute values."""
    return html.escape("" if value is None else str(value), quote=True)


def link(task_id: str) -> str:
    """A link to a task's page: its id percent-encoded in the URL, shown safely in the text."""
    return f'<a href="/tasks/{e(segment(task_id))}">{shown(task_id)}</a>'


def _data(value: Any) -> str:
    """JSON for a ``<script type="application/json">`` block: ``<`` escaped so no tag can close it."""
    return json.dumps(jsonable(value)).replace("<", "\\u003c")


def _short(value: Any, limit: int = 160) -> str:
    text = json.dumps(jsonable(value), ensure_ascii=False)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def build_pages(
    app_for: Callable[[Principal], App], principal: Callable[[Request], Principal], keys: KeyRing, *, no_auth: bool
) -> APIRouter:
    """The inspector's routes: logging in and out, its static files, and its pages."""
    router = APIRouter(include_in_schema=False)
    frame = _Frame(app_for, principal, no_auth=no_auth)
    _add_login(router, keys, frame)
    _add_static(router)
    _add_pages(router, frame)
    return router


Render = Callable[[App, Request], str | Response]
"""A page's body, from the tenant's App and the request."""


@dataclass(frozen=True)
class _Frame:
    """What every page shares: who is asking, and the document around a page's body."""

    app_for: Callable[[Principal], App]
    principal: Callable[[Request], Principal]
    no_auth: bool

    def page(self, request: Request, title: str, body: str, who: Principal | None) -> HTMLResponse:
        token = request.cookies.get(CSRF_COOKIE) or new_csrf_token()
        nav = ""
        if who is not None:
            out = (
                ""
                if self.no_auth
                else f'<form method="post" action="/logout"><input type="hidden" name="csrf" value="{e(token)}">'
                "<button>Log out</button></form>"
            )
            nav = (
                '<nav><a href="/">Tasks</a><a href="/inbox">Inbox</a><a href="/failed">Failed</a>'
                f'<span class="who">{shown(who.tenant)} · {shown(who.name)}</span>{out}</nav>'
            )
        doc = (
            '<!doctype html><html lang="en"><head><meta charset="utf-8">'
            f'<meta name="viewport" content="width=device-width"><title>{e(visible(title))} · tether</title>'
            '<link rel="stylesheet" href="/static/style.css"><script src="/static/app.js" defer></script>'
            f"</head><body>{nav}<main>{body}</main></body></html>"
        )
        response = HTMLResponse(doc, headers=_HEADERS)
        if token != request.cookies.get(CSRF_COOKIE):
            response.set_cookie(CSRF_COOKIE, token, httponly=False, samesite="strict", path="/")
        return response

    def guarded(self, render: Render, title: str | Callable[[Request], str]) -> Callable[..., Any]:
        """A page for a signed-in principal: the login page for anyone else, errors shown in the frame."""

        def handler(request: Request) -> Response:
            try:
                who = self.principal(request)
            except AuthError as exc:
                if exc.status == 401:
                    return RedirectResponse("/login", status_code=303)
                return HTMLResponse(e(str(exc)), status_code=exc.status, headers=_HEADERS)
            try:
                out = render(self.app_for(who), request)
            except TaskNotFoundError as exc:
                return self.page(request, "not found", f'<p class="error">{e(visible(str(exc)))}</p>', who)
            except TetherError as exc:
                return self.page(request, "error", f'<p class="error">{e(visible(str(exc)))}</p>', who)
            named = title(request) if callable(title) else title
            return out if isinstance(out, Response) else self.page(request, named, out, who)

        return handler


def _add_login(router: APIRouter, keys: KeyRing, frame: _Frame) -> None:
    @router.get("/login")
    def login_form(request: Request, error: str = "") -> HTMLResponse:
        message = '<p class="error">That key is not valid.</p>' if error else ""
        body = (
            "<h1>tether</h1><p>Paste an API key (<code>tether keys create --tenant T --name N</code>).</p>"
            f'{message}<form method="post" action="/login" class="login">'
            '<input type="password" name="key" autocomplete="off" required placeholder="tk_…">'
            "<button>Log in</button></form>"
        )
        return frame.page(request, "log in", body, None)

    @router.post("/login")
    async def login(request: Request) -> Response:
        origin = request.headers.get("origin")
        if origin and origin.split("://", 1)[-1] != request.headers.get("host"):
            return HTMLResponse("cross-origin login refused", status_code=403, headers=_HEADERS)
        form = parse_qs((await request.body()).decode("utf-8", "replace"))
        secret = (form.get("key") or [""])[0].strip()
        if keys.verify(secret) is None:
            return RedirectResponse("/login?error=1", status_code=303)
        response = RedirectResponse("/", status_code=303)
        response.set_cookie(KEY_COOKIE, secret, httponly=True, samesite="strict", path="/")
        response.set_cookie(CSRF_COOKIE, new_csrf_token(), httponly=False, samesite="strict", path="/")
        return response

    @router.post("/logout")
    async def logout(request: Request) -> Response:
        """Log out: refused (403) without the CSRF token, as a form field or the header, so no other
        site can post the form and end the session."""
        form = parse_qs((await request.body()).decode("utf-8", "replace"))
        sent = (form.get("csrf") or [""])[0] or request.headers.get(CSRF_HEADER, "")
        if not csrf_matches(request.cookies.get(CSRF_COOKIE, ""), sent):
            return HTMLResponse(
                f"log out needs the CSRF token (the {CSRF_COOKIE} cookie) as the form's csrf field or the "
                f"{CSRF_HEADER} header",
                status_code=403,
                headers=_HEADERS,
            )
        response = RedirectResponse("/login", status_code=303)
        response.delete_cookie(KEY_COOKIE, path="/")
        return response


def _add_static(router: APIRouter) -> None:
    @router.get("/static/{name}")
    def static(name: str) -> Response:
        if name not in _STATIC:
            return Response("not found", status_code=404)
        text = resources.files("tether.serve").joinpath("static", name).read_text(encoding="utf-8")
        return Response(text, media_type=_STATIC[name], headers={"Cache-Control": "no-cache"})


def _add_pages(router: APIRouter, frame: _Frame) -> None:
    router.add_api_route("/", frame.guarded(_task_list, "tasks"), methods=["GET"])
    router.add_api_route(
        "/tasks/{task_id:tether_id}",  # the convertor of ids (see tether.serve._ids)
        frame.guarded(_task_page, lambda request: str(request.path_params["task_id"])),
        methods=["GET"],
    )
    router.add_api_route("/inbox", frame.guarded(_inbox, "inbox"), methods=["GET"])
    router.add_api_route("/failed", frame.guarded(_failed, "failed"), methods=["GET"])


def _task_list(app: App, request: Request) -> str:
    status = request.query_params.get("status") or ""
    q = request.query_params.get("q") or ""
    statuses = (status,) if status in {s.value for s in Status} else None
    rows = app.store.list_tasks(app.tenant, TaskFilter(status=statuses), limit=1000, offset=0)
    if q:
        rows = [r for r in rows if q.lower() in f"{r.task_id} {r.type} {r.user_id or ''}".lower()]
    shown = rows[:100]
    options = "".join(
        f'<option value="{s.value}"{" selected" if s.value == status else ""}>{s.value}</option>' for s in Status
    )
    lines = "".join(_task_row(summary_json(app, r)) for r in shown)
    return (
        f'<h1>Tasks</h1><form class="filters" method="get" action="/">'
        f'<input name="q" value="{e(q)}" placeholder="search id, type, user" id="search">'
        f'<select name="status" id="status-filter"><option value="">any status</option>{options}</select>'
        f'<button>Filter</button></form><p class="count" id="count">{len(shown):,} of {len(rows):,}</p>'
        '<table id="tasks" data-live="1"><thead><tr><th>task</th><th>type</th><th>status</th><th>position</th>'
        f"<th>waiting for</th><th>held by</th><th>updated</th></tr></thead><tbody>{lines}</tbody></table>"
    )


def _task_page(app: App, request: Request) -> str:
    task_id = request.path_params["task_id"]
    row = app.store.get_task(app.tenant, task_id)
    if row is None or row.type.startswith("tether."):
        raise TaskNotFoundError(task_id, tenant=app.tenant)
    state = app.state(task_id)
    history = app.history(task_id)
    return _task_body(app, state, history, row.parent_id, row.parked)


def _inbox(app: App, request: Request) -> str:
    items = app.pending_inputs(limit=200)
    cards = "".join(
        _inbox_doubt(app, p)
        if in_doubt_call(p.key) is not None
        else (
            f'<section class="input" data-task="{e(p.task_id)}" data-key="{e(p.key)}">'
            f"<h2>{link(p.task_id)} · {shown(p.type)} "
            f"waits for <code>{shown(p.key)}</code></h2>"
            f'<p class="prompt">{e(p.prompt or "")}</p>'
            f'<script type="application/json" class="schema">{_data(p.schema)}</script>'
            '<form class="answer"></form><p class="result"></p></section>'
        )
        for p in items
    )
    return f'<h1>Inbox</h1><p class="count">{len(items):,} waiting</p>{cards or "<p>Nothing waits for an answer.</p>"}'


def _failed(app: App, request: Request) -> str:
    rows = app.store.list_tasks(app.tenant, TaskFilter(status=(Status.FAILED.value,)), limit=200, offset=0)
    cards = []
    for r in rows:
        try:
            text = failure_summary(app.state(r.task_id))
        except TetherError as exc:
            text = str(exc)
        cards.append(
            f'<section class="failed" data-task="{e(r.task_id)}"><h2>{link(r.task_id)}'
            f' · {shown(r.type)}</h2><p class="failure">{e(text)}</p>'
            '<button class="retry">Retry</button><p class="result"></p></section>'
        )
    return f"<h1>Failed tasks</h1>{''.join(cards) or '<p>No failed tasks.</p>'}"


def _task_row(s: dict[str, Any]) -> str:
    return (
        f'<tr data-task="{e(s["task_id"])}"><td>{link(s["task_id"])}</td>'
        f'<td>{shown(s["type"])}</td><td class="status {e(s["status"])}">{e(s["status"])}</td>'
        f"<td>{e(s['position'])}</td><td>{shown(s['waiting_for'] or '')}</td><td>{shown(s['held_by'] or '')}</td>"
        f"<td>{e((s['updated_at'] or '')[:19])}</td></tr>"
    )


def _task_body(app: App, state: Any, history: list[Any], parent_id: str | None, parked: str | None = None) -> str:
    tid = state.task_id
    actions = []
    if state.status is Status.FAILED:
        actions.append('<button class="retry">Retry</button>')
    if state.status.value not in ("completed", "failed", "cancelled"):
        actions.append('<button class="cancel">Cancel</button>')
    decisions = "".join(
        f"<li><b>{e(d.name)}</b>: {e(_short(d.choice))} — {e(d.rationale or '')}</li>" for d in state.decisions
    )
    parent = f" · fork of {link(parent_id)}" if parent_id else ""
    session = (
        f'<section id="conversation" data-session="{e(state.session_id)}">'
        '<h2>Conversation</h2><div class="chat"></div></section>'
        if state.session_id
        else ""
    )
    return (
        f'<div id="task" data-task="{e(tid)}" data-version="{state.version}"><h1>{shown(tid)}</h1>'
        f'<p class="meta">{shown(state.type)} · '
        f'<span class="status {e(state.status.value)}">{e(state.status.value)}</span>'
        f" · {e(state.position)}{parent}</p>"
        f'<div class="actions">{"".join(actions)}<form class="fork"><label>Fork at event '
        f'<input type="number" name="at" min="1" max="{state.version}" value="{state.version}"></label>'
        f'<button>Fork</button></form></div><p class="result" id="action-result"></p>'
        f"{_parked_section(parked)}{_failure_section(state)}{_waiting_section(state)}"
        '<div class="columns"><section><h2>Timeline</h2><ol id="timeline">'
        f'{_timeline(history)}</ol></section><section id="inspect"><h2>State at <span id="at">now</span></h2>'
        '<h3>Changes from the point before</h3><pre id="diff">click a point in the timeline</pre>'
        '<h3>State</h3><pre id="state"></pre></section></div>'
        f'<h2>Calls</h2><table class="calls"><thead><tr><th>#</th><th>tool</th><th>status</th><th>args</th>'
        f"<th>result</th><th>attempts</th><th>duration</th></tr></thead><tbody>{_call_rows(state.calls)}</tbody></table>"
        f"<h2>Decisions</h2><ul>{decisions or '<li>none</li>'}</ul>"
        f"<h2>Output</h2><pre>{e(_short(state.output, 2000))}</pre>"
        f'<section><h2>Fork tree</h2><div id="tree"></div></section>{session}</div>'
    )


def _failure_section(state: Any) -> str:
    """Why a failed or cancelled task ended, with the traceback folded away."""
    if state.status not in (Status.FAILED, Status.CANCELLED):
        return ""
    failure = f'<div class="failure"><h2>Failure</h2><p>{e(failure_summary(state))}</p>'
    if state.failure is not None and state.failure.traceback:
        failure += f"<details><summary>traceback</summary><pre>{e(state.failure.traceback)}</pre></details>"
    return failure + "</div>"


def _inbox_doubt(app: App, p: Any) -> str:
    """An inbox card for a task waiting on a call in doubt: the call, and the two ways to settle it."""
    n = in_doubt_call(p.key)
    assert n is not None
    try:
        call = app.state(p.task_id).call(n)
    except TetherError:  # one unreadable stream must not hide the others: the card says less
        call = None
    title = f"<h2>{link(p.task_id)} · {shown(p.type)} waits for a person: {_call_named(n, call)} is in doubt</h2>"
    return _doubt_section(p.task_id, n, call, title)


def _call_named(n: int, call: Any) -> str:
    return f"call #{n} <code>{shown(call.tool)}()</code>" if call is not None else f"call #{n}"


def _doubt_section(task_id: str, n: int, call: Any, title: str) -> str:
    """A call in doubt (started, its result never recorded), for a person to settle instead of an
    answer: what it was, and the two actions the script posts to ``…/calls/N/resolve``."""
    key = f" under key <code>{shown(call.key)}</code>" if call is not None else ""
    args = f'<p class="args">args: <code>{e(_short(call.args, 2000))}</code></p>' if call is not None else ""
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
        '<p class="result"></p></section>'
    )


def _parked_section(parked: str | None) -> str:
    """Why no worker runs the task (its run could not go on), and what moves it on."""
    if parked is None:
        return ""
    return (
        '<section class="parked failed"><h2>Parked: no worker runs it until someone acts on it</h2>'
        f'<p class="failure">{e(parked)}</p><p>Fix the code and resume it, or answer, cancel or retry it: '
        "any of these moves it on.</p></section>"
    )


def _waiting_section(state: Any) -> str:
    """The question a task waits on, with the form the script fills from its JSON schema; for a
    call in doubt, the call and the two ways to settle it instead."""
    if state.waiting is None:
        return ""
    w = state.waiting
    n = in_doubt_call(w.key)
    if n is not None:
        call = state.call(n)
        return _doubt_section(
            state.task_id, n, call, f"<h2>Waiting for a person: {_call_named(n, call)} is in doubt</h2>"
        )
    return (
        f'<section class="input" data-task="{e(state.task_id)}" data-key="{e(w.key)}"><h2>Waiting for '
        f'<code>{shown(w.key)}</code></h2><p class="prompt">{e(w.prompt or "")}</p>'
        f'<script type="application/json" class="schema">{_data(w.input_schema)}</script>'
        '<form class="answer"></form><p class="result"></p></section>'
    )


def _timeline(history: list[Any]) -> str:
    return "".join(
        f'<li class="point {e(h.type)}" data-seq="{h.seq}" tabindex="0">'
        f"{f'<span class=boundary>{e(h.boundary)}</span>' if h.boundary else ''}"
        f'<span class="seq">#{h.seq}</span> <span class="type">{e(h.type)}</span> {e(visible(h.summary))}</li>'
        for h in history
    )


def _call_rows(calls: list[Any]) -> str:
    return "".join(
        f'<tr class="call {e(c.kind)}"><td>{c.n}</td>'
        f"<td>{e(c.tool)}{' (compensation)' if c.kind == 'compensation' else ''}</td><td>{e(c.status)}</td>"
        f"<td><code>{e(_short(c.args))}</code></td><td><code>{e(_short(c.result))}</code></td>"
        f"<td>{_attempts(c)}</td><td>{e(_duration(c))}</td></tr>"
        for c in calls
    )


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
