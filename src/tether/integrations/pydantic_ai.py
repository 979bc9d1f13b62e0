"""Pydantic AI on tether: message history in a tether session, and durable runs.
``pip install 'tether[pydantic-ai]'``

- :class:`TetherHistory` stores an agent's messages (``ModelMessage`` lists, through Pydantic AI's
  own ``ModelMessagesTypeAdapter``) in a tether session, one session message per ``ModelMessage``,
  losslessly; ``messages()`` gives them all back, ``window(max_tokens)`` what fits in the next
  request (after a summary, when compacted), and ``compact()`` folds older turns into a summary
  while the originals stay stored.
- :class:`TetherDurability` is a Pydantic AI capability that makes a run part of a tether task:
  each model request and each tool call is a recorded call, so a resumed task does not ask the
  model again for a response it has, nor run a finished tool again; tools see tether's idempotency
  key (``tether.current_call().key``). :func:`run` puts both together.

Example:
    >>> import tether
    >>> from pydantic_ai import Agent
    >>> from pydantic_ai.models.test import TestModel
    >>> from tether.integrations.pydantic_ai import run
    >>> app = tether.App("memory://")
    >>> agent = Agent(TestModel(custom_output_text="Paris."))
    >>> @app.task
    ... async def ask(ctx: tether.AsyncTaskContext, question: str) -> str:
    ...     return (await run(ctx, agent, question)).output
    >>> app.run(ask, "Capital of France?", task_id="q1").output
    'Paris.'
    >>> [m.role for m in app.session("q1").messages()]
    ['user', 'assistant']
"""

from __future__ import annotations

import contextvars
import dataclasses
import functools
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

try:
    from pydantic_ai import DeferredToolRequests, DeferredToolResults, SkipModelRequest, ToolApproved, ToolDenied
    from pydantic_ai.capabilities import AbstractCapability
    from pydantic_ai.messages import (
        ModelMessage,
        ModelMessagesTypeAdapter,
        ModelResponse,
        RetryPromptPart,
        SystemPromptPart,
        TextPart,
        ToolCallPart,
        ToolReturnPart,
        UserPromptPart,
    )

    from tether.integrations._versions import check_tested

    check_tested("pydantic-ai-slim", "tether.integrations.pydantic_ai")
except ImportError as exc:  # pragma: no cover - the extra is missing
    raise ImportError("tether.integrations.pydantic_ai needs Pydantic AI: pip install 'tether[pydantic-ai]'") from exc

from tether.conversation import EstimateCounter, Message, Session, Summarizer, Summary
from tether.errors import InvalidInputError, ToolError
from tether.integrations._pydantic_ai_calls import (
    raise_recorded,
    recorded_return,
    recorded_signal,
    replayed_failure,
    returned,
)
from tether.integrations._targets import Target, open_target

if TYPE_CHECKING:
    from pydantic_ai.agent import AbstractAgent
    from pydantic_ai.models import ModelRequestContext
    from pydantic_ai.run import AgentRunResult
    from pydantic_ai.tools import RunContext, ToolDefinition

    from tether.runtime.app import App
    from tether.runtime.context import AsyncTaskContext
    from tether.runtime.session import TaskSession

__all__ = ["TetherDurability", "TetherHistory", "run"]

_KEY = "pydantic_ai"  # the metadata field that holds a message's Pydantic AI JSON
_EVERYTHING = 2**62
_COUNTER = EstimateCounter()


# ----------------------------------------------------------------------------- history


_TEXT = "tether_text"  # in a stored message: [part, start, end] of each part whose text is cut out of it
_IN_TEXT = (UserPromptPart, SystemPromptPart, ToolReturnPart, RetryPromptPart)  # a request's parts in its text


def _joined(parts: Sequence[Any], dumped: dict[str, Any], separator: str) -> str:
    """The text of ``parts`` (a message's parts, each a str or made one), joined by ``separator``; a
    part whose content is a str is cut out of ``dumped`` (the message's JSON) and its place in the
    text noted there instead, so the text is stored once: as the session message's content."""
    pieces: list[str] = []
    cut: list[list[int]] = []
    at = 0
    for i, part in parts:
        piece = part.content if isinstance(part.content, str) else str(part.content)
        if pieces:
            at += len(separator)
        if isinstance(part.content, str) and dumped["parts"][i].get("content") == part.content:
            del dumped["parts"][i]["content"]
            cut.append([i, at, at + len(piece)])
        pieces.append(piece)
        at += len(piece)
    if cut:
        dumped[_TEXT] = cut
    return separator.join(pieces)


