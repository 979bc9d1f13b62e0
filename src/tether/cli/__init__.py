"""The ``tether`` command: a thin click group over the public API.

Output is for people first (rich tables, colour in a terminal, plain text in a pipe); every read
verb takes ``--json`` for scripts, and with it a failure is a JSON object with the error's stable
``code``. The group and what commands share live in ``_base.py``, all rendering in ``_render.py``;
the commands by theme in ``reading.py``, ``time_travel.py``, ``running.py`` and ``serving.py``.
"""

from __future__ import annotations

from tether.cli import reading, running, serving, time_travel, usage  # noqa: F401  (each adds its commands to main)

# What the commands of the integrations (tether langgraph) build on.
from tether.cli._base import (
    CONTEXT,
    complete_task_id,
    current_tenant,
    db_option,
    errors_as_messages,
    existing_url,
    json_option,
    main,
    store_url,
    task_argument,
)
from tether.cli._render import console, emit_json, shorten, table

__all__ = [
    "CONTEXT",
    "complete_task_id",
    "console",
    "current_tenant",
    "db_option",
    "emit_json",
    "errors_as_messages",
    "existing_url",
    "json_option",
    "main",
    "shorten",
    "store_url",
    "table",
    "task_argument",
]
