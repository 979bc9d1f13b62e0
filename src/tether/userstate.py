"""User state: a versioned document per user that outlives sessions (preferences, profile).

Every change is an event on the user's stream (what was set, what was removed),
so the document's history is kept; updates are optimistic — two at once: one
wins, the other reads the new version and tries again (or, with an explicit
``expected_version``, gets :class:`~tether.ConflictError`). No update is lost.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import orjson
from pydantic import BaseModel, ValidationError

from tether.canonical import as_json
from tether.errors import ConflictError, InvalidInputError, TetherError
from tether.events import Event, define_event
from tether.log import TaskLog
from tether.log.conflicts import retry_on_conflict
from tether.log.streams import Stream
from tether.store import StreamAppend

__all__ = ["UserChange", "UserState"]

USER_TYPE = "tether.user"
_MISSING = object()


@define_event
class UserCreated(Event):
    user_id: str

    def describe(self) -> str:
        return f"user document of {self.user_id} created"


@define_event
class UserChanged(Event):
    set: dict[str, Any]
    removed: list[str]

    def describe(self) -> str:
        parts = [f"set {', '.join(sorted(self.set))}"] if self.set else []
        parts += [f"removed {', '.join(self.removed)}"] if self.removed else []
        return "user document: " + ("; ".join(parts) or "no change")


@dataclass(frozen=True)
class UserChange:
    version: int
    at: datetime
    set: dict[str, Any]
    removed: list[str]


class _StaleError(TetherError):
    """A write at an ``expected_version`` that is not the document's: raised, never retried."""

    def __init__(self, stream: str, *, expected: int, actual: int | None) -> None:
        super().__init__(f"{stream}: expected version {expected}, found {actual}")
        self.task_id, self.expected, self.actual = stream, expected, actual


class UserState:
    """A user's document.

    Example:
        >>> import tether
        >>> app = tether.App("memory://")
        >>> ada = app.user("ada")
        >>> ada.set("seat", "aisle")
        2
        >>> ada.update(lambda doc: {**doc, "home": "LHR"})["home"]
        'LHR'
        >>> ada.get("seat"), ada.version
        ('aisle', 3)
    """

    def __init__(self, log: TaskLog, user_id: str, schema: type[BaseModel] | None = None) -> None:
        if not user_id:
            raise InvalidInputError("a user needs a non-empty user_id")
        self.user_id = user_id
        self.schema = schema
        self._stream = Stream(log, f"user:{user_id}", USER_TYPE)
        self._stream.create(UserCreated(user_id=user_id), user_id=user_id)
        self._doc: dict[str, Any] = {}
        self._version = 0

    def _refresh(self) -> tuple[dict[str, Any], int]:
        for rec in self._stream.read(after=self._version):
            if isinstance(rec.event, UserChanged):
                self._doc = {k: v for k, v in self._doc.items() if k not in rec.event.removed}
                self._doc.update(rec.event.set)
            self._version = rec.seq
        return dict(self._doc), self._version

    @property
    def version(self) -> int:
        return self._refresh()[1]

    def get(self, key: str | None = None, default: Any = None) -> Any:
        """The whole document, or one key of it."""
        doc, _ = self._refresh()
        if key is None:
            return self.schema.model_validate(doc) if self.schema is not None else doc
        return doc.get(key, default)

    def set(self, key: str, value: Any, *, expected_version: int | None = None) -> int:
        """Set one key; returns the new version. With ``expected_version``, a stale one raises ConflictError."""
        return self._write(lambda doc: {**doc, key: value}, expected_version)[1]

    def delete(self, key: str, *, expected_version: int | None = None) -> int:
        return self._write(lambda doc: {k: v for k, v in doc.items() if k != key}, expected_version)[1]

    def update(self, fn: Callable[[dict[str, Any]], dict[str, Any]], *, retries: int = 20) -> dict[str, Any]:
        """Apply ``fn(doc) -> new doc`` optimistically: if another writer got there first, read the
        new document and apply ``fn`` again (up to ``retries`` times). Returns the document written."""
        return self._write(fn, None, retries)[0]

    def change(self, fn: Callable[[dict[str, Any]], dict[str, Any]]) -> StreamAppend | None:
        """What applying ``fn(doc) -> new doc`` to the document as it is now would write (``None``:
        nothing changes), checked and encoded but not written: for an append that must land in one
        transaction with other streams' (:func:`tether.log.streams.append_together`). A conflict there
        means another writer changed the document first: ask again."""
        _, version, event = self._changed(fn, None)
        return None if event is None else self._stream.part([event], version)

    def _changed(
        self, fn: Callable[[dict[str, Any]], dict[str, Any]], expected: int | None
    ) -> tuple[dict[str, Any], int, UserChanged | None]:
        """The document ``fn`` makes of the current one, the version it applies to, and the event
        that records the change (``None`` when nothing changes)."""
        doc, version = self._refresh()
        if expected is not None and expected != version:
            raise _StaleError(self._stream.id, expected=expected, actual=version)
        new = fn(dict(doc))
        if not isinstance(new, dict):
            raise InvalidInputError(f"an update must return the new document (a dict), got {type(new).__name__}")
        new = as_json(new)
        if self.schema is not None:
            try:
                new = self.schema.model_validate(new).model_dump(mode="json")
            except ValidationError as exc:
                raise InvalidInputError(f"user {self.user_id!r}: {exc}") from None
        changed = {k: v for k, v in new.items() if k not in doc or doc[k] != v}
        removed = [k for k in doc if k not in new]
        if not changed and not removed:
            return doc, version, None
        orjson.dumps(changed)
        return new, version, UserChanged(set=changed, removed=removed)

    def _write(
        self, fn: Callable[[dict[str, Any]], dict[str, Any]], expected: int | None, retries: int = 20
    ) -> tuple[dict[str, Any], int]:
        def attempt() -> tuple[dict[str, Any], int]:
            new, version, event = self._changed(fn, expected)
            if event is None:
                return new, version
            try:
                version = self._stream.append([event], version)
            except ConflictError as conflict:
                if expected is not None:  # the caller named the version: a conflict is theirs to see
                    raise _StaleError(self._stream.id, expected=expected, actual=conflict.actual) from None
                raise
            return new, version

        try:
            return retry_on_conflict(attempt, stream=self._stream.id, tries=retries)
        except _StaleError as stale:
            raise ConflictError(stale.task_id, expected=stale.expected, actual=stale.actual) from None

    def history(self) -> list[UserChange]:
        """Every change, oldest first."""
        return [
            UserChange(r.seq, r.time, r.event.set, r.event.removed)
            for r in self._stream.read()
            if isinstance(r.event, UserChanged)
        ]