_CALLS = "tether_calls"  # in a stored response: [part, call] of each tool call part read from the message's tool_calls


@functools.cache
def _empty_defaults(cls: type) -> dict[str, Any]:
    """The fields of one of Pydantic AI's message dataclasses whose default is nothing (``None``, an int
    ``0``, an empty dict), by name, with that default. Left out of what is stored when they hold it,
    they come back from the default when the message is validated; a default that says something (a
    string, a flag, a discriminator such as ``part_kind``) is always stored, so a later version of
    Pydantic AI that changed it would not change what a stored message means."""
    empty: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if f.default is None or (type(f.default) is int and f.default == 0):
            empty[f.name] = f.default
        elif getattr(f.default_factory, "__origin__", f.default_factory) is dict:  # dict or dict[str, int]
            empty[f.name] = {}
    return empty


def _strip(dumped: dict[str, Any], cls: type) -> None:
    for name, default in _empty_defaults(cls).items():
        if name in dumped and type(dumped[name]) is type(default) and dumped[name] == default:
            del dumped[name]


def _dumped(message: ModelMessage) -> dict[str, Any]:
    """``message`` as JSON (Pydantic AI's own form, ``ModelMessagesTypeAdapter``), less the fields at an
    empty default (:func:`_empty_defaults`) in the message, its parts and its usage; validated back, it
    equals ``message``."""
    dumped: dict[str, Any] = ModelMessagesTypeAdapter.dump_python([message], mode="json")[0]
    _strip(dumped, type(message))
    for part, stored in zip(message.parts, dumped["parts"], strict=True):
        _strip(stored, type(part))
    usage = getattr(message, "usage", None)
    if usage is not None and isinstance(dumped.get("usage"), dict):
        _strip(dumped["usage"], type(usage))
    return dumped


def _cut_calls(message: ModelResponse, dumped: dict[str, Any], calls: list[dict[str, Any]]) -> None:
    """Cut out of ``dumped`` each tool call part's name, id and arguments that the session message's
    ``tool_calls`` hold as they are (arguments given as a dict, not as a JSON string), noting where
    they go back, so they are stored once."""
    cut: list[list[int]] = []
    k = 0
    for i, part in enumerate(message.parts):
        if not isinstance(part, ToolCallPart):
            continue
        call, stored = calls[k], dumped["parts"][i]
        if (stored.get("tool_name"), stored.get("tool_call_id"), stored.get("args")) == (
            call["name"],
            call["id"],
            call["arguments"],
        ):
            del stored["tool_name"], stored["tool_call_id"], stored["args"]
            cut.append([i, k])
        k += 1
    if cut:
        dumped[_CALLS] = cut


def _restored(stored: dict[str, Any], message: Message) -> dict[str, Any]:
    """A stored message's JSON with what :func:`_joined` and :func:`_cut_calls` cut out of it put back
    from the session message: its texts from ``content``, its tool calls from ``tool_calls`` (a copy;
    ``stored`` itself when nothing was cut)."""
    texts, calls = stored.get(_TEXT), stored.get(_CALLS)
    if not texts and not calls:
        return stored
    whole = {k: v for k, v in stored.items() if k not in (_TEXT, _CALLS)}
    parts = whole["parts"] = [dict(p) for p in stored["parts"]]
    for i, start, end in texts or ():
        parts[i]["content"] = (message.content or "")[start:end]
    for i, k in calls or ():
        call = message.tool_calls[k]
        parts[i].update(tool_name=call.name, tool_call_id=call.id, args=dict(call.arguments))
    return whole


def _to_session(message: ModelMessage) -> dict[str, Any]:
    """One ``ModelMessage`` as one session message in tether's form: its role, its text and tool calls
    (what the window and the summarizer read) and the message itself, as metadata, less the text and
    the tool calls it holds (stored once, as the content and the tool calls: :func:`_joined`,
    :func:`_cut_calls`)."""
    dumped = _dumped(message)
    if isinstance(message, ModelResponse):
        text = _joined([(i, p) for i, p in enumerate(message.parts) if isinstance(p, TextPart)], dumped, "")
        calls = [
            {"id": p.tool_call_id, "name": p.tool_name, "arguments": p.args_as_dict()}
            for p in message.parts
            if isinstance(p, ToolCallPart)
        ]
        out: dict[str, Any] = {"role": "assistant", "content": text, _KEY: dumped}
        if calls:
            _cut_calls(message, dumped, calls)
            out["tool_calls"] = calls
        return out
    answers = [p.tool_call_id for p in message.parts if isinstance(p, ToolReturnPart | RetryPromptPart) and p.tool_name]
    text = _joined([(i, p) for i, p in enumerate(message.parts) if isinstance(p, _IN_TEXT)], dumped, "\n")
    if answers:  # tool results: they stay in one turn with the call they answer
        return {"role": "tool", "content": text, "tool_call_id": answers[0], _KEY: dumped}
    if any(isinstance(p, SystemPromptPart) for p in message.parts):
        # The system prompt is sent once, in the first request; kept as a system message, the window
        # keeps it after every compaction (an agent given a history does not add its prompt again).
        return {"role": "system", "content": text, _KEY: dumped}
    return {"role": "user", "content": text, _KEY: dumped}


