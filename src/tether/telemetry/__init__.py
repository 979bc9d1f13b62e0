"""Telemetry: OpenTelemetry traces and metrics of runs and calls, tokens and cost in the record, and
the loggers tether writes to.

Off until :func:`instrument` (or ``TETHER_OTEL=1``): a run then does nothing for telemetry but test
that it is off. ``opentelemetry-api`` is needed only to turn it on (``pip install 'tether[otel]'``).
Usage needs nothing: it is read from the record (:func:`usage_of`, ``app.usage``).

Example:
    >>> import tether, tether.telemetry
    >>> app = tether.App("memory://")
    >>> @app.tool
    ... def ask_model(q: str) -> dict:
    ...     return {"model": "gpt-4o", "choices": [], "usage": {"prompt_tokens": 12, "completion_tokens": 5}}
    >>> @app.task
    ... def answer(ctx, q):
    ...     return ctx.call(ask_model, q)["model"]
    >>> _ = app.run(answer, "hi", task_id="t1")
    >>> app.usage("t1").own.total_tokens
    17
"""

from __future__ import annotations

from tether.telemetry.hooks import instrument, instrumented, uninstrument
from tether.telemetry.usage import (
    GROUPS,
    CallUsage,
    TaskUsage,
    Usage,
    UsageReader,
    UsageReport,
    parse_since,
    task_usage,
    usage_of,
    usage_report,
)

__all__ = [
    "GROUPS",
    "CallUsage",
    "TaskUsage",
    "Usage",
    "UsageReader",
    "UsageReport",
    "instrument",
    "instrumented",
    "parse_since",
    "task_usage",
    "uninstrument",
    "usage_of",
    "usage_report",
]
