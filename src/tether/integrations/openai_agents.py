"""The OpenAI Agents SDK on tether: a ``Session`` that keeps the conversation in tether, and
durable runs. ``pip install 'tether[openai-agents]'``

- :class:`TetherSession` implements the SDK's ``Session`` protocol (and its compaction-aware
  extension, ``run_compaction``) on a tether session: items are stored verbatim (OpenAI Responses
  items), appends are atomic, a pop removes one item once however many processes pop at once;
  the conversation is a tether session (``app.session(id).messages()``).
- :func:`run` (and :func:`run_streamed`) runs ``Runner.run`` inside a tether task, so ``tether
  tasks/show/history`` show the run: every model response and every function
  tool's result is a recorded call of the task, so a process killed mid-run resumes without asking
  the model again for a turn it answered and without running a finished tool again; tools see
  tether's idempotency key (``tether.current_call().key``); a tool that needs approval waits for
  it as a tether input (``app.send_input``), with no process kept alive.

Example:
    >>> import tether
    >>> from agents import Agent
    >>> from agents.testing import ScriptedModel, assistant_message
    >>> from tether.integrations.openai_agents import TetherSession, run
    >>> app = tether.App("memory://")
    >>> agent = Agent(name="Echo", model=ScriptedModel([[assistant_message("Hello!")]]))
    >>> @app.task
    ... async def chat(ctx: tether.AsyncTaskContext, question: str) -> str:
    ...     result = await run(ctx, agent, question, session=TetherSession.in_task(ctx))
    ...     return str(result.final_output)
    >>> app.run(chat, "Hi", task_id="chat-1").output
    'Hello!'
    >>> [m.role for m in app.session("chat-1").messages()]
    ['user', 'assistant']
"""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import hashlib
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

import orjson

try:
    from agents import Agent, FunctionTool, Handoff, RunContextWrapper, Runner
    from agents.exceptions import ModelBehaviorError
    from agents.items import ModelResponse, ToolApprovalItem
    from agents.models.interface import Model, ModelProvider
    from agents.models.multi_provider import MultiProvider
    from agents.run_config import RunConfig
    from openai.types.responses import Response, ResponseCompletedEvent, ResponseOutputItemDoneEvent

    from tether.integrations._versions import check_tested

    check_tested("openai-agents", "tether.integrations.openai_agents")
except ImportError as exc:  # pragma: no cover - the extra is missing
    raise ImportError(
        "tether.integrations.openai_agents needs the OpenAI Agents SDK: pip install 'tether[openai-agents]'"
    ) from exc

from pydantic import TypeAdapter

from tether.errors import InvalidInputError

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from agents.agent_output import AgentOutputSchemaBase
    from agents.handoffs import Handoff
    from agents.items import TResponseInputItem, TResponseStreamEvent
    from agents.model_settings import ModelSettings
    from agents.models.interface import ModelTracing
    from agents.result import RunResult, RunResultStreaming
    from agents.run_state import RunState
    from agents.tool import Tool
    from openai.types.responses.response_prompt_param import ResponsePromptParam

    from tether.runtime.context import AsyncTaskContext

from tether.integrations._openai_session import TetherSession
from tether.integrations._openai_tools import (
    carrying,
    held,
    is_durable_copy,
    live_tool,
    recorded_tool,
    through,
    through_stream,
)

__all__ = ["DurableModel", "TetherSession", "approval_key", "approvals", "durable_agent", "run", "run_streamed"]

_RESPONSE = TypeAdapter(ModelResponse)
# How a response is recorded: only the fields the model set, under the names the API uses, so the
# response read back sets the same fields. The SDK sends a turn's items back to the model with the
# fields they set (``model_dump(exclude_unset=True)``): a record of every field would add the ones
# the model left out (``'caller': None``...) to every later turn's input.
_AS_SENT: dict[str, Any] = {"mode": "json", "exclude_unset": True, "by_alias": True}


# ----------------------------------------------------------------------------- durable runs


_PENDING_REQUEST: contextvars.ContextVar[Callable[[], Any] | None] = contextvars.ContextVar(
    "tether_agents_model_request", default=None
)


