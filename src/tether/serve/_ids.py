"""Ids in URLs and on pages: every id tether accepts can be named in a path and shown without spoofing.

An id may hold any character but NUL (see :mod:`tether.checks`): ``/``, ``?``, ``#``, ``%``,
spaces, control and bidi characters included. In a URL path an id is one segment,
percent-encoded (:func:`segment`). A server decodes the whole path before routing, which would
make ``a%2Fb`` two segments, so :class:`SegmentedPaths` routes on the raw path decoded segment by
segment instead, and the ``tether_id`` path convertor hands the id over whole. A browser cannot
send the ids ``.`` and ``..`` as a segment (it removes them, spelt ``%2E`` too, as "this folder"
and "the folder above"), so a segment may start with ``%00``, which is dropped: ``%00..`` names
the task ``..``. No id holds a NUL, so that names nothing else.

On a page an id is escaped; one that is not plain printable ASCII is isolated in ``<bdi>`` (its
right-to-left letters cannot reorder the text around it) and its invisible characters (controls,
bidi overrides, zero-width and format characters, unusual spaces) are shown as ``\\uXXXX``, so
two ids that look alike are told apart.

Example:
    >>> segment("a/b?c"), segment(".."), visible("pay\\u202eevil")
    ('a%2Fb%3Fc', '%00..', 'pay\\\\u202eevil')
"""

from __future__ import annotations

import html
import re
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any
from urllib.parse import quote, unquote_to_bytes

from starlette.convertors import Convertor, register_url_convertor

__all__ = ["ID", "SegmentedPaths", "segment", "shown", "visible"]

ID = "tether_id"
"""The path convertor of an id: ``/v1/tasks/{task_id:tether_id}``."""

_DOT_SEGMENTS = frozenset({".", ".."})
_MARK = "\0"
"""A segment's leading NUL (``%00``) is dropped: the way to write the ids ``.`` and ``..``."""
_ROUTED = re.compile("%(2F|25)")

Scope = MutableMapping[str, Any]
ASGI = Callable[[Scope, Callable[[], Awaitable[Any]], Callable[[Any], Awaitable[None]]], Awaitable[None]]


def segment(value: str) -> str:
    """``value`` as one URL path segment: percent-encoded, ``.`` and ``..`` behind ``%00``."""
    encoded = quote(value, safe="")
    return "%00" + encoded if value in _DOT_SEGMENTS else encoded


def _routed(raw: bytes) -> str:
    """The path to route on: each raw segment percent-decoded, its mark dropped, and its own ``%``
    and ``/`` written ``%25`` and ``%2F`` again, so a decoded ``/`` never splits a segment."""
    parts = []
    for part in raw.split(b"/"):
        text = unquote_to_bytes(part).decode("utf-8", "replace")
        text = text.removeprefix(_MARK)
        parts.append(text.replace("%", "%25").replace("/", "%2F"))
    return "/".join(parts)


class _IdConvertor(Convertor[str]):
    """One segment of the routed path (see :func:`_routed`) back to the id it holds."""

    regex = "[^/]+"

    def convert(self, value: str) -> str:
        return _ROUTED.sub(lambda m: "/" if m[1] == "2F" else "%", value)

    def to_string(self, value: str) -> str:
        return value.replace("%", "%25").replace("/", "%2F")


register_url_convertor(ID, _IdConvertor())


class SegmentedPaths:
    """ASGI middleware: routes see the raw path decoded segment by segment (see :func:`_routed`)."""

    def __init__(self, app: ASGI) -> None:
        self.app = app

    async def __call__(
        self, scope: Scope, receive: Callable[[], Awaitable[Any]], send: Callable[[Any], Awaitable[None]]
    ) -> None:
        raw = scope.get("raw_path") if scope["type"] in ("http", "websocket") else None
        if raw:
            scope = {**scope, "path": _routed(raw)}
        await self.app(scope, receive, send)


def _escape_char(ch: str) -> str:
    code = ord(ch)
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def visible(text: str) -> str:
    """``text`` with every character that does not print as itself (controls, bidi marks and
    overrides, zero-width and format characters, spaces other than a plain space) as ``\\uXXXX``."""
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else _escape_char(ch) for ch in text)


def shown(value: Any) -> str:
    """HTML of an id (or any short name): escaped; unless it is printable ASCII, isolated in
    ``<bdi>`` with its invisible characters shown as ``\\uXXXX`` in a ``<span class="ctl">``."""
    text = "" if value is None else str(value)
    if text.isascii() and text.isprintable():  # nothing to isolate: no letter of another direction
        return html.escape(text)
    body = "".join(
        html.escape(ch) if ch.isprintable() else f'<span class="ctl">{_escape_char(ch)}</span>' for ch in text
    )
    return f"<bdi>{body}</bdi>"
