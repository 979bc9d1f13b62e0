"""Function tools as recorded calls of a task (see :mod:`tether.integrations.openai_agents`).

A replayed tool's outcome reaches the SDK as the live run's did, and the live run's as a plain
``Runner.run``'s does: the model is sent the same ``function_call_output``, and the code (the run's
items, hooks, ``final_output``) reads the same outcome.

- **What a tool returns.** The SDK makes the model's input of a tool's value itself: ``str()`` of
  most values, a JSON dump for a tool with an output schema or a call from a hosted program, input
  parts for ``ToolOutputText``/``Image``/``FileContent``. The record keeps the value so that the SDK,
  given it back, makes the same input: as its JSON form when that is the value (a string, a number,
  a dict of them...); else as its JSON form and its class, read back by a pydantic ``TypeAdapter``
  (a pydantic model, a dataclass, a datetime, a tuple...), with the text the model was sent; else
  as that text alone. Live and replayed, the SDK gets the value as the record gives it back.
- **What a tool raises.** The exception reaches the SDK itself, not tether's ``ToolError`` around
  it, so a run raises what a plain run raises. Replayed, it is made again from the record: its
  class (named by the recorded traceback, in a module this process has imported) and its message;
  ``ToolError`` when it cannot be. An error the SDK's default failure function answered is the
  tool's answer (a string, recorded); replayed, the SDK is told again that it answered it, as it
  checks before holding the answer to the tool's output schema.
- **How a tool is invoked.** Inside the recorded call, by the SDK's own invocation, as a plain run
  invokes it: the context its invoker declares (a ``RunContextWrapper`` or the ``ToolContext``),
  and its timeout, so a timeout is an outcome the call records (the SDK's answer to the model, or
  its ``ToolTimeoutError``) and a replay gives it back instead of running the tool again.
- **What stops the run.** tether's own errors in a tool's call (its record refused: a lost lease,
  the store down, a cancel that took the task; a divergence from the record) are not the tool's
  outcome: they reach the code that started the run (:func:`through`) past the SDK's failure
  function and its ``UserError``, carried by :class:`RunStopped`, and the run stops as any task's
  run stops on them.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import functools
import weakref
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar, cast

try:
    from agents import FunctionTool
    from agents.items import ItemHelpers
    from agents.tool import (  # the SDK's own invocation of a tool, as its runner makes it
        _FailureHandlingFunctionToolInvoker,
        _invoke_function_tool_with_metadata,
    )
except ImportError as exc:  # pragma: no cover - the extra is missing
    raise ImportError(
        "tether.integrations.openai_agents needs the OpenAI Agents SDK: pip install 'tether[openai-agents]'"
    ) from exc

from pydantic import TypeAdapter

from tether.canonical import as_json
from tether.errors import InvalidInputError, TetherError, ToolError
from tether.integrations._recorded_errors import find, raised_class

if TYPE_CHECKING:
    from agents.result import RunResultStreaming
    from agents.stream_events import StreamEvent
    from agents.tool_context import ToolContext

    from tether.runtime.context import AsyncTaskContext

__all__ = [
    "RunStopped",
    "carrying",
    "held",
    "is_durable_copy",
    "live_tool",
    "recorded_tool",
    "through",
    "through_stream",
]

T = TypeVar("T")

_OUTCOME = "__tether_tool_output__"  # the key of a record that is not the tool's value as it is
# The SDK's own marks, read by name: none has a public accessor (openai-agents 0.24).
_SDK_ANSWERED = "_function_tool_default_failure_handled"  # set on the ToolContext by the default failure function
_OUTPUT_ADAPTER = "_output_type_adapter"  # a FunctionTool's output_type, validated and dumped by the SDK
_WRAPPED = "__agents_function_tool_wrapped_callable__"  # what FunctionTool.__wrapped__ reads on the invoker
_PREPARE = "__agents_prepare_arguments__"  # how the invoker validates arguments for an approval policy
_UNKNOWN = object()  # the SDK makes no model input of a value (it will raise when it tries)
_JSON_TYPES = (str, int, float, bool, type(None), dict, list)

_INVOCATION: contextvars.ContextVar[tuple[FunctionTool, ToolContext[Any]] | None] = contextvars.ContextVar(
    "tether_agents_tool_invocation", default=None
)
_IN_TOOL: contextvars.ContextVar[bool] = contextvars.ContextVar("tether_agents_in_live_tool", default=False)
"""Whether the code runs inside a tool that runs live (an agent made durable, used as a tool)."""


# ----------------------------------------------------------------------------- durable copies


def held(ctx: AsyncTaskContext) -> Callable[[], AsyncTaskContext]:
    """``ctx``, held weakly, as a durable copy (a tool, a model) holds the task it records into.

    The SDK keeps what it is given past the run (a result's ``last_agent``, a model's record of the
    calls it answered, with their tools), and a task's context keeps the run's record and
    conversation: held strongly, each finished run's would stay in memory as long as those do. A
    copy used once its run has ended raises."""
    ref = weakref.ref(ctx)
    task_id = ctx.task_id

    def task() -> AsyncTaskContext:
        found = ref()
        if found is None:
            raise TetherError(
                f"a durable agent of task {task_id!r} was used after that task's run ended; "
                "make one inside the run that uses it (durable_agent(ctx, agent), run(ctx, agent, ...))"
            )
        return found

    return task


def recorded_tool(ctx: AsyncTaskContext, tool: FunctionTool) -> FunctionTool:
    """A copy of ``tool`` whose invocation is a recorded call of the task."""
    task = held(ctx)

    async def invoke(tool_context: ToolContext[Any], arguments: str) -> Any:
        return await _call_tool(task, tool, tool_context, arguments)

    return _copy_invoking(tool, invoke)


def live_tool(tool: FunctionTool) -> FunctionTool:
    """A copy of ``tool`` (an agent made durable, used as a tool: its own turns and tools are the
    task's recorded calls) that runs live, with tether's errors in its calls carried past the SDK's
    failure function (see :func:`carrying`)."""

    async def invoke(tool_context: ToolContext[Any], arguments: str) -> Any:
        token = _IN_TOOL.set(True)
        try:
            invoked = await _invoke_function_tool_with_metadata(
                function_tool=tool, context=tool_context, arguments=arguments
            )
        finally:
            _IN_TOOL.reset(token)
        if invoked.is_sdk_generated_error:
            setattr(tool_context, _SDK_ANSWERED, True)  # for the SDK's invocation of the copy to read
        return invoked.output

    return _copy_invoking(tool, invoke)


def is_durable_copy(tool: FunctionTool) -> bool:
    """Whether ``tool`` is a copy :func:`recorded_tool` or :func:`live_tool` made."""
    return isinstance(tool.on_invoke_tool, _DurableInvoker)


def _copy_invoking(tool: FunctionTool, invoke: Callable[[ToolContext[Any], str], Awaitable[Any]]) -> FunctionTool:
    """A copy of ``tool`` that runs ``invoke``, which invokes ``tool`` itself, as the SDK does
    (timeout included: the copy has none of its own, so the SDK does not cancel ``invoke``)."""
    with contextlib.suppress(AttributeError):  # a tool made from no function has none
        setattr(invoke, _WRAPPED, tool.__wrapped__)
    if isinstance(tool.on_invoke_tool, _FailureHandlingFunctionToolInvoker):
        setattr(invoke, _PREPARE, tool.on_invoke_tool.prepare_arguments)
    return dataclasses.replace(tool, on_invoke_tool=_DurableInvoker(invoke), timeout_seconds=None)


class _DurableInvoker(_FailureHandlingFunctionToolInvoker):
    """A durable copy's invoker: of the class the SDK checks for (a private one, openai-agents 0.24:
    its ``FunctionTool.__wrapped__`` reads the function the tool was made from through it, and its
    approvals the arguments validation gives a ``needs_approval`` policy, and only through it), so
    the copy answers as the tool does; without a failure
    function of its own: the tool's own answered what the tool raised, inside the call, and what
    the SDK raises around the tool (its ``ToolTimeoutError``) reaches the run as it does the tool's."""

    def __init__(self, invoke: Callable[[ToolContext[Any], str], Awaitable[Any]]) -> None:
        super().__init__(invoke, _never_answered)

    def __agents_bind_function_tool__(self, function_tool: FunctionTool) -> _DurableInvoker:
        return self  # no failure function to find on the tool

    async def __call__(self, ctx: ToolContext[Any], input: str) -> Any:
        return await self._invoke_tool_impl(ctx, input)


