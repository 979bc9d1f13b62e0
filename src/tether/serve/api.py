"""The versioned JSON API, ``/v1/…``: tasks, time travel, control, inputs, sessions, users, live events.

The server never runs a task: control verbs record their request and leave the task runnable for
``tether worker`` processes (cancel, retry, answers), or say why it is not (resume). A server
given the tasks' code (``create_app(app)``) also forks a task with new inputs, checked against
its task's signature; one given only a store does not offer ``inputs``.

Ids in paths are one segment each, percent-encoded (see :mod:`tether.serve._ids`): the routes
name them ``{…:tether_id}``.
"""

from __future__ import annotations

import asyncio
import difflib
import functools
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends, Path, Query, Request, Security
from fastapi.responses import JSONResponse, StreamingResponse
from fastapi.security import APIKeyHeader, HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel, Field, model_validator

from tether.checks import check_id
from tether.conversation.session import stream_id as session_stream
from tether.errors import InvalidInputError, TaskDefinitionError, TaskNotFoundError, TetherError
from tether.events import in_doubt_call
from tether.model import TaskState
from tether.model.status import Status
from tether.runtime.app import App
from tether.runtime.calls import UNSET
from tether.runtime.liveness import ALIVE_WITHIN
from tether.serve import _events, _ids  # noqa: F401 (_ids registers the routes' path convertor, tether_id)
from tether.serve._json import entries_json, jsonable, state_json, summary_json, task_json, workers_json
from tether.serve._listing import Listings
from tether.serve.auth import Principal
from tether.serve.feed import ChangeFeed
from tether.serve.models import (
    Answered,
    DiffBody,
    HistoryPage,
    InputPage,
    MessagePage,
    Queued,
    SessionPage,
    TaskDetail,
    TaskPage,
    TaskTree,
    UserDocument,
    WhoAmI,
    WindowBody,
    Workers,
)
from tether.serve.problems import NotFoundError
from tether.store import TaskFilter, TaskRow
from tether.store.base import FINISHED
from tether.timetravel import HistoryCursor, step_ref

__all__ = ["NotRetryableError", "NotRunnableError", "build_router"]

_audit = logging.getLogger("tether.serve.audit")
_SCAN = 10_000
"""Rows a search, a total or a fork tree looks through at most."""
Seq = Annotated[int, Query(ge=0, le=2**31, description="an event's seq (0: before the first)")]


# How the document says to authenticate (each operation that takes a key names both); the key
# itself is read and checked by the authenticator, which also takes the inspector's cookie.
_BEARER = HTTPBearer(auto_error=False, scheme_name="bearer", description="an API key: `tether keys create`")
_KEY_HEADER = APIKeyHeader(name="X-Tether-Key", auto_error=False, scheme_name="tetherKey", description="the same key")


def _current(
    request: Request,
    bearer: Annotated[HTTPAuthorizationCredentials | None, Security(_BEARER)] = None,
    key: Annotated[str | None, Security(_KEY_HEADER)] = None,
) -> Principal:
    """The request's principal, by the authenticator ``create_app`` put on the app."""
    who: Principal = request.app.state.authenticate(request)
    return who


Who = Annotated[Principal, Depends(_current)]
ID_PATTERN = r"^[^\x00]*[^\s\x00][^\x00]*$"
"""What an id may be (see ``check_id``): not empty, not only whitespace, no NUL."""
TaskId = Annotated[str, Path(min_length=1, max_length=512, pattern=ID_PATTERN)]
IdPath = Annotated[str, Path(min_length=1, max_length=512, pattern=ID_PATTERN)]
IdQuery = Annotated[str | None, Query(min_length=1, max_length=512, pattern=ID_PATTERN)]


class NotRunnableError(TetherError):
    """A resume the server cannot honour: the task waits for something, or has finished."""

    code = "not_runnable"


