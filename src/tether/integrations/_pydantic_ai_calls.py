"""What the Pydantic AI adapter records of what a tool returned, and how a replay gives it back.

A tool may return anything Pydantic AI can put in a message: a ``ToolReturn`` (a value for the
model, content sent beside it, metadata kept from it), ``BinaryContent`` and file URLs, dataclasses,
pydantic models, datetimes, bytes. tether records JSON, so such a value is recorded as Pydantic AI
itself keeps it in a message history (``ModelMessagesTypeAdapter``), and the call — live and
replayed alike — returns it rebuilt from there: files as files, a ``ToolReturn`` as one, anything
else as its JSON form. The model is sent the same either way (Pydantic AI renders a value and its
JSON form alike, so that a stored history reads as the live one did); what the code sees of a
user's own class is its JSON form. A value JSON holds exactly is recorded, and returned, as it is.
"""

from __future__ import annotations

import math
from typing import Any

from pydantic_ai.messages import ModelMessagesTypeAdapter, ModelRequest, ToolReturn, ToolReturnPart, UserPromptPart

__all__ = ["recorded_return", "returned"]

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