class _ModelCall:
    """The recorded call that asks the model: its arguments are the agent's name and a digest of the
    request (so storage grows with the answers, not with the whole input again at every turn); the
    request itself travels beside the call, and only a live call sends it."""

    __name__ = "openai_agents.model"

    async def __call__(self, agent: str, request: str, items: int) -> dict[str, Any]:
        send = _PENDING_REQUEST.get()
        assert send is not None, "the model call runs inside DurableModel.get_response"
        response: ModelResponse = await send()
        return _RESPONSE.dump_python(response, **_AS_SENT)  # type: ignore[no-any-return]


_MODEL_CALL = _ModelCall()


class _ModelStreamCall:
    """The recorded call that streams the model's answer: like ``_ModelCall``, with the final
    ``Response`` (as the stream's ``response.completed`` event carried it) as its result."""

    __name__ = "openai_agents.model_stream"

    async def __call__(self, agent: str, request: str, items: int) -> dict[str, Any]:
        send = _PENDING_REQUEST.get()
        assert send is not None, "the model call runs inside DurableModel.stream_response"
        result: dict[str, Any] = await send()
        return result


_MODEL_STREAM = _ModelStreamCall()


def _request(
    system_instructions: str | None,
    input: str | list[TResponseInputItem],
    model_settings: ModelSettings,
    tools: list[Tool],
    output_schema: AgentOutputSchemaBase | None,
    handoffs: list[Handoff],
    previous_response_id: str | None,
    conversation_id: str | None,
    prompt: ResponsePromptParam | None,
) -> dict[str, Any]:
    """What a model request asks: its digest is the recorded call's argument."""
    return {
        "system_instructions": system_instructions,
        "input": input,
        "model_settings": model_settings.to_json_dict(),
        "tools": sorted(getattr(t, "name", type(t).__name__) for t in tools),
        "output_schema": output_schema.name() if output_schema is not None else None,
        "handoffs": sorted(h.tool_name for h in handoffs),
        "previous_response_id": previous_response_id,
        "conversation_id": conversation_id,
        "prompt": prompt,
    }


class DurableModel(Model):
    """A ``Model`` whose responses are recorded calls of a tether task: on resume, a turn the model
    already answered returns its recorded response, and the model is not asked (or billed) again.

    ``inner`` is the model that answers (or a function that makes it, called at the first live
    request, so a replay never builds a client). Made by :func:`durable_agent` and :func:`run`.
    It holds its task weakly (see ``held``): used once the task's run has ended, it raises.
    """

    def __init__(self, ctx: AsyncTaskContext, inner: Model | Callable[[], Model], *, agent_name: str) -> None:
        self._task = held(ctx)
        self._inner = inner
        self._agent_name = agent_name

    @property
    def inner(self) -> Model | Callable[[], Model]:
        """What this model wraps, as it was given: the model that answers, or the function that makes
        it (not called here: unwrapping builds no client)."""
        return self._inner

    def _model(self) -> Model:
        if not isinstance(self._inner, Model):
            self._inner = self._inner()
        return self._inner

    def _call(self, fn: Callable[..., Any], request: dict[str, Any], input: str | list[Any]) -> Awaitable[Any]:
        """The recorded call of ``fn`` that answers ``request``, issued in the task (now)."""
        return self._task().call(fn, agent=self._agent_name, request=_digest(request), items=_count(input))

    async def get_response(
        self,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],
        model_settings: ModelSettings,
        tools: list[Tool],
        output_schema: AgentOutputSchemaBase | None,
        handoffs: list[Handoff],
        tracing: ModelTracing,
        *,
        previous_response_id: str | None,
        conversation_id: str | None,
        prompt: ResponsePromptParam | None,
    ) -> ModelResponse:
        request = _request(system_instructions, input, model_settings, tools, output_schema, handoffs,
                           previous_response_id, conversation_id, prompt)

        async def send() -> ModelResponse:
            return await self._model().get_response(
                system_instructions,
                input,
                model_settings,
                tools,
                output_schema,
                handoffs,
                tracing,
                previous_response_id=previous_response_id,
                conversation_id=conversation_id,
                prompt=prompt,
            )

        token = _PENDING_REQUEST.set(send)
        try:
            with carrying():  # inside an agent used as a tool, past the tool's failure function
                recorded = await self._call(_MODEL_CALL, request, input)
        finally:
            _PENDING_REQUEST.reset(token)
        return _RESPONSE.validate_python(recorded)

    async def stream_response(
        self,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],
        model_settings: ModelSettings,
        tools: list[Tool],
        output_schema: AgentOutputSchemaBase | None,
        handoffs: list[Handoff],
        tracing: ModelTracing,
        *,
        previous_response_id: str | None,
        conversation_id: str | None,
        prompt: ResponsePromptParam | None,
    ) -> AsyncIterator[TResponseStreamEvent]:
        """Stream a response as a recorded call (``openai_agents.model_stream``).

        Live, the model's events pass through as they come and the call records the final response;
        the ``response.completed`` event is made from that record, live and on replay alike. A turn
        with a record is answered by that one event (its deltas are not streamed again)."""
        request = _request(system_instructions, input, model_settings, tools, output_schema, handoffs,
                           previous_response_id, conversation_id, prompt)
        events: asyncio.Queue[TResponseStreamEvent] = asyncio.Queue()

        async def send() -> dict[str, Any]:
            stream = self._model().stream_response(
                system_instructions,
                input,
                model_settings,
                tools,
                output_schema,
                handoffs,
                tracing,
                previous_response_id=previous_response_id,
                conversation_id=conversation_id,
                prompt=prompt,
            )
            return await _relay(stream, events)

        token = _PENDING_REQUEST.set(send)
        try:  # issued here, so the call keeps its place in the task's order
            with carrying():
                call = asyncio.ensure_future(self._call(_MODEL_STREAM, request, input))
        finally:
            _PENDING_REQUEST.reset(token)
        try:
            with carrying():
                while (event := await _next_event(events, call)) is not None:
                    if not isinstance(event, ResponseCompletedEvent):
                        yield event
                recorded = call.result()
        finally:
            if not call.done():
                call.cancel()
        # The final response comes from the record, live and on replay alike, so the next turn's
        # input is the same both ways (and so is its digest).
        yield ResponseCompletedEvent(
            type="response.completed", response=Response.model_validate(recorded), sequence_number=0
        )

    async def close(self) -> None:
        if isinstance(self._inner, Model):
            await self._inner.close()