class NotRetryableError(TetherError):
    """A retry of a task that has not failed: its state forbids it (409)."""

    code = "not_retryable"


NO_CODE = (
    "this server was given no task code (`tether serve --db URL`), so it cannot check new inputs "
    "against the task's signature: fork without 'inputs' (a worker reruns the task with its own), or "
    "serve `tether.serve.create_app(app)` with the App that registers the task"
)


class ForkBody(BaseModel):
    """A fork on a server without the tasks' code: the task's own inputs."""

    at: int = Field(ge=1, le=2**31, description="the last event the fork shares")
    new_id: str | None = Field(default=None, min_length=1, max_length=512, pattern=ID_PATTERN)

    @model_validator(mode="before")
    @classmethod
    def _no_inputs(cls, data: Any) -> Any:
        if isinstance(data, dict) and "inputs" in data:
            raise ValueError(NO_CODE)
        return data


class ForkWithInputsBody(BaseModel):
    """A fork on a server given the tasks' code: new inputs, checked against the task's signature."""

    at: int = Field(ge=1, le=2**31, description="the last event the fork shares")
    inputs: dict[str, Any] | None = Field(
        default=None, description="the fork's inputs, all of them, by parameter name (default: the task's own)"
    )
    new_id: str | None = Field(default=None, min_length=1, max_length=512, pattern=ID_PATTERN)


class RewindBody(BaseModel):
    to: int = Field(ge=1, le=2**31, description="the last event to keep")


class CancelBody(BaseModel):
    reason: str = Field(default="cancelled", max_length=2000)


class AnswerBody(BaseModel):
    value: Any = Field(description="the answer, checked against the wait's JSON schema")


class ResolveBody(BaseModel):
    """What really happened to a call in doubt: ``{"happened": true, "result": …}`` or ``{"happened": false}``."""

    model_config = {"extra": "forbid"}
    happened: bool = Field(strict=True, description="whether the call's effect happened")
    result: Any = Field(
        default=None, description="the call's result (any JSON, null included): required when it happened, else absent"
    )

    @model_validator(mode="after")
    def _result_iff_happened(self) -> ResolveBody:
        given = "result" in self.model_fields_set
        if self.happened and not given:
            raise ValueError("happened is true: give the call's result as 'result' (any JSON; null is a result)")
        if not self.happened and given:
            raise ValueError("happened is false: the effect did not happen, so there is no result; leave out 'result'")
        return self


AppFor = Callable[[Principal], App]
"""Gives the tenant's App to a request's principal (one App per tenant, shared by threads)."""
Live = Callable[[Principal], bool]
"""Whether a principal may still be answered: its key is not revoked (checked again by a stream)."""


@dataclass(frozen=True)
class Serving:
    """What the routes use besides the request: the tenant's App for a principal, the wake-up of
    live listeners after a write, the :class:`ChangeFeed`, the reads of the newest tasks its
    listeners share, whether a principal's key is still live, and whether the server has the
    tasks' code (it forks with new inputs then), and for how long after its last liveness record a
    worker counts as alive."""

    app_for: AppFor
    bump: Callable[[], None]
    feed: ChangeFeed
    listings: Listings
    live: Live
    has_code: bool
    alive_within: float = ALIVE_WITHIN


def build_router(serving: Serving) -> APIRouter:
    """The ``/v1`` routes (the authenticator is ``app.state.authenticate``)."""
    app_for, bump, within = serving.app_for, serving.bump, serving.alive_within
    router = APIRouter(prefix="/v1")
    # In this order: the OpenAPI document lists the routes as they were added.
    _add_whoami(router)
    _add_task_reads(router, app_for, within)
    _add_time_travel(router, app_for)
    if serving.has_code:
        _add_fork_with_inputs(router, app_for, bump, within)
    else:
        _add_fork(router, app_for, bump, within)
    _add_rewind(router, app_for, bump, within)
    _add_steering(router, app_for, bump)
    _add_inputs(router, app_for, bump)
    _add_sessions_and_users(router, app_for)
    _add_live(router, serving)
    return router


