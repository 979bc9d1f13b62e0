"""What the Pydantic AI adapter records of a tool call, and how a replay gives it back.

A tool may return anything Pydantic AI can put in a message: a ``ToolReturn`` (a value for the
model, content sent beside it, metadata kept from it), ``BinaryContent`` and file URLs, dataclasses,
pydantic models, datetimes, bytes. tether records JSON, so such a value is recorded as Pydantic AI
itself keeps it in a message history (``ModelMessagesTypeAdapter``), and the call — live and
replayed alike — returns it rebuilt from there: files as files, a ``ToolReturn`` as one, anything
else as its JSON form. The model is sent the same either way (Pydantic AI renders a value and its
JSON form alike, so that a stored history reads as the live one did); what the code sees of a
user's own class is its JSON form. A value JSON holds exactly is recorded, and returned, as it is.

Anything a tool raises (other than Pydantic AI's own signals, the call's answers) fails its call,
and tether records the failure (type name, message, traceback): live, the run then raises what the
tool raised, as a plain run does; replayed, the record is raised as a :class:`~tether.errors.ToolError`
that is also an instance of that exception's class, when the class can be found again
(:func:`replayed_failure`).
"""

from __future__ import annotations

import math
import re
import sys
from typing import Any

from pydantic_ai.messages import ModelMessagesTypeAdapter, ModelRequest, ToolReturn, ToolReturnPart, UserPromptPart

from tether.errors import ToolError

__all__ = ["recorded_return", "replayed_failure", "returned"]

_RETURNED = "__tether_tool_return__"  # a value JSON does not hold as it is, as Pydantic AI keeps it
_SCALARS = (str, int, bool, type(None))


def _exact_json(value: Any) -> bool:
    """Whether JSON holds ``value`` exactly (it reads back equal, and of the same types), and it
    cannot be taken for one of the adapter's records (a dict of one ``__tether_…`` key)."""
    pending, containers = [value], set()
    while pending:
        item = pending.pop()
        kind = type(item)
        if kind in _SCALARS or (kind is float and math.isfinite(item)):
            continue
        if id(item) in containers:  # shared, or a cycle: not what JSON reads back
            return False
        containers.add(id(item))
        if kind is list:
            pending.extend(item)
        elif kind is dict and all(type(k) is str for k in item):
            pending.extend(item.values())
        else:
            return False
    return not (type(value) is dict and len(value) == 1 and next(iter(value)).startswith("__tether_"))


def recorded_return(value: Any, *, tool_name: str, call_id: str) -> Any:
    """What to record of a tool's return value: the value, if JSON holds it exactly; else the tool
    return part (and the prompt part a ``ToolReturn``'s content becomes) Pydantic AI would add to
    the message history, in its own JSON form."""
    if _exact_json(value):
        return value
    answer = value if isinstance(value, ToolReturn) else ToolReturn(return_value=value)
    parts: list[Any] = [ToolReturnPart(tool_name, answer.return_value, call_id, metadata=answer.metadata)]
    if answer.content:  # as Pydantic AI sends it: only content that is there
        parts.append(UserPromptPart(answer.content))
    message = ModelMessagesTypeAdapter.dump_python([ModelRequest(parts=parts)], mode="json")[0]
    return {_RETURNED: {"message": message, "tool_return": isinstance(value, ToolReturn), "tools": answer.tools}}


def returned(recorded: Any) -> Any:
    """The tool's return value as the run gets it from its record (see :func:`recorded_return`)."""
    if not (type(recorded) is dict and len(recorded) == 1 and _RETURNED in recorded):
        return recorded  # JSON as it is (and any record written before values were kept so)
    payload = recorded[_RETURNED]
    request = ModelMessagesTypeAdapter.validate_python([payload["message"]])[0]
    part = request.parts[0]
    assert isinstance(part, ToolReturnPart)
    if not payload["tool_return"]:
        return part.content
    prompt = request.parts[1] if len(request.parts) > 1 else None
    content = prompt.content if isinstance(prompt, UserPromptPart) else None
    return ToolReturn(return_value=part.content, content=content, metadata=part.metadata, tools=payload["tools"])