async def _relay(
    stream: AsyncIterator[TResponseStreamEvent], events: asyncio.Queue[TResponseStreamEvent]
) -> dict[str, Any]:
    """Pass the model's live events on as they come; the final response, as the call records it."""
    final: Response | None = None
    items: list[Any] = []
    async for event in stream:
        events.put_nowait(event)
        if isinstance(event, ResponseCompletedEvent):
            final = event.response
        elif isinstance(event, ResponseOutputItemDoneEvent):
            items.append(event.item)
    if final is None:
        raise ModelBehaviorError("the model's stream ended without a response.completed event")
    dumped: dict[str, Any] = final.model_dump(**_AS_SENT)
    if not dumped.get("output"):  # some backends only send the items as they finish
        dumped["output"] = [item.model_dump(**_AS_SENT) for item in items]
    return dumped


async def _next_event(
    events: asyncio.Queue[TResponseStreamEvent], call: asyncio.Future[Any]
) -> TResponseStreamEvent | None:
    """The next event the relay passed on, or ``None`` once the call is done and none is left."""
    while events.empty():
        if call.done():
            return None
        waiting = asyncio.ensure_future(events.get())
        await asyncio.wait({waiting, call}, return_when=asyncio.FIRST_COMPLETED)
        if waiting.done():
            return waiting.result()
        waiting.cancel()
    return events.get_nowait()


def _durable_tool(ctx: AsyncTaskContext, tool: Tool) -> Tool:
    if not isinstance(tool, FunctionTool):
        return tool  # hosted tools run at the provider: their results come back in the recorded response
    if is_durable_copy(tool):
        return tool  # (of an agent made durable again, by run() of a durable agent or a handoff to one)
    inner = getattr(tool, "_agent_instance", None) if getattr(tool, "_is_agent_tool", False) else None
    if isinstance(inner, Agent) and isinstance(inner.model, DurableModel):
        # An agent made durable, used as a tool: it runs live, and its own model turns and tools are
        # the task's recorded calls, in order. Recording the whole run as one call too would nest
        # calls inside a call, which a replay (answering the outer one from its record) cannot follow.
        return live_tool(tool)
    return recorded_tool(ctx, tool)