def _never_answered(tool: FunctionTool, error: Exception, arguments: str, context: ToolContext[Any]) -> None:
    """(A durable invoker answers no error: see :class:`_DurableInvoker`.)"""


# ----------------------------------------------------------------------------- the recorded call


class _ToolCall:
    """The recorded call that runs one function tool: its arguments (the model's JSON) and the
    model's call id are recorded; the tool and the SDK's tool context travel beside the call. Its
    result is the record of what the tool returned (see :func:`_record_of`)."""

    def __init__(self, tool: FunctionTool) -> None:
        self.__name__ = tool.name

    async def __call__(self, arguments: str, call_id: str) -> Any:
        invocation = _INVOCATION.get()
        assert invocation is not None, "a durable tool runs inside its SDK invocation"
        tool, tool_context = invocation
        # The SDK's invocation, as a plain run's: the context the invoker declares, the tool's
        # timeout (its answer is this call's outcome), and whether the answer is the SDK's own.
        invoked = await _invoke_function_tool_with_metadata(
            function_tool=tool, context=tool_context, arguments=arguments
        )
        return _record_of(tool, tool_context, invoked.output, sdk_answered=invoked.is_sdk_generated_error)


_TOOL_CALLS: dict[int, tuple[Callable[..., Any], _ToolCall]] = {}


