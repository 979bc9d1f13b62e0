"""What the Pydantic AI adapter records of a tool call, and how a replay gives it back.

A tool may return anything Pydantic AI can put in a message: a ``ToolReturn`` (a value for the
model, content sent beside it, metadata kept from it), ``BinaryContent`` and file URLs, dataclasses,
pydantic models, datetimes, bytes. tether records JSON, so such a value is recorded as Pydantic AI
itself keeps it in a message history (``ModelMessagesTypeAdapter``), and the call — live and
replayed alike — returns it rebuilt from there: files as files, a ``ToolReturn`` as one, anything
else as its JSON form. The model is sent the same either way (Pydantic AI renders a value and its
JSON form alike, so that a stored history reads as the live one did); what the code sees of a
user's own class is its JSON form. A value JSON holds exactly is recorded, and returned, as it is.

What a tool (or a hook around it) raises to steer the run — a retry it asks for, a
``ValidationError``, that it failed, a deferral, an approval to wait for, a skip — is Pydantic AI's
own signal, not a failure: it is the call's recorded answer, raised again from the record live and
replayed alike (:func:`recorded_signal`, :func:`raise_recorded`), as Pydantic AI's own durable
engines carry them as data. Anything else a tool (or the model) raises fails its call, and tether
records the failure (type name, message, traceback): live, the run then raises what was raised, as
a plain run does; replayed, the record is raised as a :class:`~tether.errors.ToolError` that is also
an instance of that exception's class, when the class can be found again (:func:`replayed_failure`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import ValidationError
from pydantic_ai import SkipToolExecution
from pydantic_ai.exceptions import (
    ApprovalRequired,
    CallDeferred,
    ModelRetry,
    ToolFailed,
    ToolFailedError,
    ToolRetryError,
)
from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelRequestPart,
    ToolReturn,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_core import PydanticCustomError, to_jsonable_python

from tether.errors import ToolError
from tether.integrations._recorded_errors import raised_class

__all__ = ["raise_recorded", "recorded_return", "recorded_signal", "replayed_failure", "returned"]

_RETURNED = "__tether_tool_return__"  # a value JSON does not hold as it is, as Pydantic AI keeps it
_RETRY = "__tether_model_retry__"  # the tool asked for a retry (``ModelRetry``): the retried part
_FAILED = "__tether_tool_failed__"  # the tool said it failed (``ToolFailed``): its answer to the model
_HOOK_RETRY = "__tether_hook_retry__"  # a hook around the tool raised ``ModelRetry``: its message
_HOOK_FAILED = "__tether_hook_failed__"  # a hook around the tool raised ``ToolFailed``: its message
_DEFERRED = "__tether_call_deferred__"  # the call is to be made outside the run (``CallDeferred``)
_APPROVAL = "__tether_approval_required__"  # the call waits for a person's approval (``ApprovalRequired``)
_INVALID = "__tether_validation_error__"  # the tool raised a ``ValidationError``: a retry, with its errors
_SKIPPED = "__tether_tool_skipped__"  # a hook skipped the tool with a result (``SkipToolExecution``)
_SCALARS = (str, int, float, bool, type(None))


def _exact_json(value: Any) -> bool:
    """Whether JSON holds ``value`` exactly (it reads back equal, and of the same types), and it
    cannot be taken for one of the adapter's records (a dict of one ``__tether_…`` key). A float is
    JSON's whatever its value: a NaN or an infinity goes to tether, which refuses it by name, where
    Pydantic AI's JSON would have made it a silent ``null``."""
    pending, containers = [value], set()
    while pending:
        item = pending.pop()
        kind = type(item)
        if kind in _SCALARS:
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


