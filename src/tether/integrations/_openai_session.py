"""The OpenAI Agents SDK's ``Session`` on a tether session (see :mod:`tether.integrations.openai_agents`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

try:
    from agents.memory.session_settings import SessionSettings, resolve_session_limit
except ImportError as exc:  # pragma: no cover - the extra is missing
    raise ImportError(
        "tether.integrations.openai_agents needs the OpenAI Agents SDK: pip install 'tether[openai-agents]'"
    ) from exc

from tether.conversation import EstimateCounter, Message, Session, Summarizer, Summary
from tether.errors import InvalidInputError, TetherError

if TYPE_CHECKING:
    from agents.items import TResponseInputItem

    from tether.runtime.app import App
    from tether.runtime.context import AsyncTaskContext
    from tether.runtime.session import TaskSession

__all__ = ["TetherSession"]

_EVERYTHING = 2**62  # a window with room for every message: the session's items since its newest summary
_COUNTER = EstimateCounter()  # the session only needs the items, not an exact token count



class TetherSession:
    """The Agents SDK's ``Session`` on a tether session: ``Runner.run(agent, input, session=...)``.

    Items are stored verbatim (OpenAI Responses items) and come back identical. ``add_items`` is
    atomic (a batch stays contiguous whatever else is appended at the same time); ``pop_item``
    removes one item once (two concurrent pops never return the same item); everything is
    committed before the call returns. ``run_compaction`` folds older turns into a tether summary:
    ``get_items`` then returns the summary and the items after it; the originals stay stored and
    listable (``app.session(id).messages()``), and ``undo_compaction`` brings them back.

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
        app: App,
        *,
        user_id: str | None = None,
        session_settings: SessionSettings | None = None,
        summarizer: Summarizer | None = None,
        keep_last: int = 6,
        compact_when_tokens_over: int | None = None,
    ) -> None:
        self.session_id = session_id
        self.session_settings = session_settings
        self._conversation: Session | TaskSession = app.session(session_id, user_id=user_id)
        self._summarizer = summarizer
        self._keep_last = keep_last
        self._compact_over = compact_when_tokens_over

    @classmethod
    def in_task(
        cls,
        ctx: AsyncTaskContext,
        *,
        session_settings: SessionSettings | None = None,
        summarizer: Summarizer | None = None,
        keep_last: int = 6,
        compact_when_tokens_over: int | None = None,
    ) -> TetherSession:
        """The task's own conversation (``ctx.session``) as an Agents SDK session: recorded reads,
        exactly-once appends. ``pop_item`` and ``clear_session`` are not recorded operations of a
        task, and raise."""
        self = cls.__new__(cls)
        self._conversation = ctx.session
        self.session_id = ctx.session.id
        self.session_settings = session_settings
        self._summarizer = summarizer
        self._keep_last = keep_last
        self._compact_over = compact_when_tokens_over
        return self

    @property
    def tether_session(self) -> Session | TaskSession:
        """The tether session underneath (``tether.Session``, or ``ctx.session`` inside a task)."""
        return self._conversation

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """The conversation (the newest summary, then the items after it), oldest first; with
        ``limit`` (or ``session_settings.limit``), the newest ``limit`` of them."""
        limit = resolve_session_limit(limit, self.session_settings)
        if limit is not None and (type(limit) is not int or limit < 0):
            raise InvalidInputError(f"limit must be None or an int >= 0, got {limit!r}")
        window = self._conversation.window(_EVERYTHING, keep_last=0, counter=_COUNTER)
        items: list[Any] = window.to_openai_responses()
        if limit is not None:
            items = items[len(items) - limit :] if limit else []
        return items

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Append ``items`` atomically, in order, verbatim."""
        batch = [dict(item) for item in items]
        if not batch:
            return
        if isinstance(self._conversation, Session):
            self._conversation.add_many(batch, format="openai_responses")
        else:
            self._conversation.add_many(batch)  # a task's appends: recorded, exactly once

    async def pop_item(self) -> TResponseInputItem | None:
        """Remove and return the newest item; ``None`` when the session is empty."""
        removed: Message | None = self._outside_task("pop_item").pop()
        return removed.original if removed is not None else None  # type: ignore[return-value]

    async def clear_session(self) -> None:
        """Hide every item so far (they stay stored, as tether never deletes a message)."""
        self._outside_task("clear_session").clear()

    async def run_compaction(self, args: dict[str, Any] | None = None) -> None:
        """Fold the turns before the last ``keep_last`` into a tether summary.

        The SDK calls this after each turn; tether compacts when ``args["force"]`` is set or the
        items since the newest summary weigh more than ``compact_when_tokens_over`` tokens (never,
        when that is ``None``). The originals stay stored: :meth:`undo_compaction` undoes it.
        """
        force = bool((args or {}).get("force"))
        if not force:
            if self._compact_over is None:
                return
            window = self._conversation.window(_EVERYTHING, keep_last=0, counter=_COUNTER)
            if window.tokens <= self._compact_over:
                return
        self.compact()

    def compact(self) -> Summary | None:
        """Compact now (see :meth:`run_compaction`); the new summary, or ``None`` if nothing was folded."""
        return self._conversation.compact(self._summarizer, keep_last=self._keep_last)

    def undo_compaction(self) -> Summary | None:
        """Undo the newest compaction: ``get_items`` returns the items it covered again (they were
        never deleted), after the summary before it if there was one. The withdrawn summary, or
        ``None`` when the session has none."""
        return self._outside_task("undo_compaction").undo_compaction()

    def _outside_task(self, operation: str) -> Session:
        if not isinstance(self._conversation, Session):
            raise TetherError(
                f"{operation}() is not a recorded operation of a task's conversation: a resumed task "
                "could not undo it once. Open TetherSession(session_id, app) outside the task to do it"
            )
        return self._conversation
