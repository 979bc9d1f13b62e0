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

import functools
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from importlib import resources
from typing import Any
from urllib.parse import parse_qs

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from tether.errors import TaskNotFoundError, TetherError
from tether.events import in_doubt_call
from tether.model.status import Status
from tether.runtime.app import App
from tether.serve._html import data, e, link, when
from tether.serve._ids import shown, visible
from tether.serve._json import summary_json
from tether.serve._task_page import call_named, doubt_section, failure_text, task_body
from tether.serve.api import _not_found
from tether.serve.auth import CSRF_COOKIE, CSRF_HEADER, KEY_COOKIE, AuthError, Principal, csrf_matches, new_csrf_token
from tether.serve.keys import KeyRing
from tether.serve.problems import status_of
from tether.store import TaskFilter

__all__ = ["build_pages"]

_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; script-src 'self'; style-src 'self'; frame-ancestors 'none'",
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}
_STATIC = {"app.js": "text/javascript", "style.css": "text/css", "favicon.svg": "image/svg+xml"}


def build_pages(
    app_for: Callable[[Principal], App],
    principal: Callable[[Request], Principal],
    keys: KeyRing,
    *,
    no_auth: bool,
    alive_within: float,
) -> APIRouter:
    """The inspector's routes: logging in and out, its static files, and its pages (a task's says
    whether a worker was seen in the last ``alive_within`` seconds)."""
    router = APIRouter(include_in_schema=False)
    frame = _Frame(app_for, principal, no_auth=no_auth)
    _add_login(router, keys, frame)
    _add_static(router)
    _add_pages(router, frame, alive_within)
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
            '<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>{e(visible(title))} · tether</title>"
            '<link rel="icon" href="/static/favicon.svg" type="image/svg+xml">'
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
            except TetherError as exc:
                # the error's own status, as the API answers it: a page that is not found is a 404
                # (for a browser's history, a crawler, a monitoring check), not a 200 saying so
                named = "not found" if isinstance(exc, TaskNotFoundError) else "error"
                answer = self.page(request, named, f'<p class="error">{e(visible(str(exc)))}</p>', who)
                answer.status_code = status_of(exc)
                return answer
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
            '<label for="key">API key</label><input type="password" id="key" name="key" autocomplete="off" required '
            'placeholder="tk_…">'
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

    @router.get("/favicon.ico")
    def favicon() -> Response:
        """The icon browsers ask for by themselves (the pages name the SVG; this answers the rest)."""
        return static("favicon.svg")


def _add_pages(router: APIRouter, frame: _Frame, alive_within: float) -> None:
    router.add_api_route("/", frame.guarded(_task_list, "tasks"), methods=["GET"])
    task_page = functools.partial(_task_page, alive_within=alive_within)
    router.add_api_route(
        "/tasks/{task_id:tether_id}",  # the convertor of ids (see tether.serve._ids)
        frame.guarded(task_page, lambda request: str(request.path_params["task_id"])),
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
        f'<label class="sr-only" for="search">Search</label>'
        f'<input name="q" value="{e(q)}" placeholder="search id, type, user" id="search">'
        '<label class="sr-only" for="status-filter">Status</label>'
        f'<select name="status" id="status-filter"><option value="">any status</option>{options}</select>'
        f'<button>Filter</button></form><p class="count" id="count">{len(shown):,} of {len(rows):,}</p>'
        '<div class="scroll"><table id="tasks" data-live="1"><thead><tr><th>task</th><th>type</th><th>status</th>'
        "<th>position</th>"
        f"<th>waiting for</th><th>held by</th><th>updated</th></tr></thead><tbody>{lines}</tbody></table></div>"
    )


def _task_page(app: App, request: Request, *, alive_within: float) -> str:
    task_id = request.path_params["task_id"]
    row = app.store.get_task(app.tenant, task_id)
    if row is None or row.type.startswith("tether."):
        raise _not_found(app, task_id)  # the API's words: the close id meant, when one is
    return task_body(app, row, app.state(task_id), app.history(task_id), alive_within=alive_within)


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
            f'<script type="application/json" class="schema">{data(p.schema)}</script>'
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
            text = failure_text(app.state(r.task_id))
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
        f'<td>{shown(s["type"])}</td><td class="status {e(s["status"])}">{e(s["status"])}'
        f"{_requested(s['requested'])}</td>"
        f"<td>{e(s['position'])}</td><td>{shown(s['waiting_for'] or '')}</td><td>{shown(s['held_by'] or '')}</td>"
        f"<td>{_updated(s['updated_at'])}</td></tr>"
    )


def _requested(kind: str | None) -> str:
    words = {"answer": "answered", "cancel": "cancel requested", "retry": "retry requested"}
    return f' <span class="pill requested">{words[kind]}</span>' if kind in words else ""


def _updated(moment: str | None) -> str:
    return when(datetime.fromisoformat(moment)) if moment else ""


def _inbox_doubt(app: App, p: Any) -> str:
    """An inbox card for a task waiting on a call in doubt: the call, and the two ways to settle it."""
    n = in_doubt_call(p.key)
    assert n is not None
    try:
        call = app.state(p.task_id).call(n)
    except TetherError:  # one unreadable stream must not hide the others: the card says less
        call = None
    title = f"<h2>{link(p.task_id)} · {shown(p.type)} waits for a person: {call_named(n, call)} is in doubt</h2>"
    return doubt_section(p.task_id, n, call, title)