def recorded_signal(error: Exception, *, tool_name: str, call_id: str) -> dict[str, Any] | None:
    """The record of what a tool, or a hook around it, raised to steer the run; ``None`` for an
    exception that is no such signal (it fails the call)."""
    if isinstance(error, ToolRetryError):  # the tool's ModelRetry, made a retried part by Pydantic AI
        return {_RETRY: _message_json(error.tool_retry)}
    if isinstance(error, ToolFailedError):  # the tool's ToolFailed, made its failed answer
        return {_FAILED: _message_json(error.tool_failed)}
    if isinstance(error, ModelRetry):  # raised by a hook: Pydantic AI makes it a retry outside
        return {_HOOK_RETRY: error.message}
    if isinstance(error, ToolFailed):
        return {_HOOK_FAILED: error.message}
    if isinstance(error, CallDeferred):
        return {_DEFERRED: {"metadata": error.metadata, "kind": error.kind}}
    if isinstance(error, ApprovalRequired):
        return {_APPROVAL: {"metadata": error.metadata}}
    if isinstance(error, ValidationError):
        return {_INVALID: _recorded_invalid(error)}
    if isinstance(error, SkipToolExecution):  # its result is the tool's
        return {_SKIPPED: recorded_return(error.result, tool_name=tool_name, call_id=call_id)}
    return None


def raise_recorded(recorded: dict[str, Any], *, replayed: bool) -> None:
    """Raise again the signal :func:`recorded_signal` recorded, as the run raised it live (nothing,
    for a record that is none). A retry the tool asked for, replayed, is raised as the tool raised
    it, so that Pydantic AI counts it against the tool's retries as it did live (the handler that
    counted it has not run this time)."""
    (kind, payload), *_ = recorded.items()
    if kind == _RETRY:
        part = _message_part(payload)
        said = getattr(part, "content", None)  # the retry's prompt (its part's type varies by release)
        if replayed and isinstance(said, str):
            raise ModelRetry(said)
        raise ToolRetryError(part)  # a retried ToolReturnPart, as recorded
    rebuild = _SIGNALS.get(kind)
    if rebuild is not None:
        raise rebuild(payload)


_SIGNALS: dict[str, Callable[[Any], Exception]] = {
    _FAILED: lambda payload: ToolFailedError(_message_part(payload)),
    _HOOK_RETRY: ModelRetry,
    _HOOK_FAILED: ToolFailed,
    _DEFERRED: lambda payload: CallDeferred(payload["metadata"], kind=payload["kind"]),
    _APPROVAL: lambda payload: ApprovalRequired(payload["metadata"]),
    _INVALID: lambda payload: _revalidated(payload),  # Pydantic AI makes it a retry, with these errors
    _SKIPPED: lambda payload: SkipToolExecution(returned(payload)),
}


def _message_json(part: ModelRequestPart) -> Any:
    return ModelMessagesTypeAdapter.dump_python([ModelRequest(parts=[part])], mode="json")[0]


def _message_part(recorded: Any) -> Any:
    message: ModelMessage = ModelMessagesTypeAdapter.validate_python([recorded])[0]
    return message.parts[0]


def _recorded_invalid(error: ValidationError) -> dict[str, Any]:
    """A ``ValidationError`` the tool raised, which Pydantic AI answers with a retry prompt listing
    its errors: each error's type, place, message and input (what that prompt shows), as JSON."""
    errors = [
        {
            "type": e["type"],
            "loc": list(e["loc"]),
            "msg": e["msg"],
            "input": to_jsonable_python(e["input"], fallback=repr),
        }
        for e in error.errors(include_url=False, include_context=False)
    ]
    return {"title": error.title, "errors": errors}


def _revalidated(recorded: dict[str, Any]) -> ValidationError:
    """The ``ValidationError`` :func:`_recorded_invalid` recorded, with the same errors."""
    return ValidationError.from_exception_data(
        recorded["title"],
        [
            {
                "type": PydanticCustomError(e["type"], "{message}", {"message": e["msg"]}),
                "loc": tuple(e["loc"]),
                "input": e["input"],
            }
            for e in recorded["errors"]
        ],
    )


def replayed_failure(error: ToolError) -> ToolError:
    """A tool call's recorded failure (``error``, as tether raises it on replay), raised again as a
    :class:`ToolError` named after the exception the tool raised, that is also an instance of its
    class when that class can be found again (by the module and name the traceback gives, in a
    module already imported), and whose ``str()`` and ``args`` are its message. So the code around
    the run catches it as it caught the live exception; attributes of the tool's own exception are
    not restored (the record has its type, message and traceback only)."""
    raised = raised_class(error.error_type, error.error_message, error.traceback)
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