def replayed_failure(error: ToolError) -> ToolError:
    """A tool call's recorded failure (``error``, as tether raises it on replay), raised again as a
    :class:`ToolError` named after the exception the tool raised, that is also an instance of its
    class when that class can be found again (by the module and name the traceback gives, in a
    module already imported), and whose ``str()`` and ``args`` are its message. So the code around
    the run catches it as it caught the live exception; attributes of the tool's own exception are
    not restored (the record has its type, message and traceback only)."""
    raised = _raised_class(error.error_type, error.error_message, error.traceback)
    if raised is not None:
        try:
            return _replayed(_replay_class(raised), error)
        except Exception:  # a class that cannot be subclassed so, or made without its own arguments
            pass
    return _replayed(_named_tool_error(error.error_type), error)


def _replayed(cls: type[ToolError], error: ToolError) -> ToolError:
    replayed = cls.__new__(cls, error.error_message)  # the class's own __init__ wants its own arguments
    ToolError.__init__(
        replayed,
        error.tool,
        key=error.key,
        error_type=error.error_type,
        message=error.error_message,
        attempts=error.attempts,
        traceback=error.traceback,
    )
    replayed.args = (error.error_message,)
    return replayed


def _recorded_message(self: ToolError) -> str:
    return self.error_message


def _recorded_repr(self: ToolError) -> str:
    return f"{type(self).__name__}({self.error_message!r})"


def _not_recorded(self: ToolError, name: str) -> Any:
    """An attribute of the raised exception that the record does not keep: said so, by name."""
    raise AttributeError(
        f"{type(self).__name__}.{name}: this exception was replayed from tether's record, which keeps "
        "its type, message and traceback, not its attributes"
    )


_REPLAY_CLASSES: dict[type[BaseException], type[ToolError]] = {}
_NAMED: dict[str, type[ToolError]] = {}


def _replay_class(raised: type[BaseException]) -> type[ToolError]:
    """The class a replayed failure of ``raised`` is: both, named as ``raised`` is (made once)."""
    known = _REPLAY_CLASSES.get(raised)
    if known is not None:
        return known
    namespace = {
        "__module__": raised.__module__,
        "__qualname__": raised.__qualname__,
        "__doc__": f"A recorded {raised.__name__}, raised again by tether's replay.",
        "__str__": _recorded_message,  # the recorded message, whatever attributes the class's own reads
        "__repr__": _recorded_repr,
        "__getattr__": _not_recorded,
    }
    made = _REPLAY_CLASSES[raised] = type(raised.__name__, (raised, ToolError), namespace)
    return made


def _named_tool_error(name: str) -> type[ToolError]:
    """A :class:`ToolError` named after an exception class that cannot be found again (made once)."""
    if not name.isidentifier():
        return ToolError
    known = _NAMED.get(name)
    if known is None:
        namespace = {"__doc__": f"A recorded {name}, raised again by tether's replay.", "__str__": _recorded_message}
        known = _NAMED[name] = type(name, (ToolError,), namespace)
    return known


def _raised_class(error_type: str, message: str, traceback: str | None) -> type[BaseException] | None:
    """The exception class a recorded traceback ends with, if it is still importable as named
    there (``package.module.Class: message``; builtins and ``__main__`` name the class alone)."""
    if not traceback:
        return None
    tail = f": {message}" if message else ""
    names = re.findall(rf"^((?:[\w<>]+\.)*{re.escape(error_type)}){re.escape(tail)}$", traceback, re.MULTILINE)
    if not names:
        return None
    parts = names[-1].split(".")
    for split in range(len(parts) - 1, -1, -1):
        modules = [".".join(parts[:split])] if split else ["builtins", "__main__"]
        for module in modules:
            found = _attribute_path(sys.modules.get(module), parts[split:])
            if isinstance(found, type) and issubclass(found, BaseException) and found.__name__ == error_type:
                return found
    return None


def _attribute_path(owner: Any, names: list[str]) -> Any:
    for name in names:
        owner = getattr(owner, name, None)
    return owner