def _row_of(app: App, task_id: str) -> TaskRow:
    """The task's index row; a missing task, or one of tether's own streams, is not found."""
    check_id(task_id, "task_id")
    row = app.store.get_task(app.tenant, task_id)
    if row is None or row.type.startswith("tether."):
        raise _not_found(app, task_id)
    return row


_NEAR = 1000
"""The newest tasks a task that is not found is compared with, for the one the caller meant."""


def _not_found(app: App, task_id: str) -> TaskNotFoundError:
    """The error for a task not in the tenant, naming the closest id among its newest tasks
    (``did_you_mean``) when one is close: a typo, a truncated paste."""
    error = TaskNotFoundError(task_id, tenant=app.tenant)
    ids = [r.task_id for r in app.store.list_tasks(app.tenant, TaskFilter(), limit=_NEAR)]
    near = difflib.get_close_matches(task_id, ids, n=1, cutoff=0.8)
    if near:
        error.did_you_mean = near[0]  # type: ignore[attr-defined]  # a structured field of the problem
        error.args = (f"{error}; did you mean {near[0]!r}?",)
    return error


def _add_whoami(router: APIRouter) -> None:
    @router.get("/whoami", response_model=WhoAmI, tags=["meta"])
    def whoami(who: Who) -> dict[str, str]:
        """The tenant this key acts in and the name its writes are recorded under."""
        return {"tenant": who.tenant, "name": who.name}


def _add_task_reads(router: APIRouter, app_for: AppFor, alive_within: float) -> None:
    @router.get("/tasks", response_model=TaskPage, tags=["tasks"])
    def list_tasks(
        who: Who,
        request: Request,
        status: Annotated[list[Status] | None, Query()] = None,
        type: IdQuery = None,
        user_id: IdQuery = None,
        session_id: IdQuery = None,
        q: Annotated[str | None, Query(max_length=200, description="part of an id, type or user")] = None,
        limit: Annotated[int, Query(ge=1, le=1000)] = 50,
        offset: Annotated[int, Query(ge=0, le=1_000_000)] = 0,
    ) -> dict[str, Any]:
        """Tasks, newest first, with filters, paging and the total that matched."""
        app = app_for(who)
        for name, value in (("type", type), ("user_id", user_id), ("session_id", session_id)):
            if value is not None:
                check_id(value, name)
        flt = TaskFilter(
            status=tuple(s.value for s in status) if status else None,
            type=type,
            user_id=user_id,
            session_id=session_id,
        )
        if q:  # the text is matched here: over the newest _SCAN tasks
            scanned = app.store.list_tasks(app.tenant, flt, limit=_SCAN + 1, offset=0)
            truncated = len(scanned) > _SCAN
            needle = q.lower()
            found = [r for r in scanned[:_SCAN] if needle in f"{r.task_id} {r.type} {r.user_id or ''}".lower()]
            page, total = found[offset : offset + limit], len(found)
        else:  # the page alone, and a count on the index: building _SCAN rows only to count them slows every page
            within = max(0, min(limit, _SCAN - offset))
            page = app.store.list_tasks(app.tenant, flt, limit=within, offset=offset) if within else []
            counted = app.store.count_tasks(app.tenant, flt, cap=_SCAN + 1)
            truncated, total = counted > _SCAN, min(counted, _SCAN)
        items = [summary_json(app, row) for row in page]
        later = offset + limit < total
        body = {"items": items, "total": total, "limit": limit, "offset": offset, "truncated": truncated}
        return {**body, "next": _next_page(request, offset=offset + limit) if later else None}

    @router.get("/workers", response_model=Workers, tags=["tasks"])
    def get_workers(who: Who) -> dict[str, Any]:
        """Whether any worker is alive to act on the tenant's tasks (their liveness records), and
        when none is, since when and how to start one."""
        return workers_json(app_for(who), alive_within=alive_within)

    @router.get("/tasks/{task_id:tether_id}", response_model=TaskDetail, tags=["tasks"])
    def get_task(who: Who, task_id: TaskId) -> JSONResponse:
        """A task: its summary line, its state (plan, steps, calls with args, results, attempts and
        durations, decisions, observations, failure, output) and its failure in words."""
        app = app_for(who)
        row = _row_of(app, task_id)
        return JSONResponse(task_json(app, row, app.state(task_id), alive_within=alive_within))


