"""Tokens and cost in the record: read from a recorded call's result when it carries usage in a
provider's shape (OpenAI chat and Responses, Anthropic, Google), or from what the code reported
with ``ctx.usage``; summed per task (what a fork inherited apart from what it spent itself) and
over many tasks, grouped by task, type, user, session, model or day.

A call's result is recorded once, and a replayed call records nothing: usage is counted once,
however many times the task is resumed."""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, overload

from tether.errors import InvalidInputError
from tether.model import TaskState

if TYPE_CHECKING:
    from tether.log import TaskLog

__all__ = [
    "GROUPS",
    "CallUsage",
    "TaskUsage",
    "Usage",
    "UsageReader",
    "UsageReport",
    "parse_since",
    "task_usage",
    "usage_of",
    "usage_report",
]

GROUPS = ("task", "type", "user", "session", "model", "day")
"""What :meth:`App.usage` and ``tether usage --by`` group totals by."""


@dataclass(frozen=True, slots=True)
class Usage:
    """Tokens and cost summed over ``calls`` calls that reported usage. ``cost`` sums the costs that
    were reported (results carry tokens, not prices: a cost comes from ``ctx.usage``), ``None``
    when none was."""

    input_tokens: int = 0
    output_tokens: int = 0
    cost: float | None = None
    calls: int = 0

    def __add__(self, other: Usage) -> Usage:
        cost = self.cost if other.cost is None else other.cost if self.cost is None else self.cost + other.cost
        return Usage(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            cost,
            self.calls + other.calls,
        )

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def to_dict(self) -> dict[str, Any]:
        return {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "total_tokens": self.total_tokens,
            "cost": self.cost,
            "calls": self.calls,
        }


@dataclass(frozen=True, slots=True)
class CallUsage:
    """One call's usage: its ordinal (0: reported before any call), tool, model and when it was spent."""

    n: int
    tool: str | None
    model: str | None
    usage: Usage
    at: float
    inherited: bool
    """Spent by the parent before the fork was made (a fork's own calls come after)."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "n": self.n,
            "tool": self.tool,
            "model": self.model,
            "at": self.at,
            "inherited": self.inherited,
            **self.usage.to_dict(),
        }


@dataclass(frozen=True, slots=True)
class TaskUsage:
    """A task's usage: what it spent itself (``own``), what a fork inherited from its parent, and
    each call's part."""

    task_id: str
    own: Usage
    inherited: Usage
    calls: tuple[CallUsage, ...]

    @property
    def total(self) -> Usage:
        return self.own + self.inherited

    def to_dict(self) -> dict[str, Any]:
        return {
            "task_id": self.task_id,
            "own": self.own.to_dict(),
            "inherited": self.inherited.to_dict(),
            "total": self.total.to_dict(),
            "calls": [c.to_dict() for c in self.calls],
        }


@dataclass(frozen=True, slots=True)
class UsageReport:
    """Totals over many tasks (each task's own usage: a fork's inherited part is its parent's, counted
    there), and the same grouped by ``by`` when asked."""

    total: Usage
    by: str | None = None
    groups: dict[str, Usage] = field(default_factory=dict)
    tasks: int = 0
    since: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "total": self.total.to_dict(),
            "by": self.by,
            "groups": {k: v.to_dict() for k, v in self.groups.items()},
            "tasks": self.tasks,
            "since": self.since,
        }


def _int(value: Any) -> int:
    return value if type(value) is int and value >= 0 else 0