def _from_session(messages: Sequence[Message], summary: Summary | None = None) -> list[ModelMessage]:
    out: list[Any] = []
    for m in messages:
        stored = m.meta.get(_KEY)
        if stored is not None:
            out.append(_restored(stored, m))
        elif m.role == "assistant":  # added in another form (a person's message, say): its text
            out.append({"kind": "response", "parts": [{"part_kind": "text", "content": m.content}]})
        else:  # the summary goes to the model as a user prompt; a system message as a system prompt
            is_summary = summary is not None and m.seq == summary.seq
            kind = "system-prompt" if m.role == "system" and not is_summary else "user-prompt"
            out.append({"kind": "request", "parts": [{"part_kind": kind, "content": m.content}]})
    return ModelMessagesTypeAdapter.validate_python(out)


class TetherHistory:
    """An agent's message history in a tether session.

    ``add(result.new_messages())`` after a run, ``messages()`` (everything) or
    ``window(max_tokens)`` (what fits, after the newest summary) for the next run's
    ``message_history``. Each ``ModelMessage`` is one session message: tether sees its role, text
    and tool calls (``tether show``, windows, summaries), and it comes back equal (``==``).

    Outside a task: ``TetherHistory("chat-1", app)``. Inside one: ``TetherHistory.in_task(ctx)``,
    the task's own conversation, whose reads replay and whose appends happen once.

    Example:
        >>> import asyncio, tether
        >>> from pydantic_ai import Agent
        >>> from pydantic_ai.models.test import TestModel
        >>> app = tether.App("memory://")
        >>> agent = Agent(TestModel(custom_output_text="Paris."), system_prompt="Be brief.")
        >>> history = TetherHistory("chat-1", app)
        >>> result = asyncio.run(agent.run("Capital of France?", message_history=history.window(8_000)))
        >>> history.add(result.new_messages())
        >>> history.messages() == result.all_messages()
        True
    """

    def __init__(
        self, session_id: str, app: App | str, *, user_id: str | None = None, summarizer: Summarizer | None = None
    ) -> None:
        """``app``: a :class:`~tether.App`, or a store URL (``sqlite:///agent.db``,
        ``postgresql://…``) that opens one of this history's own, closed by :meth:`close`."""
        self._target: Target | None = open_target(app, "TetherHistory")
        self._conversation: Session | TaskSession = self._target.app.session(session_id, user_id=user_id)
        self._summarizer = summarizer

    @classmethod
    def in_task(cls, ctx: AsyncTaskContext, *, summarizer: Summarizer | None = None) -> TetherHistory:
        """The task's own conversation (``ctx.session``): recorded reads, exactly-once appends."""
        self = cls.__new__(cls)
        self._target = None
        self._conversation = ctx.session
        self._summarizer = summarizer
        return self

    def close(self) -> None:
        """Close the app this history opened from a URL (an app passed in stays open: it is yours)."""
        if self._target is not None:
            self._target.close()

    @property
    def session_id(self) -> str:
        return self._conversation.id

    def add(self, messages: Sequence[ModelMessage]) -> None:
        """Append ``messages`` atomically, in order."""
        batch = [_to_session(m) for m in messages]
        if batch:
            self._conversation.add_many(batch)

    def messages(self) -> list[ModelMessage]:
        """Every message, oldest first, as it was added (summaries never remove any)."""
        return _from_session(self._conversation.messages())

    def window(self, max_tokens: int = _EVERYTHING, *, keep_last: int = 6) -> list[ModelMessage]:
        """The next run's ``message_history``: the system prompt, the newest summary (as a user
        prompt), then the most recent turns that fit in ``max_tokens`` — never fewer than
        ``keep_last``, never a tool result without the call it answers."""
        window = self._conversation.window(max_tokens, keep_last=keep_last, counter=_COUNTER)
        return _from_session(window.messages, window.summary)

    def compact(self, *, keep_last: int = 6) -> Summary | None:
        """Fold the turns before the last ``keep_last`` into a summary; the originals stay stored."""
        return self._conversation.compact(self._summarizer, keep_last=keep_last)