def _next_page(request: Request, **moved: int) -> str:
    """The path and query of the page after this one: the request's own, with ``moved`` changed."""
    url = request.url.include_query_params(**moved)
    return f"{url.path}?{url.query}"


def _add_time_travel(router: APIRouter, app_for: AppFor) -> None:
    @router.get("/tasks/{task_id:tether_id}/history", response_model=HistoryPage, tags=["time travel"])
    def get_history(
        who: Who,
        request: Request,
        task_id: TaskId,
        after: Seq = 0,
        limit: Annotated[int, Query(ge=1, le=10_000)] = 1000,
    ) -> JSONResponse:
        """Every event in order, in words, with the step it fell in (events after ``after``, at most
        ``limit``; ``next`` reads on after the last one)."""
        app = app_for(who)
        _row_of(app, task_id)
        read = HistoryCursor(task_id, after=after).read(app.log)
        items = entries_json(read[:limit])
        more = len(read) > limit
        page = {"items": items, "total": len(read), "limit": limit, "offset": None, "truncated": False}
        page["next"] = _next_page(request, after=items[-1]["seq"]) if more else None
        return JSONResponse({**page, "task_id": task_id})

    @router.get("/tasks/{task_id:tether_id}/state", response_model=TaskState, tags=["time travel"])
    def get_state(
        who: Who,
        task_id: TaskId,
        at: Annotated[int | None, Query(ge=1, le=2**31)] = None,
        before_step: IdQuery = None,
        after_step: IdQuery = None,
    ) -> JSONResponse:
        """The state now, right after event ``at``, or just before / right after a step (number or name)."""
        app = app_for(who)
        _row_of(app, task_id)
        state = app.state(task_id, at=at, before_step=step_ref(before_step), after_step=step_ref(after_step))
        return JSONResponse(state_json(state))

    @router.get("/tasks/{task_id:tether_id}/diff", response_model=DiffBody, tags=["time travel"])
    def get_diff(
        who: Who,
        task_id: TaskId,
        a: Annotated[int, Query(ge=1, le=2**31)],
        b: Annotated[int, Query(ge=1, le=2**31)],
        other: Annotated[
            str | None, Query(min_length=1, max_length=512, pattern=ID_PATTERN, description="B is this task's")
        ] = None,
    ) -> dict[str, Any]:
        """An RFC 6902 patch from the state after event ``a`` to the state after ``b`` (of ``other``)."""
        app = app_for(who)
        _row_of(app, task_id)
        if other is not None:
            _row_of(app, other)
        result = app.diff(task_id, a, b, other=other)
        return {"a": result.a, "b": result.b, "patch": jsonable(result.patch), "text": result.render()}

    @router.get("/tasks/{task_id:tether_id}/tree", response_model=TaskTree, tags=["time travel"])
    def get_fork_tree(who: Who, task_id: TaskId) -> dict[str, Any]:
        """The fork tree ``task_id`` is in: from its root, each task with the forks made of it."""
        app = app_for(who)
        return _fork_tree(app, _row_of(app, task_id))


