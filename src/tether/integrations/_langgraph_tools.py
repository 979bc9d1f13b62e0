"""Exactly-once tools for LangGraph: a ``ToolNode`` whose tool calls run under tether's ledger.

Each tool call of a model's message is one ledger key, ``langgraph:{thread_id}:{namespace}:{tool
call id}`` (the namespace is the checkpoint namespace of the node that runs the tools, without
LangGraph's task ids, so it is the same in every process that runs that node again). The key's
first run records what the tool returned (its ``ToolMessage`` or ``Command``, in LangGraph's own
serializer); a later run of the same call — the graph resumed after a crash, a sibling's failure,
a retry of the node — gets the recorded answer and the tool does not run. A tool that was killed
while it ran has a started key and no answer: ``on_unknown`` decides (run it again with the same key
by default, so the tool can make its effect idempotent with :func:`tool_key`; ``"raise"``; or a
reconcile callable), as for any ledger key.
"""

from __future__ import annotations

import base64
import contextvars
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from langchain_core.messages import ToolMessage
from langgraph.checkpoint.serde.base import SerializerProtocol
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.config import get_config
from langgraph.prebuilt import ToolNode
from langgraph.prebuilt.tool_node import ToolCallRequest
from langgraph.types import Command

from tether.errors import InvalidInputError, TetherError
from tether.integrations._targets import Target, open_target
from tether.log import TaskLog
from tether.runtime.app import App
from tether.runtime.ledger import Ledger, OnUnknown, check_on_unknown

__all__ = ["TetherToolNode", "log_of", "tool_key"]

_KEY: contextvars.ContextVar[str | None] = contextvars.ContextVar("tether_langgraph_tool_key", default=None)

Answer = ToolMessage | Command[Any]
Execute = Callable[[ToolCallRequest], Answer]
AsyncExecute = Callable[[ToolCallRequest], Awaitable[Answer]]


def tool_key() -> str:
    """The idempotency key of the tool call running now (inside a :class:`TetherToolNode`'s tool).

    Hand it to the system the tool changes (an ``Idempotency-Key`` header, a unique column) so that a
    call run again after a crash in the middle of its effect is recognized there.

    Raises:
        InvalidInputError: outside a tool that a :class:`TetherToolNode` runs.
    """
    key = _KEY.get()
    if key is None:
        raise InvalidInputError("tool_key() is only known inside a tool that a TetherToolNode runs")
    return key


class _FailedError(Exception):
    """A tool's error answer (``status="error"``): returned to the graph, never recorded."""

    def __init__(self, answer: ToolMessage) -> None:
        super().__init__(answer.content)
        self.answer = answer


def log_of(target: Any, owner: str) -> tuple[TaskLog, Target | None]:
    """The log of a URL (``tether+`` allowed), an App, a TaskLog or a TetherSaver, and the app this
    opened for a URL (closed by the owner's ``close()``); anything else is a ConfigurationError."""
    if isinstance(target, TaskLog):
        return target, None
    held = getattr(target, "log", None)
    if isinstance(held, TaskLog) and not isinstance(target, App):  # a TetherSaver
        return held, None
    opened = open_target(target, owner)
    return opened.app.log, opened if opened.owned else None


def key_of(tool_call: Mapping[str, Any]) -> str:
    """``langgraph:{thread}:{namespace}:{tool call id}`` for a call made in the running graph."""
    call_id = tool_call.get("id")
    if not call_id:
        raise InvalidInputError(f"tool call {tool_call.get('name')!r} has no id: a recorded call needs one")
    configurable = get_config().get("configurable", {})
    thread = configurable.get("thread_id")
    if thread is None:
        raise InvalidInputError(
            "a TetherToolNode runs in a graph with a checkpointer and a thread: "
            'config={"configurable": {"thread_id": ...}} names none'
        )
    namespace = "|".join(part.split(":")[0] for part in str(configurable.get("checkpoint_ns", "")).split("|"))
    return f"langgraph:{thread}:{namespace}:{call_id}"


