"""The OpenAI Agents SDK's ``Session`` on a tether session (see :mod:`tether.integrations.openai_agents`)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

try:
    from agents.memory.session_settings import SessionSettings, coerce_session_settings, resolve_session_limit
except ImportError as exc:  # pragma: no cover - the extra is missing
    raise ImportError(
        "tether.integrations.openai_agents needs the OpenAI Agents SDK: pip install 'tether[openai-agents]'"
    ) from exc

from tether.conversation import EstimateCounter, Message, Session, Summarizer, Summary
from tether.conversation.render import to_openai_responses
from tether.errors import InvalidInputError, TetherError
from tether.integrations._targets import Target, open_target

if TYPE_CHECKING:
    from agents.items import TResponseInputItem

    from tether.runtime.app import App
    from tether.runtime.context import AsyncTaskContext
    from tether.runtime.session import TaskSession

__all__ = ["TetherSession"]

T = TypeVar("T")

_EVERYTHING = 2**62  # a window with room for every message: the weight of the items since the newest summary
_COUNTER = EstimateCounter()  # the threshold of automatic compaction needs a weight, not an exact count


class TetherSession:
    """The Agents SDK's ``Session`` on a tether session: ``Runner.run(agent, input, session=...)``.

    ``get_items`` returns the items as they were added, in order, verbatim (OpenAI Responses
    items); ``get_items(limit=n)`` the newest ``n`` of them, oldest first. ``add_items`` is atomic
    (a batch stays contiguous whatever else is appended at the same time); ``pop_item`` removes
    the newest item and returns it, once (two concurrent pops never return the same item);
    ``clear_session`` empties the session. Everything is committed before the call returns; outside
    a task the store's I/O runs in a thread (the loop serves others meanwhile), so, as with the
    SDK's own sessions, a call cancelled while it writes may still have written, whole. One
    object may be used by several threads, each with an event loop of its own (as
    ``Runner.run_sync`` runs), and by several processes on one database at once.

    With ``compact_when_tokens_over``, the session has ``run_compaction``, the SDK's compaction hook
    (``OpenAIResponsesCompactionAwareSession``), which the SDK calls after each turn: it compacts
    the stored history in place, and ``get_items`` then returns the compacted history (a tether
    summary in the place of the items it folded, then the items after them as they were added).
    Without it the session has no such hook, since it would never compact on its own, and the SDK
    then skips the digest of every input item it makes before each model call for a session that
    has one. :meth:`compact` compacts either kind now. The summary is made by ``summarizer`` (an
    LLM of yours, or tether's extractive one), not by OpenAI's ``responses.compact``. The originals
    stay stored and listable (``app.session(id).messages()``), and ``undo_compaction`` brings them back.

    Outside a task, open it on an app: ``TetherSession("support-42", app)``. Inside a task, use
    ``TetherSession.in_task(ctx)``: the task's own conversation (``ctx.session``), whose reads and
    appends are part of the task's record, so a resumed run reads what the first run read and
    appends each item once.

    Example:
        >>> import asyncio, tether
        >>> app = tether.App("memory://")
        >>> session = TetherSession("support-42", app, user_id="ada")
        >>> asyncio.run(session.add_items([{"role": "user", "content": "Where is my parcel?"}]))
        >>> asyncio.run(session.get_items())
        [{'role': 'user', 'content': 'Where is my parcel?'}]
        >>> [m.role for m in app.session("support-42").messages()]
        ['user']
    """

    session_id: str
    session_settings: SessionSettings | None

    def __init__(
        self,
        session_id: str,
        app: App | str,
        *,
        user_id: str | None = None,
        session_settings: SessionSettings | dict[str, Any] | None = None,
        summarizer: Summarizer | None = None,
        keep_last: int = 6,
        compact_when_tokens_over: int | None = None,
    ) -> None:
        """``app``: a :class:`~tether.App`, or a store URL (``sqlite:///agent.db``,
        ``postgresql://…``) that opens one of this session's own, closed by :meth:`close`."""
        self._target: Target | None = open_target(app, "TetherSession")
        self.session_id = session_id
        self.session_settings = _settings(session_settings)
        self._conversation: Session | TaskSession = self._target.app.session(session_id, user_id=user_id)
        self._compacts(summarizer, keep_last, compact_when_tokens_over)

    @classmethod
    def in_task(
        cls,
        ctx: AsyncTaskContext,
        *,
        session_settings: SessionSettings | dict[str, Any] | None = None,
        summarizer: Summarizer | None = None,
        keep_last: int = 6,
        compact_when_tokens_over: int | None = None,
    ) -> TetherSession:
        """The task's own conversation (``ctx.session``) as an Agents SDK session: recorded reads,
        exactly-once appends. ``pop_item`` and ``clear_session`` are not recorded operations of a
        task, and raise."""
        self = cls.__new__(cls)
        self._target = None
        self._conversation = ctx.session
        self.session_id = ctx.session.id
        self.session_settings = _settings(session_settings)
        self._compacts(summarizer, keep_last, compact_when_tokens_over)
        return self

    def _compacts(self, summarizer: Summarizer | None, keep_last: int, over: int | None) -> None:
        self._summarizer = summarizer
        self._keep_last = keep_last
        self._compact_over = over

    @property
    def run_compaction(self) -> Callable[[dict[str, Any] | None], Awaitable[None]]:
        """The SDK's compaction hook, on a session made with ``compact_when_tokens_over`` only: the
        SDK asks whether a session has it (an ``AttributeError`` says no)."""
        if self._compact_over is None:
            raise AttributeError(
                f"TetherSession {self.session_id!r} was made without compact_when_tokens_over, so it never "
                "compacts on its own and has no run_compaction (the SDK's hook); compact() compacts it now"
            )
        return self._run_compaction

    def close(self) -> None:
        """Close the app this session opened from a URL (an app passed in stays open: it is yours)."""
        if self._target is not None:
            self._target.close()

    @property
    def tether_session(self) -> Session | TaskSession:
        """The tether session underneath (``tether.Session``, or ``ctx.session`` inside a task)."""
        return self._conversation

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """The items as they were added (as the newest compaction left them), oldest first, verbatim;
        with ``limit`` (or ``session_settings.limit``), the newest ``limit`` of them, oldest first."""
        limit = resolve_session_limit(limit, self.session_settings)
        if limit is not None and (type(limit) is not int or limit < 0):
            raise InvalidInputError(f"limit must be None or an int >= 0, got {limit!r}")
        if limit == 0:
            return []
        items: list[Any] = await self._io(lambda: to_openai_responses(self._conversation.compacted()))
        return items[-limit:] if limit is not None else items

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Append ``items`` atomically, in order, verbatim."""
        batch = [dict(item) for item in items]
        if not batch:
            return
        # Inside a task (ctx.session), the append is recorded: exactly once however often it resumes.
        await self._io(lambda: self._conversation.add_many(batch, format="openai_responses"))

    async def pop_item(self) -> TResponseInputItem | None:
        """Remove the newest item and return it; ``None`` when the session is empty."""
        removed: Message | None = await self._io(self._outside_task("pop_item").pop)
        if removed is None:
            return None
        # An item added through the SDK comes back verbatim; a message added through another API
        # as its Responses form (its last item, when it makes several: they are removed together).
        item: Any = to_openai_responses([removed])[-1]
        return item  # type: ignore[no-any-return]

    async def clear_session(self) -> None:
        """Hide every item so far (they stay stored, as tether never deletes a message)."""
        await self._io(self._outside_task("clear_session").clear)

    async def _io(self, fn: Callable[[], T]) -> T:
        """``fn()``, which reads or writes the store: in a thread outside a task, so the event loop
        serves other coroutines while the store answers (as the SDK's own sessions do); on the loop
        inside one, where the reads and appends are the task's record, ordered with its calls.
        Outside a task, as with the SDK's sessions, a call cancelled while its thread writes still
        writes: an ``add_items`` cancelled by a timeout may have added its batch (whole, never part)."""
        if isinstance(self._conversation, Session):
            return await asyncio.to_thread(fn)
        return fn()

    async def _run_compaction(self, args: dict[str, Any] | None = None) -> None:
        """``run_compaction``, the SDK's compaction hook, of a session made with
        ``compact_when_tokens_over``: compact the stored history in place (see the class docstring).

        The SDK calls it after each turn. tether compacts when ``args["force"]`` is set, or when the
        items since the newest summary weigh more than ``compact_when_tokens_over`` tokens: the
        turns before the last ``keep_last`` are folded into one summary,
        which ``get_items`` returns in their place. ``response_id``, ``compaction_mode`` and
        ``store`` are about OpenAI's server-side compaction, which this does not use, and are ignored.
        The originals stay stored: :meth:`undo_compaction` undoes it.
        """
        force = bool((args or {}).get("force"))
        await self._io(lambda: self._compact_if_due(force))

    def _compact_if_due(self, force: bool) -> None:
        if not force:
            window = self._conversation.window(_EVERYTHING, keep_last=0, counter=_COUNTER)
            if self._compact_over is None or window.tokens <= self._compact_over:
                return
        self.compact()

    def compact(self) -> Summary | None:
        """Compact now (see the class docstring); the new summary, or ``None`` if nothing was folded."""
        return self._conversation.compact(self._summarizer, keep_last=self._keep_last)

    def undo_compaction(self) -> Summary | None:
        """Undo the newest compaction: ``get_items`` returns the items it folded again, in their
        places (they were never deleted), with the summary before it if there was one. The withdrawn
        summary, or ``None`` when the session has none."""
        return self._outside_task("undo_compaction").undo_compaction()

    def _outside_task(self, operation: str) -> Session:
        if not isinstance(self._conversation, Session):
            raise TetherError(
                f"{operation}() is not a recorded operation of a task's conversation: a resumed task "
                "could not undo it once. Open TetherSession(session_id, app) outside the task to do it"
            )
        return self._conversation


def _settings(settings: SessionSettings | dict[str, Any] | None) -> SessionSettings:
    """The session's settings, as the SDK's own sessions take them (a ``SessionSettings`` or its dict)."""
    return coerce_session_settings(settings) if settings is not None else SessionSettings()