def _fork_tree(app: App, row: TaskRow) -> dict[str, Any]:
    """The tree ``row`` is in, from its root: each task with the forks made of it."""
    seen = {row.task_id}
    while row.parent_id is not None and row.parent_id not in seen:
        parent = app.store.get_task(app.tenant, row.parent_id)
        if parent is None:
            break
        seen.add(parent.task_id)
        row = parent

    def node(r: TaskRow, depth: int) -> dict[str, Any]:
        # Each task's forks through the index of parents (the newest 10,000 tasks were read once, and
        # a fork older than them was left out of the tree).
        forks = TaskFilter(forks_of=r.task_id, internal=True)
        kids = app.store.list_tasks(app.tenant, forks, limit=1000) if depth < 50 else []
        kids.sort(key=lambda k: k.created_at)
        return {
            "task_id": r.task_id,
            "status": r.status,
            "fork_at": r.parent_seq,
            "forks": [node(k, depth + 1) for k in kids],
        }

    return node(row, 0)


def _add_fork(router: APIRouter, app_for: AppFor, bump: Callable[[], None], alive_within: float) -> None:
    @router.post("/tasks/{task_id:tether_id}/fork", status_code=201, response_model=TaskDetail, tags=["control"])
    def fork_task(who: Who, task_id: TaskId, body: ForkBody) -> JSONResponse:
        """A new pending task sharing this task's history up to ``at``; a worker runs it from there
        with the task's own inputs (this server has no task code to check new ones against)."""
        return _forked(app_for(who), who, task_id, body.at, None, body.new_id, bump, alive_within)


def _add_fork_with_inputs(router: APIRouter, app_for: AppFor, bump: Callable[[], None], alive_within: float) -> None:
    @router.post("/tasks/{task_id:tether_id}/fork", status_code=201, response_model=TaskDetail, tags=["control"])
    def fork_task(who: Who, task_id: TaskId, body: ForkWithInputsBody) -> JSONResponse:
        """A new pending task sharing this task's history up to ``at``; a worker runs it from there,
        with ``inputs`` when given (all of them, checked against the task's signature: 400 if they
        do not fit, 409 if the server's app does not register the task's type)."""
        app = app_for(who)
        inputs = None if body.inputs is None else _checked_inputs(app, _row_of(app, task_id), body.inputs)
        return _forked(app, who, task_id, body.at, inputs, body.new_id, bump, alive_within)


def _checked_inputs(app: App, row: TaskRow, inputs: dict[str, Any]) -> dict[str, Any]:
    """``inputs`` bound to the task's signature (defaults filled in), as a run records them."""
    try:
        spec = app.registry.task(row.type)
    except TaskDefinitionError:
        raise TaskDefinitionError(
            f"this server's app does not register task type {row.type!r}, so it cannot check new inputs "
            "for it: fork without 'inputs', or serve the App that registers it"
        ) from None
    return spec.bind((), inputs)


def _forked(
    app: App, who: Principal, task_id: str, at: int, inputs: dict[str, Any] | None, new_id: str | None,
    bump: Callable[[], None], alive_within: float,
) -> JSONResponse:  # fmt: skip
    _row_of(app, task_id)
    handle = app.fork(task_id, at=at, inputs=inputs, new_id=new_id, actor=who.name)
    _audit.info("%s/%s forked %s at %d as %s", who.tenant, who.name, task_id, at, handle.task_id)
    bump()
    detail = task_json(app, _row_of(app, handle.task_id), handle.state, alive_within=alive_within)
    return JSONResponse(detail, status_code=201)


def _add_rewind(router: APIRouter, app_for: AppFor, bump: Callable[[], None], alive_within: float) -> None:
    @router.post("/tasks/{task_id:tether_id}/rewind", response_model=TaskDetail, tags=["control"])
    def rewind_task(who: Who, task_id: TaskId, body: RewindBody) -> JSONResponse:
        """Go back to event ``to``: the task becomes a fork of itself there; the old branch stays as ``TASK~N``."""
        app = app_for(who)
        _row_of(app, task_id)
        handle = app.rewind(task_id, to=body.to, actor=who.name)
        _audit.info("%s/%s rewound %s to %d", who.tenant, who.name, task_id, body.to)
        bump()
        return JSONResponse(task_json(app, _row_of(app, task_id), handle.state, alive_within=alive_within))