def usage_of(result: Any) -> tuple[Usage, str | None, str] | None:
    """The usage a model call's result carries, its model and provider; ``None`` when it carries none.

    Shapes read (the JSON form tether records): OpenAI Chat Completions (``usage.prompt_tokens``,
    ``usage.completion_tokens``), OpenAI Responses and Anthropic Messages (``usage.input_tokens``,
    ``usage.output_tokens``; Anthropic's cache reads and writes count as input), Google Gemini
    (``usage_metadata`` / ``usageMetadata``: prompt, candidates and thoughts token counts).

    Example:
        >>> chat = {"model": "gpt-4o", "usage": {"prompt_tokens": 9, "completion_tokens": 3}}
        >>> usage, model, provider = usage_of(chat)
        >>> (usage.input_tokens, usage.output_tokens, model, provider)
        (9, 3, 'gpt-4o', 'openai')
    """
    if type(result) is not dict:
        return None
    usage = result.get("usage")
    model = result.get("model")
    model = model if isinstance(model, str) else None
    if type(usage) is dict:
        if "prompt_tokens" in usage or "completion_tokens" in usage:
            found = Usage(_int(usage.get("prompt_tokens")), _int(usage.get("completion_tokens")), None, 1)
            return found, model, "openai"
        if "input_tokens" in usage or "output_tokens" in usage:
            cached = _int(usage.get("cache_creation_input_tokens")) + _int(usage.get("cache_read_input_tokens"))
            anthropic = result.get("type") == "message" or "cache_creation_input_tokens" in usage
            found = Usage(_int(usage.get("input_tokens")) + cached, _int(usage.get("output_tokens")), None, 1)
            return found, model, "anthropic" if anthropic else "openai"
    return _google(result, model)


def _google(result: dict[str, Any], model: str | None) -> tuple[Usage, str | None, str] | None:
    meta = result.get("usage_metadata", result.get("usageMetadata"))
    if type(meta) is not dict:
        return None

    def count(snake: str) -> int:
        camel = snake.split("_")[0] + "".join(w.title() for w in snake.split("_")[1:])
        return _int(meta.get(snake, meta.get(camel)))

    output = count("candidates_token_count") + count("thoughts_token_count")
    version = result.get("model_version", result.get("modelVersion"))
    return (
        Usage(count("prompt_token_count"), output, None, 1),
        model or (version if isinstance(version, str) else None),
        "gcp.gemini",
    )


def task_usage(state: TaskState, *, since: float | None = None) -> TaskUsage:
    """A task's usage from its state: each completed call's (what the code reported for it with
    ``ctx.usage``, else what its result carries), and reports tied to no call. ``since``: only
    what was spent from then on (epoch seconds)."""
    forked_at = state.created_at.timestamp() if state.parent is not None else None
    reported: Mapping[int, dict[str, Any]] = state.usage
    found: list[CallUsage] = []
    seen: set[int] = set()
    for call in state.calls:
        if call.status != "completed" or call.finished_at is None:
            continue
        at = call.finished_at.timestamp()
        read = usage_of(call.result)
        entry = reported.get(call.n)
        if entry is not None:
            seen.add(call.n)
            part, model = _overlay(entry, read)
        elif read is not None:
            part, model, _ = read
        else:
            continue
        found.append(CallUsage(call.n, call.tool, model, part, at, forked_at is not None and at <= forked_at))
    for n, entry in reported.items():
        if n not in seen:  # reported before any call, or for a call that has not completed
            part = Usage(_int(entry.get("input_tokens")), _int(entry.get("output_tokens")), entry.get("cost"), 1)
            at = entry["at"]
            found.append(CallUsage(n, None, entry.get("model"), part, at, forked_at is not None and at <= forked_at))
    if since is not None:
        found = [c for c in found if c.at >= since]
    found.sort(key=lambda c: (c.at, c.n))
    own, inherited = Usage(), Usage()
    for c in found:
        if c.inherited:
            inherited += c.usage
        else:
            own += c.usage
    return TaskUsage(state.task_id, own, inherited, tuple(found))


def _overlay(entry: dict[str, Any], read: tuple[Usage, str | None, str] | None) -> tuple[Usage, str | None]:
    """What the code reported for a call over what its result carries: a field it gave wins."""
    base, model = (read[0], read[1]) if read is not None else (Usage(), None)
    inputs, outputs = entry.get("input_tokens"), entry.get("output_tokens")
    part = Usage(
        base.input_tokens if inputs is None else _int(inputs),
        base.output_tokens if outputs is None else _int(outputs),
        entry.get("cost"),
        1,
    )
    return part, entry.get("model") or model


