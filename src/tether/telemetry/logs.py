"""tether's loggers: named under ``tether`` (whose root has a ``NullHandler``, so an application that
configures no logging sees nothing), one line per run start, end and failure with structured fields
in ``extra`` — never a task's payloads."""

from __future__ import annotations

import logging
import time
from typing import Any

__all__ = ["RUN_FIELDS", "LineFormatter", "access_log", "log_to_stderr", "run_log", "task_fields", "worker_log"]

logging.getLogger("tether").addHandler(logging.NullHandler())

run_log = logging.getLogger("tether.run")
"""A run's start, end and failure: ``tether_task_id``, ``tether_task_type``, ``tether_tenant``,
``tether_run_id``, ``tether_attempt``, ``tether_resumed``, ``tether_worker_id``, and at the end
``tether_status``, ``tether_duration_s`` (and ``tether_error_type`` for a failure)."""

worker_log = logging.getLogger("tether.worker")
"""A worker's lines of the tasks it runs (:func:`task_fields`): ``tether_action`` (``claimed``,
``finished``, ``stopped``, ``failed``, ``parked``, ``taken_over``), ``tether_task_id``,
``tether_tenant``, ``tether_worker_id``, ``tether_attempt`` once the run began; ``tether_status``
and ``tether_duration_s`` when it finished, ``tether_error_type`` when it did not, and
``tether_retry_in_s`` when the task is held aside for that long before a worker claims it again."""

access_log = logging.getLogger("tether.serve.access")
"""``tether serve``'s access log: one line per request with ``http_method``, ``http_path``,
``http_status``, ``duration_s`` and ``tether_tenant``."""

RUN_FIELDS = (
    "tether_task_id",
    "tether_task_type",
    "tether_tenant",
    "tether_run_id",
    "tether_attempt",
    "tether_resumed",
    "tether_worker_id",
    "tether_status",
    "tether_duration_s",
    "tether_error_type",
)

_STANDARD = frozenset(vars(logging.makeLogRecord({})))


def task_fields(
    action: str, task_id: str, tenant: str, worker_id: str, attempt: int | None = None, **more: Any
) -> dict[str, Any]:
    """The structured fields (``extra=``) of a worker's line about a task, in the shape of the run's own lines.

    Example:
        >>> task_fields("claimed", "t1", "acme", "host:42:ab")["tether_tenant"]
        'acme'
    """
    return {
        "tether_action": action,
        "tether_task_id": task_id,
        "tether_tenant": tenant,
        "tether_worker_id": worker_id,
        "tether_attempt": attempt,
        **more,
    }


class LineFormatter(logging.Formatter):
    """One line per record: time, level, logger, message, then the record's structured fields
    (``extra=``) as ``key=value`` — the shape of ``tether serve``'s lines, access and runs alike.

    Example:
        >>> import logging
        >>> fields = {"msg": "GET /healthz 200", "levelname": "INFO", "name": "tether.serve.access"}
        >>> record = logging.makeLogRecord({**fields, "http_status": 200, "created": 0})
        >>> LineFormatter().format(record).split(" ", 1)[1]
        'INFO tether.serve.access GET /healthz 200 http_status=200'
    """

    def format(self, record: logging.LogRecord) -> str:
        when = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
        fields = " ".join(f"{k}={_field(v)}" for k, v in vars(record).items() if k not in _STANDARD and v is not None)
        line = f"{when}Z {record.levelname} {record.name} {record.getMessage()}"
        if fields:
            line += " " + fields
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


def _field(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    text = str(value)
    return f'"{text}"' if " " in text or not text else text


def log_to_stderr(level: str) -> logging.Handler:
    """Send the ``tether`` loggers' lines at ``level`` and above to stderr, one :class:`LineFormatter`
    line each; returns the handler (to remove it)."""
    handler = logging.StreamHandler()
    handler.setFormatter(LineFormatter())
    root = logging.getLogger("tether")
    root.addHandler(handler)
    root.setLevel(level.upper())
    return handler