# ----------------------------------------------------------------------------- durable runs


_LIVE: contextvars.ContextVar[Callable[[], Awaitable[Any]] | None] = contextvars.ContextVar(
    "tether_pydantic_ai_live", default=None
)


class _ModelRequest:
    """The recorded call that asks the model. Its arguments are the agent's name and how many
    messages the request carries (the messages themselves hold timestamps, so they are not what a
    replay compares); its result is the model's response."""

    __name__ = "pydantic_ai.model"

    async def __call__(self, agent: str | None, messages: int) -> dict[str, Any]:
        live = _LIVE.get()
        assert live is not None, "the model request runs inside TetherDurability.wrap_model_request"
        response: ModelResponse = await live()
        return _dumped(response)


class _ToolCall:
    """The recorded call that runs one tool, named after it: its validated arguments and the model's
    call id; its result, what the tool returned (as :func:`recorded_return` keeps it). What the tool,
    or a hook around it, raises to steer the run (a retry, a ``ValidationError``, that it failed, a
    deferral, a skip) is its answer too (:func:`recorded_signal`); anything else fails the call."""

    def __init__(self, name: str) -> None:
        self.__name__ = name

    async def __call__(self, args: dict[str, Any], call_id: str) -> Any:
        live = _LIVE.get()
        assert live is not None, "the tool runs inside TetherDurability.wrap_tool_execute"
        try:
            value = await live()
        except Exception as exc:
            signal = recorded_signal(exc, tool_name=self.__name__, call_id=call_id)
            if signal is None:
                raise
            return signal
        return recorded_return(value, tool_name=self.__name__, call_id=call_id)


_MODEL_REQUEST = _ModelRequest()
_TOOL_CALLS: dict[str, _ToolCall] = {}  # one per tool name: tether keeps one spec per callable


def _tool_call(name: str) -> _ToolCall:
    known = _TOOL_CALLS.get(name)
    if known is None:
        known = _TOOL_CALLS[name] = _ToolCall(name)
    return known


@dataclass
class TetherDurability(AbstractCapability[Any]):
    """A capability that makes an agent run part of a tether task: each model request and each tool
    call is a recorded call (``pydantic_ai.model``, and each tool under its own name).

    Pass it to a run inside a task: ``agent.run(prompt, capabilities=[TetherDurability(ctx)])``
    (or use :func:`run`). On resume, the run starts again from its message history and every
    request the model answered returns its recorded response, every tool that finished its recorded
    result; a tool that was running when the process died runs again under the same key
    (``tether.current_call().key``).

    A tool's result is recorded as Pydantic AI keeps it in a message history, and given back from
    there live and replayed alike, so the model is sent the same parts either way (a ``ToolReturn``
    stays one, files stay files; a value of a class of your own comes back as its JSON form). An
    exception a tool or the model raises leaves the run as itself, as in a plain run; replayed from
    the record, it is a ``tether.ToolError`` that is also of the exception's class, with its message.
    """

    ctx: AsyncTaskContext

    @classmethod
    def get_serialization_name(cls) -> str | None:
        return None  # bound to a task's context: not part of an agent spec

    async def wrap_model_request(
        self,
        ctx: RunContext[Any],
        *,
        request_context: ModelRequestContext,
        handler: Callable[[ModelRequestContext], Awaitable[ModelResponse]],
    ) -> ModelResponse:
        ran: list[bool] = []

        async def live() -> ModelResponse:
            ran.append(True)
            try:
                response = await handler(request_context)
            except SkipModelRequest as exc:
                return exc.response  # a hook answered in the model's place: its answer is the request's
            # Pydantic AI stamps the response with the id of the model that served it once this hook
            # returns, from the attempt the handler made; a replay makes none, so the record keeps it.
            if response.model_id is None:
                response.model_id = request_context.model_id or request_context.model.model_id
            return response

        token = _LIVE.set(live)
        failure: BaseException | None = None
        try:
            agent = getattr(ctx, "agent", None)
            recorded = await self.ctx.call(
                _MODEL_REQUEST, agent=getattr(agent, "name", None), messages=len(request_context.messages)
            )
        except ToolError as error:
            failure = _raised(error, replayed=not ran)
        finally:
            _LIVE.reset(token)
        if failure is not None:
            raise failure  # here, not in the handler: the exception keeps the context it had
        response = ModelMessagesTypeAdapter.validate_python([recorded])[0]
        assert isinstance(response, ModelResponse)
        return response

    async def wrap_tool_execute(
        self,
        ctx: RunContext[Any],
        *,
        call: ToolCallPart,
        tool_def: ToolDefinition,
        args: dict[str, Any],
        handler: Callable[[dict[str, Any]], Awaitable[Any]],
    ) -> Any:
        ran: list[bool] = []

        def live() -> Awaitable[Any]:
            ran.append(True)
            return handler(args)

        token = _LIVE.set(live)
        failure: BaseException | None = None
        try:
            result = await self.ctx.call(_tool_call(call.tool_name), args=args, call_id=call.tool_call_id)
        except ToolError as error:
            failure = _raised(error, replayed=not ran)
        finally:
            _LIVE.reset(token)
        if failure is not None:
            raise failure  # here, not in the handler: the tool's exception keeps the context it had
        if isinstance(result, dict) and len(result) == 1:
            raise_recorded(result, replayed=not ran)
        if not ran:  # Pydantic AI counts a call the tool answered in the handler, which a replay skips
            ctx.usage.tool_calls += 1
        return returned(result)