def _tool_call(tool: FunctionTool) -> _ToolCall:
    """One recorded callable per tool function (tether keeps one spec per callable)."""
    key = id(tool.on_invoke_tool)
    known = _TOOL_CALLS.get(key)
    if known is None or known[0] is not tool.on_invoke_tool or known[1].__name__ != tool.name:
        known = _TOOL_CALLS[key] = (tool.on_invoke_tool, _ToolCall(tool))
    return known[1]


async def _call_tool(
    task: Callable[[], AsyncTaskContext], tool: FunctionTool, tool_context: ToolContext[Any], arguments: str
) -> Any:
    """Run ``tool`` as a recorded call of the task (its record, once it has one): what the SDK gets
    of its value, live and replayed alike; what it raised, raised again; tether's errors, carried."""
    token = _INVOCATION.set((tool, tool_context))
    raised: BaseException | None
    try:
        recorded = await task().call(_tool_call(tool), arguments=arguments, call_id=tool_context.tool_call_id)
    except ToolError as error:
        raised = _raised_by_tool(error)
        if raised is None:
            raise
    except TetherError as error:
        raised = RunStopped(error)  # not the tool's outcome: the run's record was refused or diverged
    else:
        return _output_of(recorded, tool, tool_context)
    finally:
        _INVOCATION.reset(token)
    # Outside the handler, so the exception keeps the context it was raised in (tether's ToolError,
    # which wraps it, is not made its context: the chain a plain run shows).
    raise raised


# ----------------------------------------------------------------------------- what stops the run


class RunStopped(BaseException):
    """Carries tether's ``error`` from a tool's call out of the SDK's run, to :func:`through`.

    A ``BaseException``: the SDK's failure function (and its ``UserError``, around what a tool
    raises) only takes an ``Exception``, so the error is never answered to the model as the tool's
    failure, and reaches the code as itself."""

    def __init__(self, error: TetherError) -> None:
        super().__init__(f"tether stopped the run: {type(error).__name__}: {error}")
        self.error = error


@contextlib.contextmanager
def carrying() -> Iterator[None]:
    """Around a durable model's call: tether's error in it, inside a tool that runs live, is raised
    as :class:`RunStopped` (the tool's failure function would answer the error itself); elsewhere,
    as it is. A ``ToolError`` (the model's own failure, recorded) is the model's outcome, as it is."""
    try:
        yield
    except TetherError as error:
        if _IN_TOOL.get() and not isinstance(error, ToolError):
            raise RunStopped(error) from None
        raise


async def through(run: Awaitable[T]) -> T:
    """Await ``run`` (a run of the SDK); tether's error where one of its tools' calls stopped it."""
    try:
        return await run
    except RunStopped as stop:
        error = stop.error
    raise error  # outside the handler: the error's own context, not the carrier


def through_stream(result: RunResultStreaming) -> RunResultStreaming:
    """``result``, whose ``stream_events()`` raises tether's error where one of its tools' calls
    stopped the run (see :func:`through`)."""
    stream = result.stream_events

    async def stream_events() -> AsyncIterator[StreamEvent]:
        try:
            async with contextlib.aclosing(cast("AsyncGenerator[StreamEvent, None]", stream())) as events:
                async for event in events:
                    yield event
            return
        except RunStopped as stop:
            error = stop.error
        raise error

    result.stream_events = stream_events  # type: ignore[method-assign]
    return result


# ----------------------------------------------------------------------------- what a tool returns


def _record_of(tool: FunctionTool, tool_context: ToolContext[Any], value: Any, *, sdk_answered: bool) -> Any:
    """What the record keeps of ``value``, which the tool returned (or the SDK answered for it: its
    default failure function, its timeout message): the first form, closest to the value first,
    that the SDK turns into the model input ``value`` makes."""
    if sdk_answered:
        return {_OUTCOME: {"value": value, "sdk_answered": True}}
    sent = _model_input(tool, tool_context, value)
    if sent is _UNKNOWN:
        return value  # the SDK will refuse the value itself, live
    for record, same_type in _candidates(value, sent):
        back = _output_of(record, tool, tool_context)
        if (not same_type or type(back) is type(value)) and _model_input(tool, tool_context, back) == sent:
            return record
    return value


def _candidates(value: Any, sent: Any) -> Iterator[tuple[Any, bool]]:
    """Records of ``value`` to try, each with whether it must read back as the value's own type."""
    plain = _plain(value)
    if plain is not _UNKNOWN:
        yield plain, True
    typed = _typed(value, sent)
    if typed is not None:
        yield typed, True
    if plain is not _UNKNOWN:
        yield plain, False  # the model is sent the same, the code reads the JSON form
    if isinstance(sent, str):
        yield {_OUTCOME: {"text": sent}}, False