def durable_agent(
    ctx: AsyncTaskContext, agent: Agent[Any], *, model_provider: ModelProvider | None = None
) -> Agent[Any]:
    """A copy of ``agent`` (and of the agents it hands off to) whose model answers and function tools
    are recorded calls of the task. A model given by name is looked up through ``model_provider``
    (the SDK's default provider when ``None``) at its first live request.

    Its function tools are copies of the agent's, ``FunctionTool`` still (``__wrapped__`` is the
    function a tool was made from; a ``needs_approval`` policy is asked as in a plain run), each run
    by the SDK inside its recorded call, its timeout included (so a timeout is the call's recorded
    outcome: the copy's ``timeout_seconds`` is ``None``).

    Handoffs, to an ``Agent`` or through ``handoff(agent, ...)``, lead to durable copies too (a
    ``Handoff``'s ``on_invoke_handoff`` runs as it is, and the agent it returns is wrapped). Hosted
    tools are not wrapped: they run at the provider, inside the recorded response. An agent used as
    a tool (``agent.as_tool``) is one recorded call, its final output the result: a run killed while
    that agent works asks its model again for that agent's turns. Built from a durable agent instead
    (``durable_agent(ctx, inner).as_tool(...)``, inside the task), it runs live and each of its own
    model turns and tools is a recorded call, so none is asked or run twice.
    """
    made: dict[int, Agent[Any]] = {}
    provider = model_provider

    def wrap(original: Agent[Any]) -> Agent[Any]:
        known = made.get(id(original))
        if known is not None:
            return known
        model = original.model
        inner: Model | Callable[[], Model]
        if isinstance(model, Model):
            inner = model.inner if isinstance(model, DurableModel) else model  # never wrapped twice
        else:
            name = model

            def inner() -> Model:
                return (provider or MultiProvider()).get_model(name)

        copy = original.clone(
            model=DurableModel(ctx, inner, agent_name=original.name),
            tools=[_durable_tool(ctx, t) for t in original.tools],
        )
        made[id(original)] = copy
        copy.handoffs = [wrap(h) if isinstance(h, Agent) else wrap_handoff(h) for h in original.handoffs]
        return copy

    def wrap_handoff(original: Handoff[Any, Any]) -> Handoff[Any, Any]:
        invoke = original.on_invoke_handoff

        async def on_invoke_handoff(context: RunContextWrapper[Any], arguments: str) -> Any:
            target = await invoke(context, arguments)
            return wrap(target) if isinstance(target, Agent) else target

        copy = dataclasses.replace(original, on_invoke_handoff=on_invoke_handoff)
        copy._agent_ref = original._agent_ref  # not an init field: replace() leaves it unset
        return copy

    return wrap(agent)


def approval_key(item: ToolApprovalItem) -> str:
    """The input key a durable run waits on for ``item``'s approval: ``approve:{call_id}``."""
    raw = item.raw_item
    call_id = raw.get("call_id") if isinstance(raw, dict) else getattr(raw, "call_id", None)
    call_id = call_id or (raw.get("id") if isinstance(raw, dict) else getattr(raw, "id", None))
    return f"approve:{call_id}"


def _approval_prompt(item: ToolApprovalItem) -> str:
    raw = item.raw_item
    arguments = raw.get("arguments") if isinstance(raw, dict) else getattr(raw, "arguments", None)
    return f"Allow {item.tool_name}({arguments or ''})? Send true, false, or {{'approved': bool, 'message': str}}"