def _add_steering(router: APIRouter, app_for: AppFor, bump: Callable[[], None]) -> None:
    @router.post("/tasks/{task_id:tether_id}/resume", status_code=202, response_model=Queued, tags=["control"])
    def resume_task(who: Who, task_id: TaskId) -> Queued:
        """Make sure a worker will continue the task. The server has no task code, so it runs
        nothing: a task that is runnable is left to the workers; one that waits for an answer
        or a timer, or has finished, is refused (409) saying what it needs."""
        app = app_for(who)
        row = _row_of(app, task_id)
        state = app.state(task_id)
        now = time.time()
        if state.status.value in FINISHED:
            hint = "; retry it instead (POST …/retry)" if state.status is Status.FAILED else ""
            raise NotRunnableError(f"task {task_id!r} is {state.status.value}; there is nothing to resume{hint}")
        if state.status is Status.AWAITING_INPUT and (row.wake_at is None or row.wake_at > now):
            key = state.waiting.key if state.waiting else "?"
            raise NotRunnableError(f"task {task_id!r} waits for {_how_to_answer(key)} and a worker continues")
        if state.status is Status.SLEEPING and row.wake_at is not None and row.wake_at > now:
            note = f"sleeping; a worker continues it when it wakes, in {row.wake_at - now:.0f}s"
            return Queued(task_id=task_id, status=state.status.value, runnable=False, note=note)
        held = row.held_by(now)
        note = f"running in {held}" if held else "runnable: the next free worker continues it"
        return Queued(task_id=task_id, status=state.status.value, runnable=True, note=note)

    @router.post("/tasks/{task_id:tether_id}/retry", status_code=202, response_model=Queued, tags=["control"])
    def retry_task(who: Who, task_id: TaskId) -> Queued:
        """Send a failed task to run again with the workers' code; recorded with the key's name as
        actor. A task that has not failed is refused (409, ``not_retryable``)."""
        app = app_for(who)
        _row_of(app, task_id)
        try:
            app.request_retry(task_id, actor=who.name)
        except InvalidInputError as exc:  # the task is not failed: its state forbids a retry
            raise NotRetryableError(str(exc)) from None
        bump()
        status = app.state(task_id).status.value
        return Queued(task_id=task_id, status=status, runnable=True, note=f"retry requested by {who.name}")

    @router.post("/tasks/{task_id:tether_id}/cancel", status_code=202, response_model=Queued, tags=["control"])
    def cancel_task(who: Who, task_id: TaskId, body: Annotated[CancelBody | None, Body()] = None) -> Queued:
        """Ask the task to stop; the next worker run compensates its completed calls and ends it
        cancelled (a running worker stops at its next step). Recorded with the key's name as actor."""
        app = app_for(who)
        _row_of(app, task_id)
        reason = (body or CancelBody()).reason
        before = app.state(task_id)
        if before.status is Status.CANCELLED or before.cancel_reason is not None:
            return Queued(task_id=task_id, status=before.status.value, runnable=True, note="already cancelled")
        app.request_cancel(task_id, reason, actor=who.name)
        bump()
        status = app.state(task_id).status.value
        return Queued(task_id=task_id, status=status, runnable=True, note="cancel requested; a worker ends it")