def _plain(value: Any) -> Any:
    """``value``'s JSON form as a record, or ``_UNKNOWN`` when it has none tether can store."""
    try:
        plain = as_json(value)
    except InvalidInputError:
        return _UNKNOWN
    if isinstance(plain, dict) and _OUTCOME in plain:  # a value that looks like a record of ours
        return {_OUTCOME: {"value": plain}}
    return plain


def _typed(value: Any, sent: Any) -> dict[str, Any] | None:
    """``value``'s JSON form with the class that reads it back, and the text the model was sent
    (the answer, replayed, if the class is gone or reads it back differently)."""
    cls = type(value)
    name = _class_name(cls)
    if name is None or cls in _JSON_TYPES:
        return None
    try:
        dumped = as_json(_adapter(cls).dump_python(value, mode="json", by_alias=True))
    except Exception:  # no schema for the class, or a dump tether cannot store
        return None
    outcome: dict[str, Any] = {"value": dumped, "type": name}
    if isinstance(sent, str):
        outcome["text"] = sent
    return {_OUTCOME: outcome}


def _output_of(recorded: Any, tool: FunctionTool, tool_context: ToolContext[Any]) -> Any:
    """What the SDK gets of a record: the value it keeps (as recorded before these records, too)."""
    outcome = recorded.get(_OUTCOME) if isinstance(recorded, dict) and len(recorded) == 1 else None
    if not isinstance(outcome, dict):
        return recorded
    if outcome.get("sdk_answered"):
        setattr(tool_context, _SDK_ANSWERED, True)  # as the default failure function left it, live
    if "type" in outcome:
        back = _read_back(outcome["type"], outcome["value"])
        if back is not _UNKNOWN and (
            "text" not in outcome or _model_input(tool, tool_context, back) == outcome["text"]
        ):
            return back
    if "text" in outcome:
        return outcome["text"]
    return outcome["value"]


def _read_back(name: str, value: Any) -> Any:
    """``value`` read back by the class ``name`` names; ``_UNKNOWN`` if it is gone or refuses it."""
    cls = find(*name.split(":", 1))
    if not isinstance(cls, type):
        return _UNKNOWN
    try:
        return _adapter(cls).validate_python(value)
    except Exception:  # the class changed since the value was recorded
        return _UNKNOWN


def _model_input(tool: FunctionTool, tool_context: ToolContext[Any], value: Any) -> Any:
    """The ``output`` of the ``function_call_output`` item the SDK sends the model when ``tool``
    returns ``value`` (made as the SDK makes it after a tool ran); ``_UNKNOWN`` if it makes none."""
    call = tool_context.tool_call
    if call is None:
        return _UNKNOWN
    try:
        item = ItemHelpers.tool_call_output_item(
            call,
            value,
            output_json_schema=tool.output_json_schema,
            output_type_adapter=getattr(tool, _OUTPUT_ADAPTER, None),
        )
    except Exception:
        return _UNKNOWN
    return item["output"]


_ADAPTERS: dict[type, TypeAdapter[Any]] = {}


def _adapter(cls: type) -> TypeAdapter[Any]:
    """The ``TypeAdapter`` of a class, made once (building one is far dearer than using it)."""
    adapter = _ADAPTERS.get(cls)
    if adapter is None:
        adapter = _ADAPTERS[cls] = TypeAdapter(cls)
    return adapter


# ----------------------------------------------------------------------------- what a tool raises


def _raised_by_tool(error: ToolError) -> BaseException | None:
    """The exception the tool raised: itself, live (tether raised its ToolError from it); made
    again from the record, replayed; ``None`` when it cannot be made again."""
    if error.__cause__ is not None:
        return error.__cause__
    cls = raised_class(error.error_type, error.error_message, error.traceback)
    if cls is None or not issubclass(cls, Exception):
        return None
    makers: tuple[Callable[[str], Exception], ...] = (cls, functools.partial(_without_init, cls))
    for make in makers:
        try:
            again = make(error.error_message)
            if type(again) is cls and str(again) == error.error_message:
                return again
        except Exception:  # a constructor that wants other arguments, a __str__ that wants attributes
            continue
    return None


def _without_init(cls: type[Exception], message: str) -> Exception:
    made = cls.__new__(cls)
    made.args = (message,)
    return made


# ----------------------------------------------------------------------------- classes by name


def _class_name(cls: type) -> str | None:
    """``module:qualname`` of a class that can be found again by it, else ``None``."""
    name = f"{cls.__module__}:{cls.__qualname__}"
    return name if find(cls.__module__, cls.__qualname__) is cls else None