class TetherToolNode(ToolNode):
    """LangGraph's ``ToolNode``, each tool call run once per thread, namespace and tool call id.

    Args:
        tools: the tools, as for ``ToolNode``.
        target: where the ledger lives: a store URL (``tether+`` before its scheme allowed), a
            :class:`~tether.App`, a :class:`~tether.TaskLog` or a ``TetherSaver`` (its database
            and tenant).
        on_unknown: what to do about a call that started and recorded no answer (its process
            died in it): ``"retry"`` (run it again, same key), ``"raise"``
            (:class:`~tether.OutcomeUnknownError`) or ``reconcile(key)``, as for ``ledger.once``.
        serde: the serializer of the recorded answers (LangGraph's ``JsonPlusSerializer``).
        **kwargs: ``ToolNode``'s own (``handle_tool_errors``, ``wrap_tool_call``, ...). A
            ``wrap_tool_call`` of yours runs inside the recorded call: its retries are one call.

    Example:
        >>> from langchain_core.messages import AIMessage
        >>> from langchain_core.tools import tool
        >>> from langgraph.graph import START, MessagesState, StateGraph
        >>> from tether.integrations.langgraph import TetherSaver, TetherToolNode, tool_key
        >>> sent = []
        >>> @tool
        ... def email(to: str) -> str:
        ...     "Send an email."
        ...     sent.append(tool_key())
        ...     return f"sent to {to}"
        >>> saver = TetherSaver("memory://")
        >>> builder = StateGraph(MessagesState)
        >>> _ = builder.add_node("tools", TetherToolNode([email], saver)).add_edge(START, "tools")
        >>> graph = builder.compile(checkpointer=saver)
        >>> call = {"name": "email", "args": {"to": "ada"}, "id": "call-1"}
        >>> asked = {"messages": [AIMessage("", tool_calls=[call])]}
        >>> config = {"configurable": {"thread_id": "t1"}}
        >>> graph.invoke(asked, config)["messages"][-1].content
        'sent to ada'
        >>> graph.invoke(asked, config)["messages"][-1].content  # the same call: recorded, not sent again
        'sent to ada'
        >>> sent
        ['langgraph:t1:tools:call-1']
    """

    def __init__(
        self,
        tools: Sequence[Any],
        target: Any,
        *,
        on_unknown: OnUnknown = "retry",
        serde: SerializerProtocol | None = None,
        wrap_tool_call: Callable[[ToolCallRequest, Execute], Answer] | None = None,
        awrap_tool_call: Callable[[ToolCallRequest, AsyncExecute], Awaitable[Answer]] | None = None,
        **kwargs: Any,
    ) -> None:
        check_on_unknown(on_unknown)
        log, self._opened = log_of(target, "TetherToolNode")
        self.ledger = Ledger(log.store, log.tenant)
        self.on_unknown = on_unknown
        self.serde = serde or JsonPlusSerializer()
        self._inner_wrap, self._inner_awrap = wrap_tool_call, awrap_tool_call
        super().__init__(tools, wrap_tool_call=self._wrap, awrap_tool_call=self._awrap, **kwargs)

    def close(self) -> None:
        """Close the app this node opened from a URL (a log, App or saver given stays open)."""
        if self._opened is not None:
            self._opened.close()

    def _wrap(self, request: ToolCallRequest, execute: Execute) -> Answer:
        key = key_of(request.tool_call)

        def run() -> Any:
            token = _KEY.set(key)
            try:
                answer = self._inner_wrap(request, execute) if self._inner_wrap else execute(request)
            finally:
                _KEY.reset(token)
            return self._recorded(answer)

        try:
            return self._answer(self.ledger.once(key, run, on_unknown=self.on_unknown))
        except _FailedError as failed:
            return failed.answer

    async def _awrap(self, request: ToolCallRequest, execute: AsyncExecute) -> Answer:
        key = key_of(request.tool_call)

        async def run() -> Any:
            token = _KEY.set(key)
            try:
                if self._inner_awrap is not None:
                    answer = await self._inner_awrap(request, execute)
                elif self._inner_wrap is not None:
                    raise InvalidInputError("an async run needs awrap_tool_call beside wrap_tool_call")
                else:
                    answer = await execute(request)
            finally:
                _KEY.reset(token)
            return self._recorded(answer)

        try:
            return self._answer(await self.ledger.once_async(key, run, on_unknown=self.on_unknown))
        except _FailedError as failed:
            return failed.answer

    def _recorded(self, answer: Answer) -> dict[str, str]:
        """What the ledger keeps of an answer; an error answer is raised so the key is not kept."""
        if isinstance(answer, ToolMessage) and answer.status == "error":
            raise _FailedError(answer)
        kind, data = self.serde.dumps_typed(answer)
        return {"type": kind, "data": base64.b64encode(data).decode()}

    def _answer(self, recorded: Any) -> Answer:
        try:
            answer = self.serde.loads_typed((recorded["type"], base64.b64decode(recorded["data"])))
        except (TypeError, KeyError, ValueError) as exc:
            raise TetherError(f"a recorded tool answer could not be read back ({exc}): {recorded!r:.200}") from None
        if not isinstance(answer, (ToolMessage, Command)):
            raise TetherError(f"a recorded tool answer is a {type(answer).__name__}, not a ToolMessage or Command")
        return answer
