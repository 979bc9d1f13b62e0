"""tether's loggers: named under ``tether`` (whose root has a ``NullHandler``, so an application that
configures no logging sees nothing), one line per run start, end and failure with structured fields
in ``extra`` — never a task's payloads."""

from __future__ import annotations

import logging

__all__ = ["RUN_FIELDS", "access_log", "run_log"]

logging.getLogger("tether").addHandler(logging.NullHandler())

run_log = logging.getLogger("tether.run")
"""A run's start, end and failure: ``tether_task_id``, ``tether_task_type``, ``tether_run_id``,
``tether_attempt``, ``tether_resumed``, ``tether_worker_id``, and at the end ``tether_status``,
``tether_duration_s`` (and ``tether_error_type`` for a failure)."""

access_log = logging.getLogger("tether.serve.access")
"""``tether serve``'s access log: one line per request with ``http_method``, ``http_path``,
``http_status``, ``duration_s`` and ``tether_tenant``."""

RUN_FIELDS = (
    "tether_task_id",
    "tether_task_type",
    "tether_run_id",
    "tether_attempt",
    "tether_resumed",
    "tether_worker_id",
    "tether_status",
    "tether_duration_s",
    "tether_error_type",
)
