"""Tokens and cost over HTTP: a task's (``/v1/tasks/{task_id}/usage``) and the totals of the key's
tenant (``/v1/usage``), read from the record as ``app.usage`` reads them."""

from __future__ import annotations

from fastapi import APIRouter, Query, Request

from tether.serve.api import _row_of
from tether.serve.models import TaskUsageBody, UsageReportBody
from tether.telemetry import GROUPS

__all__ = ["usage_router"]


def usage_router() -> APIRouter:
    router = APIRouter(tags=["usage"])

    @router.get("/v1/tasks/{task_id}/usage", summary="A task's tokens and cost, its own and inherited")
    def task_usage(request: Request, task_id: str, since: str | None = None) -> TaskUsageBody:
        app = request.app.state.apps(request.app.state.authenticate(request))
        _row_of(app, task_id)  # a task that is not there is refused as every task route refuses it
        # a call's epoch seconds become a UTC time with its offset, as every time the API gives
        return TaskUsageBody.model_validate(app.usage(task_id, since=since).to_dict())

    @router.get("/v1/usage", summary="Tokens and cost of the tenant's tasks, grouped")
    def usage(
        request: Request,
        by: str | None = Query(None, description=f"one of {', '.join(GROUPS)}"),
        since: str | None = Query(None, description="a duration back (7d, 12h), an ISO date, or epoch seconds"),
        user_id: str | None = None,
        session_id: str | None = None,
        type: str | None = None,
        limit: int = Query(10_000, ge=1, le=100_000),
    ) -> UsageReportBody:
        app = request.app.state.apps(request.app.state.authenticate(request))
        report = app.usage(user_id=user_id, session_id=session_id, type=type, by=by, since=since, limit=limit)
        return UsageReportBody.model_validate(report.to_dict())

    return router
