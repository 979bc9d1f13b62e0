"""The bodies the ``/v1`` API answers with, as typed models: the OpenAPI document describes each.

Every list is a :class:`Page` (``items``, ``total``, ``limit``, ``offset``, ``truncated``,
``next``); every error a :class:`Problem` (RFC 9457 ``application/problem+json``, with tether's
stable ``code``). Times are UTC, written with their offset (``…Z``).

Example:
    >>> from tether.serve.models import TaskPage
    >>> page = TaskPage(items=[], total=0, limit=50, offset=0, truncated=False, next=None)
    >>> page.model_dump()["items"]
    []
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Generic, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from tether.conversation.messages import Message, Summary
from tether.model import TaskState
from tether.model.status import Status

__all__ = [
    "Answered",
    "CallUsageBody",
    "DiffBody",
    "HistoryEntry",
    "HistoryPage",
    "InputPage",
    "MessagePage",
    "Page",
    "PendingInput",
    "Problem",
    "Queued",
    "Request",
    "SessionInfo",
    "SessionPage",
    "TaskDetail",
    "TaskPage",
    "TaskSummary",
    "TaskTree",
    "TaskUsageBody",
    "UsageReportBody",
    "UsageTotals",
    "UserDocument",
    "WhoAmI",
    "WindowBody",
    "Workers",
]

T = TypeVar("T")

Request = Literal["answer", "cancel", "retry"]
"""A request recorded on a task that no worker has acted on yet: an answer to its wait, a cancel,
a retry."""


class Problem(BaseModel):
    """An error, as RFC 9457 ``application/problem+json``: ``type`` names the problem
    (``urn:tether:error:CODE``), ``title`` its HTTP status in words, ``detail`` (and ``message``,
    the same text) what went wrong; ``code`` is tether's stable error code; further members are
    the error's structured fields (``task_id``, ``expected``, …)."""

    model_config = ConfigDict(extra="allow")
    type: str = Field(examples=["urn:tether:error:task_not_found"])
    title: str = Field(examples=["Not Found"])
    status: int = Field(examples=[404])
    detail: str
    instance: str | None = Field(default=None, description="the request's path")
    code: str = Field(description="tether's stable error code", examples=["task_not_found"])
    message: str = Field(description="the same text as detail")


class Page(BaseModel, Generic[T]):
    """One page of a list. ``total`` is how many matched (``null`` where the list is not counted);
    ``next`` the path and query of the next page (``null`` on the last)."""

    items: list[T]
    total: int | None
    limit: int
    offset: int | None = Field(description="the page's first item's offset (null for a list paged by a cursor)")
    truncated: bool = Field(default=False, description="the total stopped counting at 10,000")
    next: str | None = Field(default=None, description="the next page's path and query, or null on the last")


class TaskSummary(BaseModel):
    """One line of the task list: where the task stands, what it waits for, who holds it."""

    task_id: str
    type: str
    status: Status
    user_id: str | None
    session_id: str | None = Field(description="the conversation the task reads and writes, if any")
    parent_id: str | None = Field(description="the task it was forked from")
    version: int = Field(description="its newest event's seq")
    created_at: datetime
    updated_at: datetime
    held_by: str | None = Field(description="the worker whose lease holds it now")
    position: str | None
    waiting_for: str | None = Field(description="the key of the input it waits for")
    prompt: str | None
    wakes_at: datetime | None
    parked: str | None = Field(description="why no worker runs it until someone acts on it")
    requested: Request | None = Field(
        default=None, description="a request recorded that no worker has acted on yet (answer, cancel, retry)"
    )
    error: dict[str, Any] | None = Field(description="why its stream could not be read ({code, message})")


class TaskPage(Page[TaskSummary]):
    """Tasks, newest first."""


class Workers(BaseModel):
    """Whether any worker is alive to act on the tenant's tasks, as their liveness records say (a
    worker writes one when it starts, every 30 s while it runs, and when it stops)."""

    alive: int = Field(description="workers seen in the server's window (90 s) that have not said they stopped")
    last_seen: datetime | None = Field(description="when the most recently seen worker was last seen, or null")
    app: str | None = Field(description="the app that worker runs, as `tether worker` was given it, or null")
    note: str | None = Field(description="when none is alive: what a person should hear, and how to start one")


