"""What an operator's tools ask ``tether serve``: is the process up (``/healthz``), can it serve
(``/readyz``: the store answers within a bound), what has it been doing (``/metrics``, Prometheus
text); and the access log, one line per request.

``/healthz`` and ``/readyz`` answer without a key: a load balancer's or Kubernetes' probe carries
none, and they say nothing of any tenant (``ok``, or that the store did not answer, never why in
its words). ``/metrics`` follows the API's rules (a key, or ``--no-auth`` on loopback): its counts
are the whole process's, across tenants, and its task gauge is the key's tenant's."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse

from tether.errors import TetherError
from tether.model.status import Status
from tether.serve.usage import usage_router
from tether.store import Store
from tether.store.base import TaskFilter
from tether.telemetry import hooks
from tether.telemetry.logs import access_log
from tether.telemetry.prometheus import PullReader, gauge_lines

__all__ = ["READY_WITHIN", "AccessLog", "add_operations", "serve_metrics"]

READY_WITHIN = 2.0
"""Seconds the store has to answer ``/readyz``'s probe before the server says it is not ready."""

_COUNT_CAP = 1_000_000
_PROMETHEUS = "text/plain; version=0.0.4; charset=utf-8"

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


_reader: list[PullReader] = []  # the process's, once serve_metrics() made it


def serve_metrics() -> bool:
    """Turn tether's telemetry on in this process with a meter provider ``/metrics`` reads (``tether
    serve`` does, in the process it owns; an application mounting :func:`~tether.serve.create_app`
    calls it, or sends its metrics where it likes with :func:`tether.telemetry.instrument`).
    ``False`` without ``opentelemetry-sdk``, or when the application turned telemetry on itself."""
    if _reader:
        return True
    if hooks.instrumented():
        return False
    try:
        _reader.append(PullReader())
    except ImportError:
        return False
    return True


def add_operations(api: FastAPI, store: Store) -> None:
    """Add the operator's endpoints, the usage API and the access log to ``api`` (the server of ``store``)."""
    api.include_router(_router(store))
    api.include_router(usage_router())
    api.add_middleware(AccessLog)


def _router(store: Store) -> APIRouter:
    router = APIRouter(tags=["operations"])

    @router.get("/healthz", summary="The process is up", response_class=JSONResponse)
    def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @router.get("/readyz", summary="The store answers within READY_WITHIN seconds", response_class=JSONResponse)
    async def readyz() -> JSONResponse:
        began = time.perf_counter()
        try:
            await asyncio.wait_for(asyncio.to_thread(_probe, store), READY_WITHIN)
        except TimeoutError:
            return JSONResponse({"status": "unavailable", "reason": f"the store took over {READY_WITHIN}s"}, 503)
        except TetherError as exc:
            return JSONResponse({"status": "unavailable", "reason": f"the store refused ({exc.code})"}, 503)
        return JSONResponse({"status": "ready", "store_seconds": round(time.perf_counter() - began, 6)})

    @router.get("/metrics", summary="Prometheus metrics", response_class=PlainTextResponse)
    def metrics(request: Request) -> PlainTextResponse:
        who = request.app.state.authenticate(request)
        lines = _task_gauge(store, who.tenant)
        if _reader:
            lines.extend(_reader[0].lines())
        else:
            lines.append("# tether's own metrics: tether.serve.operations.serve_metrics() (needs opentelemetry-sdk)")
        return PlainTextResponse("\n".join(lines) + "\n", media_type=_PROMETHEUS)

    return router


def _probe(store: Store) -> None:
    store.count_tasks("default", TaskFilter(), cap=1)


def _task_gauge(store: Store, tenant: str) -> list[str]:
    counts = [
        ({"status": s.value}, float(store.count_tasks(tenant, TaskFilter(status=(s.value,)), cap=_COUNT_CAP)))
        for s in Status
    ]
    return gauge_lines("tether_tasks", "Tasks of the scraping key's tenant, by status (now)", counts)


class AccessLog:
    """One ``tether.serve.access`` line per request, when it ends: method, path, status, seconds and
    the tenant it acted in, as structured fields (never a query string or a body)."""

    def __init__(self, app: Callable[[Scope, Receive, Send], Awaitable[None]]) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not access_log.isEnabledFor(20):
            await self.app(scope, receive, send)
            return
        began = time.perf_counter()
        status = [500]

        async def sent(message: MutableMapping[str, Any]) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, sent)
        finally:
            self._line(scope, status[0], time.perf_counter() - began)

    @staticmethod
    def _line(scope: Scope, status: int, seconds: float) -> None:
        state = scope.get("state") or {}
        who = state.get("principal") if isinstance(state, dict) else None
        tenant = getattr(who, "tenant", None)
        method, path = scope.get("method", "?"), scope.get("path", "?")
        access_log.info(
            "%s %s %d %.3fs",
            method,
            path,
            status,
            seconds,
            extra={
                "http_method": method,
                "http_path": path,
                "http_status": status,
                "duration_s": seconds,
                "tether_tenant": tenant,
            },
        )