def _add_inputs(router: APIRouter, app_for: AppFor, bump: Callable[[], None]) -> None:
    @router.get("/inputs", response_model=InputPage, tags=["inputs"])
    def list_inputs(
        who: Who,
        user_id: IdQuery = None,
        limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    ) -> dict[str, Any]:
        """What tasks wait for, oldest question first, with prompts and JSON schemas (at most
        ``limit``: ``truncated`` when more wait, and ``total`` is then ``null``)."""
        app = app_for(who)
        if user_id is not None:
            check_id(user_id, "user_id")
        found = jsonable(app.pending_inputs(user_id, limit=limit + 1))
        more = len(found) > limit
        total = None if more else len(found)
        return {"items": found[:limit], "total": total, "limit": limit, "offset": 0, "truncated": more, "next": None}

    @router.post("/tasks/{task_id:tether_id}/inputs/{key:tether_id}", response_model=Answered, tags=["inputs"])
    def answer_input(who: Who, task_id: TaskId, key: IdPath, body: AnswerBody) -> dict[str, Any]:
        """Answer the task's wait ``key`` (checked against its schema; 400 with the reason if it does not
        fit). The task becomes runnable and a worker continues it. Recorded with the key's name as actor."""
        app = app_for(who)
        _row_of(app, task_id)
        n = in_doubt_call(key)
        if n is not None:  # send_input refuses it too, pointing to the CLI: here, the route
            raise InvalidInputError(
                f"{key!r} is tether's own key for a call in doubt, not one to answer: settle call #{n} with "
                f"POST /v1/tasks/{{task_id}}/calls/{n}/resolve and what happened"
            )
        handle = app.send_input(task_id, key, body.value, actor=who.name)
        bump()
        return {"task_id": task_id, "status": handle.status.value, "position": handle.position}

    @router.post("/tasks/{task_id:tether_id}/calls/{n}/resolve", response_model=Answered, tags=["inputs"])
    def resolve_call(
        who: Who, task_id: TaskId, n: Annotated[int, Path(ge=1, le=2**31)], body: ResolveBody
    ) -> dict[str, Any]:
        """Settle call ``n``, whose outcome is unknown (its process stopped inside it): ``{"happened":
        true, "result": …}`` records its result, ``{"happened": false}`` has it run again under its
        key. A task waiting on the call becomes runnable and a worker continues it. Recorded with the
        key's name as actor; refused (400) while a process holds the task, or for a call not in doubt."""
        app = app_for(who)
        _row_of(app, task_id)
        result = body.result if body.happened else UNSET
        state = app.resolve_call(task_id, n, result, happened=body.happened, actor=who.name)
        _audit.info("%s/%s settled call #%d of %s: happened=%s", who.tenant, who.name, n, task_id, body.happened)
        bump()
        return {"task_id": task_id, "status": state.status.value, "position": state.position}


def _how_to_answer(key: str) -> str:
    """What a task waiting on ``key`` needs, and the route that gives it."""
    n = in_doubt_call(key)
    if n is None:
        return f"input {key!r}: answer it (POST …/inputs/{key})"
    return f"a person to settle call #{n}, in doubt: POST …/calls/{n}/resolve with what happened"


def _open_session(app: App, session_id: str) -> Any:
    check_id(session_id, "session_id")
    if app.store.get_task(app.tenant, session_stream(session_id)) is None:
        raise NotFoundError("session", session_id, tenant=app.tenant)
    return app.session(session_id)


