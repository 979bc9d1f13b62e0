"""The ``tether`` command: a thin click group over the public API.

Output is for people first (rich tables, colour in a terminal, plain text in a pipe); every read
verb takes ``--json`` for scripts, and with it a failure is a JSON object with the error's stable
``code``. The group and what commands share live in ``_base.py``, all rendering in ``_render.py``;
the commands by theme in ``reading.py``, ``time_travel.py``, ``running.py`` and ``serving.py``.
"""

from __future__ import annotations

from tether.cli import reading, running, serving, time_travel
from tether.cli._base import (
    CONTEXT,
    _open,
    _tenant,
    _tid,
    _url,
    app_option,
    db_option,
    errors_as_messages,
    json_option,
    main,
)
from tether.cli._render import _console, _emit_json, _short

__all__ = [
    "CONTEXT",
    "_console",
    "_emit_json",
    "_open",
    "_short",
    "_tenant",
    "_tid",
    "_url",
    "app_option",
    "db_option",
    "errors_as_messages",
    "json_option",
    "main",
    "reading",
    "running",
    "serving",
    "time_travel",
]
