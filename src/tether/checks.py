"""Checks of what callers hand to tether, done once, before anything reaches a store.

Used by the app, the task log, store URL parsing and the CLI, so every entry point
refuses the same bad value with the same error: a :class:`~tether.errors.TetherError`
subclass that names the parameter and says what is allowed.

Ids (task, session, user, tool, tenant) are non-empty strings of at most
:data:`MAX_ID_LENGTH` characters, not only whitespace, without NUL characters or lone
surrogates (no backend can hold those in a key column the same way). A task id may not
start with a prefix tether keeps for its own streams (:data:`RESERVED_PREFIXES`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from tether.errors import ConfigurationError, InvalidInputError
from tether.model.status import Status

__all__ = [
    "MAX_ID_LENGTH",
    "MAX_LIMIT",
    "MAX_OFFSET",
    "RESERVED_PREFIXES",
    "check_id",
    "check_input_key",
    "check_int",
    "check_optional_id",
    "check_positive",
    "check_statuses",
    "check_task_id",
    "epoch",
    "option_float",
    "option_int",
]

MAX_ID_LENGTH = 200
"""The longest id, in characters, on every backend (an index key stays far below PostgreSQL's
B-tree limit and a notification channel's, even with tether's own prefixes added)."""

MAX_LIMIT = 1_000_000
"""The largest page a listing returns at once."""

MAX_OFFSET = 2**62
"""The largest offset into a listing (both backends' integers hold it)."""

RESERVED_PREFIXES = ("session:", "user:", "tether:")
"""Prefixes of tether's own streams (sessions, user documents): no task id may take them."""


def check_id(value: Any, name: str, *, error: type[Exception] = InvalidInputError) -> str:
    """``value`` if it is a usable id; else ``error`` naming ``name`` and what an id may be."""
    if not isinstance(value, str):
        raise error(f"{name} must be a string, got {type(value).__name__} {value!r}"[:300])
    if not value.strip():
        raise error(f"{name} must be a non-empty string that is not only whitespace, got {value!r}")
    if len(value) > MAX_ID_LENGTH:
        raise error(f"{name} is {len(value):,} characters long; ids are at most {MAX_ID_LENGTH} characters")
    if "\0" in value:
        raise error(f"{name} contains a NUL character (\\0), which ids may not hold: {value!r}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise error(f"{name} contains a lone surrogate, which is not valid UTF-8: {value!r}") from None
    return value


def check_optional_id(value: Any, name: str) -> str | None:
    """``None``, or an id (see :func:`check_id`)."""
    return None if value is None else check_id(value, name)


def check_input_key(value: Any) -> str:
    """A key a task waits for input on: an id (see :func:`check_id`) that is not one of tether's own
    (``tether.``: a task whose call is in doubt waits on ``tether.call-N``, settled by
    ``app.resolve_call``, not by an answer)."""
    key = check_id(value, "key")
    if key.startswith("tether."):
        raise InvalidInputError(
            f"input key {value!r} is one of tether's own (they start with 'tether.'): a task waiting on "
            "'tether.call-N' has call #N in doubt; settle it with app.resolve_call or `tether resolve`, "
            "and name your own waits otherwise"
        )
    return key


def check_task_id(value: Any, name: str = "task_id") -> str:
    """A task id: an id (see :func:`check_id`) outside tether's own namespaces."""
    check_id(value, name)
    if value.startswith(RESERVED_PREFIXES):
        raise InvalidInputError(
            f"{name} {value!r} starts with a prefix tether keeps for its own streams "
            f"({', '.join(RESERVED_PREFIXES)}); choose another id"
        )
    return str(value)


def check_int(
    value: Any, name: str, *, low: int, high: int | None = None, error: type[Exception] = InvalidInputError
) -> int:
    """An ``int`` (not a bool) with ``low <= value <= high``."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise error(f"{name} must be an integer, got {type(value).__name__} {value!r}")
    if value < low or (high is not None and value > high):
        allowed = f"from {low} to {high:,}" if high is not None else f"at least {low}"
        raise error(f"{name} must be an integer {allowed}, got {value}")
    return value


def check_positive(value: Any, name: str, *, zero: bool = False) -> float:
    """A finite real number above zero (or at least zero with ``zero=True``)."""
    if not isinstance(value, int | float) or isinstance(value, bool):
        raise ConfigurationError(f"{name} must be a number of seconds, got {type(value).__name__} {value!r}")
    if not math.isfinite(value) or value < 0 or (value == 0 and not zero):
        bound = "at least 0" if zero else "above 0"
        raise ConfigurationError(f"{name} must be a finite number {bound}, got {value!r}")
    return float(value)


def option_float(options: dict[str, Any], name: str, *, zero: bool = False) -> None:
    """Turn a URL option (text) into a finite positive float in place, or refuse it by name."""
    if name not in options:
        return
    raw = options[name]
    try:
        number = float(raw) if isinstance(raw, str) else raw
    except ValueError:
        raise ConfigurationError(f"store option {name}={raw!r} is not a number (seconds)") from None
    options[name] = check_positive(number, f"store option {name}", zero=zero)


def option_int(options: dict[str, Any], name: str, *, low: int) -> None:
    """Turn a URL option (text) into an int ``>= low`` in place, or refuse it by name."""
    if name not in options:
        return
    raw = options[name]
    try:
        number = int(raw) if isinstance(raw, str) else raw
    except ValueError:
        raise ConfigurationError(f"store option {name}={raw!r} is not a whole number") from None
    if not isinstance(number, int) or isinstance(number, bool) or number < low:
        raise ConfigurationError(f"store option {name} must be a whole number >= {low}, got {raw!r}")
    options[name] = number


def check_statuses(status: Status | str | Iterable[Status | str] | None) -> tuple[str, ...] | None:
    """The stored values of a status filter (one status or several); ``None`` means any."""
    if status is None:
        return None
    items = [status] if isinstance(status, str | Status) else list(status)
    try:
        return tuple(Status(s).value for s in items)
    except ValueError:
        raise InvalidInputError(f"unknown status in {items!r}; known: {', '.join(s.value for s in Status)}") from None


def epoch(value: datetime | float | None) -> float | None:
    """A time filter as epoch seconds (a ``datetime`` or a number)."""
    if value is None or isinstance(value, float | int):
        return value
    return value.timestamp()