def _add_sessions_and_users(router: APIRouter, app_for: AppFor) -> None:
    @router.get("/sessions", response_model=SessionPage, tags=["sessions"])
    def list_sessions(
        who: Who,
        request: Request,
        user_id: IdQuery = None,
        limit: Annotated[int, Query(ge=1, le=1000)] = 100,
        offset: Annotated[int, Query(ge=0, le=1_000_000)] = 0,
    ) -> dict[str, Any]:
        """Sessions (conversations), newest first (``total`` is not counted: follow ``next``)."""
        app = app_for(who)
        if user_id is not None:
            check_id(user_id, "user_id")
        found = jsonable(app.sessions(user_id=user_id, limit=limit + 1, offset=offset))
        later = _next_page(request, offset=offset + limit) if len(found) > limit else None
        return {"items": found[:limit], "total": None, "limit": limit, "offset": offset, "next": later}

    @router.get("/sessions/{session_id:tether_id}/messages", response_model=MessagePage, tags=["sessions"])
    def list_messages(
        who: Who,
        request: Request,
        session_id: IdPath,
        since: Annotated[int | None, Query(ge=0, le=2**31, description="only messages with a larger seq")] = None,
        limit: Annotated[int, Query(ge=1, le=10_000)] = 1000,
    ) -> JSONResponse:
        """A session's messages in order, summaries beside them (``next`` reads on after the last)."""
        session = _open_session(app_for(who), session_id)
        found = session.messages(since=since, limit=limit + 1)
        items = jsonable(found[:limit])
        later = _next_page(request, since=items[-1]["seq"]) if len(found) > limit else None
        page = {"items": items, "total": None, "limit": limit, "offset": None, "truncated": False, "next": later}
        return JSONResponse({**page, "session_id": session_id, "summaries": jsonable(session.summaries())})

    @router.get("/sessions/{session_id:tether_id}/window", response_model=WindowBody, tags=["sessions"])
    def get_window(
        who: Who,
        session_id: IdPath,
        max_tokens: Annotated[int, Query(ge=1, le=10_000_000)] = 8000,
        keep_last: Annotated[int, Query(ge=0, le=10_000)] = 6,
    ) -> JSONResponse:
        """What would go into the next model call."""
        session = _open_session(app_for(who), session_id)
        return JSONResponse(jsonable(session.window(max_tokens, keep_last=keep_last)))

    @router.get("/users/{user_id:tether_id}", response_model=UserDocument, tags=["users"])
    def get_user(who: Who, user_id: IdPath) -> dict[str, Any]:
        """A user's document (preferences, facts) and its version."""
        app = app_for(who)
        check_id(user_id, "user_id")
        if app.store.get_task(app.tenant, f"user:{user_id}") is None:
            raise NotFoundError("user", user_id, tenant=app.tenant)
        doc = app.user(user_id)
        return {"user_id": user_id, "version": doc.version, "document": jsonable(doc.get())}


_STREAM: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "server-sent events (see docs/serve.md): each with an id a reconnect resumes from",
        "content": {"text/event-stream": {"schema": {"type": "string"}}},
    }
}


def _add_live(router: APIRouter, serving: Serving) -> None:
    app_for, feed = serving.app_for, serving.feed

    @router.get("/events", tags=["live"], response_class=StreamingResponse, responses=_STREAM)
    async def stream_events(who: Who, request: Request) -> StreamingResponse:
        """Server-sent events: ``task`` (a task's summary when it changed) and ``input`` (a task began
        waiting for input), woken by the store's change notifications; a comment every 15 s;
        ``closed`` (``{code, message}``) before the server ends the stream: its key was revoked."""
        live = functools.partial(serving.live, who)
        stream = _events.task_events(lambda: app_for(who), who.tenant, request, feed, serving.listings, live)
        return StreamingResponse(stream, media_type="text/event-stream", headers=_events.HEADERS)

    @router.get("/tasks/{task_id:tether_id}/events", tags=["live"], response_class=StreamingResponse, responses=_STREAM)
    async def stream_task_events(who: Who, task_id: TaskId, request: Request, after: Seq = 0) -> StreamingResponse:
        """Server-sent events: each new ``history`` entry of one task as it lands; ``end`` once it
        finished; ``closed`` (``{code, message}``) before the server ends the stream: its key was revoked."""
        await asyncio.to_thread(lambda: _row_of(app_for(who), task_id))
        live = functools.partial(serving.live, who)
        after = _events.resumed_after(request, after)  # a reconnecting EventSource says where it was
        stream = _events.history_events(lambda: app_for(who), task_id, after, request, feed, live)
        return StreamingResponse(stream, media_type="text/event-stream", headers=_events.HEADERS)