def usage_report(states: Iterable[TaskState], *, by: str | None = None, since: float | None = None) -> UsageReport:
    """Totals of many tasks' own usage (see :class:`UsageReport`), grouped ``by`` one of :data:`GROUPS`."""
    if by is not None and by not in GROUPS:
        raise InvalidInputError(f"usage can be grouped by one of {', '.join(GROUPS)}; got {by!r}")
    total = Usage()
    groups: dict[str, Usage] = {}
    count = 0
    for state in states:
        count += 1
        for c in task_usage(state, since=since).calls:
            if c.inherited:
                continue
            total += c.usage
            if by is not None:
                key = _group_key(by, state, c)
                groups[key] = groups.get(key, Usage()) + c.usage
    ordered = dict(sorted(groups.items(), key=lambda kv: -kv[1].total_tokens))
    return UsageReport(total, by, ordered, count, since)


def _group_key(by: str, state: TaskState, call: CallUsage) -> str:
    if by == "task":
        return state.task_id
    if by == "type":
        return state.type
    if by == "user":
        return state.user_id or "-"
    if by == "session":
        return state.session_id or "-"
    if by == "model":
        return call.model or "-"
    return datetime.fromtimestamp(call.at, UTC).strftime("%Y-%m-%d")


_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_since(since: str | float | datetime | None, *, now: float | None = None) -> float | None:
    """``since`` as epoch seconds: a duration back from now (``"7d"``, ``"12h"``, ``"30m"``), an ISO
    date or time, a datetime, or epoch seconds."""
    if since is None:
        return None
    if isinstance(since, datetime):
        return since.timestamp()
    if isinstance(since, int | float) and not isinstance(since, bool):
        return float(since)
    if isinstance(since, str):
        text = since.strip()
        if text[:-1].isdigit() and text[-1:] in _UNITS:
            return (time.time() if now is None else now) - int(text[:-1]) * _UNITS[text[-1]]
        try:
            parsed = datetime.fromisoformat(text)
        except ValueError:
            pass
        else:
            return (parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)).timestamp()
    raise InvalidInputError(
        "since must be a duration back from now (7d, 12h, 30m, 45s, 2w), an ISO date or time, "
        f"or epoch seconds; got {since!r}"
    )


class UsageReader:
    """``app.usage``: tokens and cost read from a log's record (each call's once, however often it
    replayed).

    Example:
        >>> import tether
        >>> app = tether.App("memory://")
        >>> @app.task
        ... def priced(ctx):
        ...     ctx.usage(input_tokens=100, output_tokens=20, cost=0.003, model="m")
        >>> _ = app.run(priced, task_id="t1", user_id="ada")
        >>> app.usage("t1").own.cost
        0.003
        >>> app.usage(by="user").groups["ada"].total_tokens
        120
    """

    __slots__ = ("_log",)

    def __init__(self, log: TaskLog) -> None:
        self._log = log

    @overload
    def __call__(self, task_id: str, *, since: str | float | datetime | None = None) -> TaskUsage: ...

    @overload
    def __call__(
        self,
        task_id: None = None,
        *,
        user_id: str | None = None,
        session_id: str | None = None,
        type: str | None = None,
        by: str | None = None,
        since: str | float | datetime | None = None,
        limit: int = 10_000,
    ) -> UsageReport: ...

    def __call__(
        self,
        task_id: str | None = None,
        *,
        user_id: str | None = None,
        session_id: str | None = None,
        type: str | None = None,
        by: str | None = None,
        since: str | float | datetime | None = None,
        limit: int = 10_000,
    ) -> TaskUsage | UsageReport:
        """One task's usage (``task_id``: what it spent itself and, for a fork, what it inherited), or
        the totals of the tenant's tasks — or a user's, a session's, a type's — grouped ``by`` task,
        type, user, session, model or day. ``since``: a duration back from now (``"7d"``, ``"12h"``),
        an ISO date or time, or epoch seconds; ``limit``: at most this many tasks, newest first."""
        start = parse_since(since)
        if task_id is not None:
            return task_usage(self._log.load(task_id), since=start)
        if by is not None and by not in GROUPS:
            raise InvalidInputError(f"usage can be grouped by one of {', '.join(GROUPS)}; got {by!r}")
        rows = self._log.list(type=type, user_id=user_id, session_id=session_id, limit=limit)
        return usage_report((self._log.load(row.task_id) for row in rows), by=by, since=start)
