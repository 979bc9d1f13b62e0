"""Tokens and cost over HTTP: a task's (``/v1/tasks/{task_id}/usage``) and the totals of the key's
tenant (``/v1/usage``), read from the record as ``app.usage`` reads them."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Query, Request

from tether.telemetry import GROUPS

__all__ = ["usage_router"]


def usage_router() -> APIRouter:
    router = APIRouter(tags=["usage"])

    @router.get("/v1/tasks/{task_id}/usage", summary="A task's tokens and cost, its own and inherited")
    def task_usage(request: Request, task_id: str, since: str | None = None) -> dict[str, Any]:
        app = request.app.state.apps(request.app.state.authenticate(request))
        found: dict[str, Any] = app.usage(task_id, since=since).to_dict()
        return found

    @router.get("/v1/usage", summary="Tokens and cost of the tenant's tasks, grouped")
    def usage(
        request: Request,
        by: str | None = Query(None, description=f"one of {', '.join(GROUPS)}"),
        since: str | None = Query(None, description="a duration back (7d, 12h), an ISO date, or epoch seconds"),
        user_id: str | None = None,
        session_id: str | None = None,
        type: str | None = None,
        limit: int = Query(10_000, ge=1, le=100_000),
    ) -> dict[str, Any]:
        app = request.app.state.apps(request.app.state.authenticate(request))
        report = app.usage(user_id=user_id, session_id=session_id, type=type, by=by, since=since, limit=limit)
        body: dict[str, Any] = report.to_dict()
        return body

    return router