def _raised(error: ToolError, *, replayed: bool) -> BaseException:
    """What the run raises for a model request or tool call that failed: live, what the model or
    tool raised (a plain run raises it, and code catches it by its type); replayed, the recorded
    failure as :func:`replayed_failure` makes it (a ``ToolError`` that is also of that class)."""
    if not replayed and error.__cause__ is not None:
        return error.__cause__
    return replayed_failure(error)


async def run(
    ctx: AsyncTaskContext,
    agent: AbstractAgent[Any, Any],
    prompt: str,
    *,
    max_tokens: int = _EVERYTHING,
    keep_last: int = 6,
    **options: Any,
) -> AgentRunResult[Any]:
    """Run ``agent`` on ``prompt`` as part of task ``ctx``, durably, in the task's conversation.

    The history comes from the task's session (``ctx.session``; its window of ``max_tokens``), the
    run's new messages go back to it exactly once, and every model request and tool call is a
    recorded call (:class:`TetherDurability`). ``options`` go to ``agent.run`` (``deps=``,
    ``output_type=``...).

    A tool that needs approval (``requires_approval=True``, with ``DeferredToolRequests`` among the
    output types) makes the run wait for the input ``approve:{tool_call_id}`` (``True``, ``False``
    or ``{"approved": False, "message": "why"}``): the task suspends, no process waits, and the run
    goes on with the answers when they arrive. Other deferred calls are returned as Pydantic AI
    returns them.
    """
    if "message_history" in options or "deferred_tool_results" in options:
        raise InvalidInputError("run() takes its message_history from the task's session and answers approvals itself")
    history = TetherHistory.in_task(ctx)
    options["capabilities"] = [*options.pop("capabilities", ()), TetherDurability(ctx)]
    window = history.window(max_tokens, keep_last=keep_last)
    result = await agent.run(prompt, message_history=window, **options)
    history.add(result.new_messages())
    while isinstance(result.output, DeferredToolRequests) and result.output.approvals and not result.output.calls:
        answers = await _approvals(ctx, result.output)
        window = history.window(max_tokens, keep_last=keep_last)
        result = await agent.run(message_history=window, deferred_tool_results=answers, **options)
        history.add(result.new_messages())
    return result


async def _approvals(ctx: AsyncTaskContext, requests: DeferredToolRequests) -> DeferredToolResults:
    """A person's answer to each tool call waiting for approval, as tether inputs (``approve:{call_id}``)."""
    answers: dict[str, bool | ToolApproved | ToolDenied] = {}
    for call in requests.approvals:
        answer = await ctx.wait_for_input(
            f"approve:{call.tool_call_id}",
            prompt=f"Allow {call.tool_name}({call.args_as_json_str()})? "
            "Send true, false, or {'approved': bool, 'message': str}",
        )
        if isinstance(answer, dict):
            approved, message = bool(answer.get("approved")), answer.get("message")
        elif isinstance(answer, bool):
            approved, message = answer, None
        else:
            expected = "true, false or {'approved': bool, 'message': str}"
            raise InvalidInputError(f"an approval is {expected}, got {answer!r}")
        denied = ToolDenied(message or "The tool call was denied.")
        answers[call.tool_call_id] = True if approved else denied
    return DeferredToolResults(approvals=answers)
