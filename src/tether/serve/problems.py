"""Every error the server answers, in one shape: RFC 9457 ``application/problem+json``.

A body has ``type`` (``urn:tether:error:CODE``), ``title`` (the status in words), ``status``,
``detail``, ``instance`` (the request's path), tether's stable ``code`` and ``message`` (the
detail again: the ``{code, message}`` every client of tether reads), then the error's
structured fields. Tether's own errors, requests that do not fit the API (422), routes that do
not exist (404, with the route meant when one is close: ``did_you_mean``), methods a route does
not take (405) and the server's own failures (500) all answer so.

Example:
    >>> problem_body(404, "task_not_found", "no task 'x'", "/v1/tasks/x")["type"]
    'urn:tether:error:task_not_found'
"""

from __future__ import annotations

import difflib
import logging
from http import HTTPStatus
from typing import Any, Literal

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from tether.errors import TetherError
from tether.serve.auth import AuthError

__all__ = ["MEDIA_TYPE", "NotFoundError", "add_error_handlers", "problem_body", "status_of"]

MEDIA_TYPE = "application/problem+json"
_log = logging.getLogger("tether.serve")

_STATUS = {
    "unauthorized": 401,
    "csrf_failed": 403,
    "bad_host": 403,
    "task_not_found": 404,
    "not_found": 404,
    "invalid_input": 400,
    "not_serializable": 400,
    "unknown_event_type": 400,
    "invalid_sequence": 400,
    "configuration": 400,
    "value_too_large": 413,
    "conflict": 409,
    "lease_lost": 409,
    "invalid_transition": 409,
    "task_busy": 409,
    "task_definition": 409,
    "not_runnable": 409,
    "not_retryable": 409,
    "store_unavailable": 503,
    "store_full": 507,
}
_HTTP_CODES = {404: "not_found", 405: "method_not_allowed"}


class NotFoundError(TetherError):
    """A session or a user the path names is not in the tenant (404 ``not_found``, the code of a
    route that does not exist; a missing task is :class:`~tether.errors.TaskNotFoundError`)."""

    code = "not_found"

    def __init__(self, what: Literal["session", "user"], name: str, *, tenant: str) -> None:
        super().__init__(f"no {what} {name!r} in tenant {tenant!r}")
        self.kind = what
        self.id = name
        self.tenant = tenant


def status_of(error: TetherError) -> int:
    """The HTTP status of a tether error: 4xx for the caller's mistakes, 503 while the store is away."""
    if isinstance(error, AuthError):
        return error.status
    return _STATUS.get(error.code, 500)


def problem_body(status: int, code: str, detail: str, instance: str | None, **fields: Any) -> dict[str, Any]:
    """An RFC 9457 problem: its standard members, tether's ``code`` and ``message``, then ``fields``."""
    try:
        title = HTTPStatus(status).phrase
    except ValueError:
        title = "Error"
    body = {"type": f"urn:tether:error:{code}", "title": title, "status": status, "detail": detail}
    body.update(instance=instance, code=code, message=detail)
    for name, value in fields.items():
        if name not in body:  # an error's field never overrides a standard member
            body[name] = value
    return body


def _respond(body: dict[str, Any], headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse(body, status_code=body["status"], media_type=MEDIA_TYPE, headers=headers)


def add_error_handlers(api: FastAPI) -> None:
    """Tether's errors, requests that do not fit, unknown routes and the server's own failures, as problems."""

    @api.exception_handler(TetherError)
    async def tether_error(request: Request, exc: TetherError) -> JSONResponse:
        status = status_of(exc)
        if status >= 500:
            _log.error("%s %s failed: %s", request.method, request.url.path, exc)
        authenticated = getattr(request.state, "principal", None) is not None
        detail, fields = _fields(exc) if authenticated else _anonymous(exc, status)
        headers = {"WWW-Authenticate": 'Bearer realm="tether"'} if status == 401 else None
        return _respond(problem_body(status, exc.code, detail, request.url.path, **fields), headers)

    @api.exception_handler(RequestValidationError)
    async def bad_request(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = [{"loc": list(e.get("loc", ())), "msg": str(e.get("msg", ""))} for e in exc.errors()]
        said = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in errors[:3])
        detail = f"the request does not fit the API: {said}" if said else "the request does not fit the API"
        return _respond(problem_body(422, "invalid_request", detail, request.url.path, errors=errors))

    @api.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException) -> JSONResponse:
        code = _HTTP_CODES.get(exc.status_code, "http_error")
        fields: dict[str, Any] = {}
        if exc.status_code == 404:
            detail = f"no route {request.url.path!r}"
            meant = _route_meant(request)
            if meant is not None:
                fields["did_you_mean"] = meant
                detail += f"; did you mean {meant}?"
        elif exc.status_code == 405:
            allowed = (exc.headers or {}).get("Allow", "")
            detail = f"{request.method} is not allowed on {request.url.path!r}"
            detail += f"; use {allowed}" if allowed else ""
        else:
            detail = str(exc.detail)
        headers = dict(exc.headers) if exc.headers else None
        return _respond(problem_body(exc.status_code, code, detail, request.url.path, **fields), headers)

    @api.exception_handler(Exception)
    async def server_error(request: Request, exc: Exception) -> JSONResponse:
        _log.exception("%s %s failed", request.method, request.url.path)
        detail = "the server failed to answer; its log says why"
        return _respond(problem_body(500, "internal", detail, request.url.path))


def _anonymous(exc: TetherError, status: int) -> tuple[str, dict[str, Any]]:
    """What a client that has not authenticated learns of an error: why it was refused (an
    :class:`AuthError` says only what the request lacked), or that the server cannot answer now;
    nothing of the store (its URL, even redacted, names its host, port, user, database, schema)."""
    if isinstance(exc, AuthError):
        return str(exc), {}
    if status == 503:
        return "the server cannot answer now; try again shortly", {}
    return "the request could not be answered", {}


def _fields(exc: TetherError) -> tuple[str, dict[str, Any]]:
    body = exc.to_dict()
    detail = str(body.pop("message"))
    body.pop("code", None)
    for name, value in list(body.items()):  # structured fields must stay JSON: show anything else as text
        if not isinstance(value, str | int | float | bool | type(None) | list | dict):
            body[name] = repr(value)
    return detail, body


def _route_meant(request: Request) -> str | None:
    """The API route closest to a path that matched none (same depth, each fixed segment alike),
    as the OpenAPI document writes it (``/v1/tasks/{task_id}/history``), or ``None``."""
    asked = [s for s in request.url.path.split("/") if s]
    best: tuple[float, str] | None = None
    for path in request.app.openapi().get("paths", {}):
        template = [s for s in path.split("/") if s]
        if len(template) != len(asked):
            continue
        score = 0.0
        for part, want in zip(asked, template, strict=True):
            alike = 1.0 if want.startswith("{") else difflib.SequenceMatcher(None, part, want).ratio()
            if alike < 0.6:
                break
            score += alike
        else:
            if best is None or score > best[0]:
                best = (score, path)
    return None if best is None or best[0] == len(asked) else best[1]
