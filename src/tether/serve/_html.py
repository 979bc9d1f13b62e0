"""The inspector's HTML pieces shared by its pages: escaping, links to tasks, JSON for scripts, times."""

from __future__ import annotations

import html
import json
from datetime import UTC, datetime
from typing import Any

from tether.serve._ids import segment, shown
from tether.serve._json import jsonable, utc

__all__ = ["data", "e", "link", "short", "when"]


def e(value: Any) -> str:
    """Escaped for HTML text and attribute values."""
    return html.escape("" if value is None else str(value), quote=True)


def link(task_id: str) -> str:
    """A link to a task's page: its id percent-encoded in the URL, shown safely in the text."""
    return f'<a href="/tasks/{e(segment(task_id))}">{shown(task_id)}</a>'


def data(value: Any) -> str:
    """JSON for a ``<script type="application/json">`` block: ``<`` escaped so no tag can close it."""
    return json.dumps(jsonable(value)).replace("<", "\\u003c")


def short(value: Any, limit: int = 160) -> str:
    text = json.dumps(jsonable(value), ensure_ascii=False)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def when(moment: datetime | float | None) -> str:
    """A ``<time>``: the exact UTC time, which the page's script shows relative ("3 min ago") in the
    reader's own zone, the exact local time on hover."""
    if moment is None:
        return ""
    if not isinstance(moment, datetime):
        moment = datetime.fromtimestamp(moment, UTC)
    exact = utc(moment)
    text = moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    return f'<time datetime="{exact}" title="{text}">{text}</time>'