async def run(
    ctx: AsyncTaskContext,
    agent: Agent[Any],
    input: str | list[TResponseInputItem] | RunState[Any],
    *,
    model_provider: ModelProvider | None = None,
    run_config: RunConfig | None = None,
    **runner_options: Any,
) -> RunResult:
    """``Runner.run(agent, input, ...)`` as part of a tether task, durable.

    Every model response and every function tool's result is a recorded call of the task; a run
    that stopped anywhere resumes from its record. A tool that needs approval (``needs_approval``)
    makes the run wait for the input :func:`approval_key` names (``app.send_input(task_id,
    "approve:{call_id}", True)``, or ``{"approved": False, "message": "..."}``): the task suspends,
    no process waits, and the run continues when the answer arrives.

    tether's own errors in a tool's call (a lost lease, the store down, a divergence from the record)
    are raised as they are, never answered to the model by the tool's failure function: the run
    stops as any task's run stops on them.

    ``runner_options`` go to ``Runner.run`` (``session=TetherSession.in_task(ctx)``, ``context=``,
    ``max_turns=``...). A ``run_config.model`` is wrapped too; a ``run_config.model_provider``
    names the agents' models given by name, as in ``Runner.run`` (``model_provider`` overrides it).
    """
    durable = durable_agent(ctx, agent, model_provider=_provider(model_provider, run_config))
    if run_config is not None:
        runner_options["run_config"] = _durable_config(ctx, run_config, model_provider, agent.name)
    result = await through(Runner.run(durable, input, **runner_options))
    while (state := await approvals(ctx, result)) is not None:
        result = await through(Runner.run(durable, state, **runner_options))
    return result


def run_streamed(
    ctx: AsyncTaskContext,
    agent: Agent[Any],
    input: str | list[TResponseInputItem] | RunState[Any],
    *,
    model_provider: ModelProvider | None = None,
    run_config: RunConfig | None = None,
    **runner_options: Any,
) -> RunResultStreaming:
    """``Runner.run_streamed`` as part of a tether task, durable like :func:`run`.

    Live turns stream their events as the model makes them; a turn the model already answered is
    replayed as one ``response.completed`` event carrying the recorded response. A tool that needs
    approval interrupts the run as in the SDK: once its events are consumed, ``await approvals(ctx,
    result)`` waits for the answers (as tether inputs) and gives the state to stream on from.
    """
    durable = durable_agent(ctx, agent, model_provider=_provider(model_provider, run_config))
    if run_config is not None:
        runner_options["run_config"] = _durable_config(ctx, run_config, model_provider, agent.name)
    return through_stream(Runner.run_streamed(durable, input, **runner_options))


async def approvals(ctx: AsyncTaskContext, result: RunResult | RunResultStreaming) -> RunState[Any] | None:
    """Wait for a person's answer to each approval ``result`` was interrupted for (the input
    :func:`approval_key` names: ``True``, ``False`` or ``{"approved": bool, "message": str}``) and
    return the run's state with the answers applied, to run on from; ``None`` when nothing waits.
    The task suspends while an answer is missing; no process waits."""
    if not result.interruptions:
        return None
    state = result.to_state()
    for item in result.interruptions:
        answer = await ctx.wait_for_input(approval_key(item), prompt=_approval_prompt(item))
        approved, message = _verdict(answer)
        if approved:
            state.approve(item)
        else:
            state.reject(item, rejection_message=message)
    return state


def _provider(model_provider: ModelProvider | None, run_config: RunConfig | None) -> ModelProvider | None:
    """What names the agents' models given by name: the one given, else the run's config's (the SDK's
    default provider when neither says)."""
    if model_provider is not None or run_config is None:
        return model_provider
    return run_config.model_provider


def _durable_config(
    ctx: AsyncTaskContext, config: RunConfig, model_provider: ModelProvider | None, agent_name: str
) -> RunConfig:
    """``config`` with its ``model`` (which overrides every agent's) wrapped too."""
    chosen = config.model
    if chosen is None:
        return config
    provider = model_provider or config.model_provider
    inner: Model | Callable[[], Model]
    if isinstance(chosen, Model):
        inner = chosen
    else:
        name = chosen

        def inner() -> Model:
            return provider.get_model(name)

    return dataclasses.replace(config, model=DurableModel(ctx, inner, agent_name=f"run_config:{agent_name}"))


def _verdict(answer: Any) -> tuple[bool, str | None]:
    if isinstance(answer, dict):
        return bool(answer.get("approved")), answer.get("message")
    if isinstance(answer, bool):
        return answer, None
    raise InvalidInputError(f"an approval is true, false or {{'approved': bool, 'message': str}}, got {answer!r}")


def _digest(request: dict[str, Any]) -> str:
    return hashlib.sha256(orjson.dumps(request, default=_jsonable, option=orjson.OPT_SORT_KEYS)).hexdigest()[:32]


def _jsonable(value: Any) -> Any:
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        return dump(mode="json")
    return repr(value)


def _count(input: str | Sequence[Any]) -> int:
    return 1 if isinstance(input, str) else len(input)