class TaskDetail(BaseModel):
    """A task: its summary line, its full state, its failure in words, and whether a worker is alive."""

    summary: TaskSummary
    state: TaskState
    failure_summary: str | None
    workers: Workers


class HistoryEntry(BaseModel):
    """One event of a task's history, in words."""

    seq: int
    at: datetime
    type: str
    summary: str
    actor: str | None = Field(description="who made the write action (an API key's name), else null")
    step: str | None = Field(description="the plan step it fell in")
    boundary: str | None = Field(description='"before step N" on a step\'s first event, "after step N" on its last')
    data: dict[str, Any] = Field(description="the event's fields")


class HistoryPage(Page[HistoryEntry]):
    """A task's events in order, after a seq; ``next`` reads on from the last one."""

    task_id: str


class DiffBody(BaseModel):
    a: str = Field(description="the state the patch starts from: TASK@SEQ", examples=["trip-1@3"])
    b: str = Field(description="the state it ends at: TASK@SEQ", examples=["trip-1@5"])
    patch: list[dict[str, Any]] = Field(description="RFC 6902 operations")
    text: str = Field(description="the patch in words")


class TaskTree(BaseModel):
    """A task of a fork tree, with the forks made of it."""

    task_id: str
    status: Status
    fork_at: int | None = Field(description="the last event it shares with its parent")
    forks: list[TaskTree]


class Queued(BaseModel):
    """What a control verb did: the task's status now and whether a worker will take it up."""

    task_id: str
    status: Status
    runnable: bool
    note: str


class Answered(BaseModel):
    """Where a task stands once answered (or its call in doubt settled)."""

    task_id: str
    status: Status
    position: str


class PendingInput(BaseModel):
    task_id: str
    type: str
    user_id: str | None
    key: str
    prompt: str | None
    schema_: dict[str, Any] | None = Field(alias="schema", description="the answer's JSON schema")
    requested_at: datetime
    timeout_at: datetime | None

    model_config = ConfigDict(populate_by_name=True, serialize_by_alias=True)


class InputPage(Page[PendingInput]):
    """What tasks wait for, oldest question first."""


class SessionInfo(BaseModel):
    session_id: str
    user_id: str | None
    version: int = Field(description="how many events the session holds (messages, removals, summaries)")
    closed: bool
    created_at: datetime
    updated_at: datetime


class SessionPage(Page[SessionInfo]):
    """Sessions, newest first."""


class MessagePage(Page[Message]):
    """A session's messages in order (``since`` a seq), with its summaries."""

    session_id: str
    summaries: list[Summary]


class WindowBody(BaseModel):
    """What would go into the next model call."""

    messages: list[Message]
    summary: Summary | None
    tokens: int
    max_tokens: int
    counter: str = Field(description="what counted the tokens (an estimate is labelled so)")
    dropped: int


class UserDocument(BaseModel):
    user_id: str
    version: int
    document: dict[str, Any]


class WhoAmI(BaseModel):
    tenant: str
    name: str


class UsageTotals(BaseModel):
    """Tokens and cost summed over the calls that reported usage. ``cost`` sums the costs reported
    (``ctx.usage(cost=…)``; results carry tokens, not prices), ``null`` when none was."""

    input_tokens: int
    output_tokens: int
    total_tokens: int
    cost: float | None
    calls: int = Field(description="how many calls reported usage")


class CallUsageBody(UsageTotals):
    """One call's part of a task's usage."""

    n: int = Field(description="the call's number (call #n, as history counts; 0: reported before any call)")
    tool: str | None
    model: str | None
    at: datetime = Field(description="when it was spent")
    inherited: bool = Field(description="spent by the parent before the fork was made")


class TaskUsageBody(BaseModel):
    """A task's tokens and cost: its own, what a fork inherited from its parent, both, and each call's."""

    task_id: str
    own: UsageTotals
    inherited: UsageTotals
    total: UsageTotals
    calls: list[CallUsageBody]


class UsageReportBody(BaseModel):
    """The tenant's tasks' own usage (a fork's inheritance counts once, in its parent), grouped by ``by``."""

    total: UsageTotals
    by: str | None = Field(description="what the groups are by (task, type, user, session, model, day), or null")
    groups: dict[str, UsageTotals]
    tasks: int = Field(description="how many tasks were read")
    since: datetime | None = Field(description="the start of the time counted, or null for all of it")
