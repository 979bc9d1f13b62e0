"""What every event is: the base class and its registry, an event as stored, and upcasting.

Event classes register themselves by name (:data:`EVENT_TYPES`) with the ``define_event`` decorator, so a
stored record's type name finds its class; :class:`Upcasters` migrate records stored in an older
shape on read. The event types of a task live beside this module, grouped by job
(``task``, ``calls``, ``knowledge``, ``session``); the fold is in ``_fold``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, ClassVar, NamedTuple, TypeVar, dataclass_transform

from tether.errors import SchemaVersionError, UnknownEventTypeError

__all__ = ["DEFAULT_UPCASTERS", "EVENT_TYPES", "Event", "Recorded", "Upcaster", "Upcasters"]


class Event:
    """Base of every event. Subclasses are slotted dataclasses, never changed once made.

    ``version`` is the shape's schema version; records stored under an older
    version are migrated on read by :class:`Upcasters`.
    """

    __slots__ = ()
    version: ClassVar[int] = 1
    event_type: ClassVar[str]

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}  # type: ignore[arg-type]

    def describe(self) -> str:
        """One line, for people, of what this event says: its summary in a history
        (:func:`tether.timetravel.describe`). tether's task events have theirs in
        :mod:`tether.timetravel`; an event type defined elsewhere (an integration's, yours) says
        its own by overriding this. By default, its type's name."""
        return self.event_type


EVENT_TYPES: dict[str, type[Event]] = {}
_E = TypeVar("_E", bound=Event)


@dataclass_transform()
def define_event(cls: type[_E]) -> type[_E]:
    """Register an event class under its own name and make it a slotted dataclass.

    Events are facts and tether never changes one once made; they are not
    ``frozen`` only because a frozen dataclass costs three times as much to build,
    and one is built for every step a task takes.
    """
    cls = dataclass(slots=True)(cls)
    cls.event_type = cls.__name__
    EVENT_TYPES[cls.__name__] = cls
    return cls


def from_epoch(epoch: float) -> datetime:
    return datetime.fromtimestamp(epoch, UTC)


class Recorded(NamedTuple):
    """An event as stored: its sequence number in the stream and when it was appended (epoch seconds)."""

    seq: int
    at: float
    event: Event

    @property
    def time(self) -> datetime:
        return from_epoch(self.at)


# --------------------------------------------------------------------------- upcasting

Upcaster = Callable[[dict[str, Any]], dict[str, Any]]


class Upcasters:
    """Migrations of stored event shapes: ``(type, from_version) → fn(data) -> data``.

    Old records are migrated on read, one version at a time, so upgrading tether
    never strands stored tasks.

    Example:
        >>> ups = Upcasters()
        >>> @ups.register("ObservationRecorded", 0)
        ... def name_became_key(data):
        ...     data = dict(data)
        ...     data["key"] = data.pop("name")
        ...     return data
        >>> ups.decode("ObservationRecorded", 0, {"name": "price", "value": 3}).key
        'price'
    """

    def __init__(self) -> None:
        self._steps: dict[tuple[str, int], Upcaster] = {}

    def register(self, type_name: str, from_version: int) -> Callable[[Upcaster], Upcaster]:
        def decorator(fn: Upcaster) -> Upcaster:
            self._steps[(type_name, from_version)] = fn
            return fn

        return decorator

    def step(self, type_name: str, from_version: int) -> Upcaster | None:
        """The migration registered here for records of ``type_name`` at ``from_version``, if any."""
        return self._steps.get((type_name, from_version))

    def decode(self, type_name: str, version: int, data: dict[str, Any]) -> Event:
        """Build the current event object from a stored record, migrating it if it is older."""
        cls = EVENT_TYPES.get(type_name)
        if cls is None:
            raise UnknownEventTypeError(
                f"unknown event type {type_name!r}; known types: {', '.join(sorted(EVENT_TYPES))}"
            )
        if version > cls.version:
            raise SchemaVersionError(
                f"event {type_name} has schema version {version}, newer than this tether "
                f"knows ({cls.version}); upgrade tether to read it",
                found=version,
                supported=cls.version,
            )
        while version < cls.version:
            step = self.step(type_name, version)
            if step is None and self is not DEFAULT_UPCASTERS:
                # tether's own migrations (of its own events) apply beside any set of the user's
                step = DEFAULT_UPCASTERS.step(type_name, version)
            if step is None:
                raise SchemaVersionError(
                    f"event {type_name} is stored at schema version {version} and no upcaster "
                    f"migrates it to {version + 1} (current {cls.version})",
                    found=version,
                    supported=cls.version,
                )
            data = step(data)
            version += 1
        try:
            return cls(**data)
        except TypeError as exc:
            raise UnknownEventTypeError(
                f"stored {type_name} (schema {version}) does not match its class: {exc}"
            ) from exc


DEFAULT_UPCASTERS = Upcasters()
