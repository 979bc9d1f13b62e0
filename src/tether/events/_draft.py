"""The fold's working copy: records built without re-validation, and a copy-on-write draft of a state.

The fold runs on every append and every load, on data that came out of tether's own events; these
helpers build and change pydantic records without validating them again.
"""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel

from tether.errors import TetherError
from tether.events.base import from_epoch
from tether.model import TaskState, ToolCall
from tether.model.calls import CallDraft, CallList, call_index

__all__ = ["_Draft", "_evolve", "_make"]


_DEFAULTS: dict[type[BaseModel], dict[str, Any]] = {}
_NO_CALLS = CallList()
_Model = TypeVar("_Model", bound=BaseModel)


def _make(cls: type[_Model], **values: Any) -> _Model:
    """Build a record from values the fold already knows are valid, without re-validating.

    The fold runs on every append and on every load; pydantic validation of data
    that came out of our own events would be most of its cost. Missing fields take
    their declared defaults.
    """
    defaults = _DEFAULTS.get(cls)
    if defaults is None:
        defaults = _DEFAULTS[cls] = {
            name: f.get_default(call_default_factory=True)
            for name, f in cls.model_fields.items()
            if not f.is_required()
        }
    record = object.__new__(cls)
    object.__setattr__(record, "__dict__", {**defaults, **values})
    object.__setattr__(record, "__pydantic_fields_set__", set(values))
    object.__setattr__(record, "__pydantic_extra__", None)
    object.__setattr__(record, "__pydantic_private__", None)
    return record


def _evolve(record: _Model, changes: dict[str, Any]) -> _Model:
    """A copy of a frozen record with some fields replaced; the input is untouched."""
    new = object.__new__(type(record))
    object.__setattr__(new, "__dict__", {**record.__dict__, **changes})
    object.__setattr__(new, "__pydantic_fields_set__", record.__pydantic_fields_set__ | changes.keys())
    object.__setattr__(new, "__pydantic_extra__", None)
    object.__setattr__(new, "__pydantic_private__", None)
    return new


class _Draft:
    """A private, mutable working copy of a state while a batch of events is folded onto it.

    Collections are copied the first time a rule changes them (once per batch), so
    folding k events onto a state costs O(state + k), not O(state × k). The input
    state is never touched; :meth:`freeze` makes the new immutable state.
    """

    __slots__ = ("owned", "seq", "values")

    def __init__(self, state: TaskState) -> None:
        self.values = dict(state.__dict__)
        self.owned: set[str] = set()
        self.seq = 0
        """The seq of the event being folded: a call's record names the events that made it."""

    def own_list(self, name: str) -> list[Any]:
        if name not in self.owned:
            self.values[name] = list(self.values[name])
            self.owned.add(name)
        return self.values[name]  # type: ignore[no-any-return]

    def own_dict(self, name: str) -> dict[str, Any]:
        if name not in self.owned:
            self.values[name] = dict(self.values[name])
            self.owned.add(name)
        return self.values[name]  # type: ignore[no-any-return]

    def own_calls(self) -> CallDraft:
        if "calls" not in self.owned:
            self.values["calls"] = self.values["calls"].draft()
            self.owned.add("calls")
        return self.values["calls"]  # type: ignore[no-any-return]

    def call_at(self, n: int) -> int:
        i = call_index(self.values["calls"], n)
        if i is None:
            raise TetherError(f"event refers to call #{n}, but task {self.values['task_id']!r} has no such call")
        return i

    def call(self, n: int) -> ToolCall:
        return self.values["calls"][self.call_at(n)]  # type: ignore[no-any-return]

    def replace_call(self, n: int, changes: dict[str, Any]) -> None:
        i = self.call_at(n)
        calls = self.own_calls()
        calls.set_call(i, _evolve(calls[i], changes), self.seq)

    def open_call(self, call: ToolCall) -> None:
        """Add a new call in ordinal order (parallel calls open in the order they finish)."""
        self.own_calls().open_call(call, self.seq)

    def peek(self, template: TaskState, seq: int, at: float) -> TaskState:
        """The state so far, as of event ``seq`` appended at ``at``, without its calls; the draft goes
        on. It shares the draft's dicts: only valid until the next event is folded."""
        values = dict(self.values)
        for name in self.owned:
            if type(values[name]) is list:
                values[name] = tuple(values[name])
        values["calls"] = _NO_CALLS
        values["version"] = seq
        values["updated_at"] = from_epoch(at)
        return _as_state(template, values)

    def freeze(self, template: TaskState) -> TaskState:
        values = self.values
        for name in self.owned:
            kind = type(values[name])
            if kind is list:
                values[name] = tuple(values[name])
            elif kind is CallDraft:
                values[name] = values[name].freeze()
        return _as_state(template, values)


def _as_state(template: TaskState, values: dict[str, Any]) -> TaskState:
    new = object.__new__(type(template))
    object.__setattr__(new, "__dict__", values)
    object.__setattr__(new, "__pydantic_fields_set__", template.__pydantic_fields_set__ | values.keys())
    object.__setattr__(new, "__pydantic_extra__", None)
    object.__setattr__(new, "__pydantic_private__", None)
    return new
