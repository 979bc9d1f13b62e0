"""Conversations and users on the App: sessions (open, list, delete) and users' documents.
A part of :class:`~tether.App` (which inherits it), kept in its own module."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import BaseModel

from tether.checks import check_id, check_optional_id
from tether.conversation import (
    Session,
    SessionInfo,
    Summarizer,
    TokenCounter,
    delete_session,
    list_sessions,
    open_session,
)
from tether.userstate import UserState

if TYPE_CHECKING:
    from tether.log import TaskLog

__all__ = ["Conversations"]


class Conversations:
    """What :class:`~tether.App` offers for conversations and the users they belong to."""

    if TYPE_CHECKING:
        log: TaskLog

    def session(
        self,
        session_id: str | None = None,
        *,
        user_id: str | None = None,
        counter: TokenCounter | None = None,
        summarizer: Summarizer | None = None,
        compact_when_tokens_over: int | None = None,
    ) -> Session:
        """Open a session (one conversation), creating it if it does not exist.

        With ``summarizer`` and ``compact_when_tokens_over``, adding a message compacts the session
        when the turns after its newest summary weigh more than that many tokens.
        """
        check_optional_id(session_id, "session_id")
        check_optional_id(user_id, "user_id")
        return open_session(
            self.log,
            session_id,
            user_id=user_id,
            counter=counter,
            summarizer=summarizer,
            compact_when_tokens_over=compact_when_tokens_over,
        )

    def sessions(self, *, user_id: str | None = None, limit: int = 100, offset: int = 0) -> list[SessionInfo]:
        """Sessions of this tenant (of one user, if given), newest first."""
        return list_sessions(self.log, user_id=user_id, limit=limit, offset=offset)

    def delete_session(self, session_id: str, *, cascade: bool = False) -> int:
        """Delete a session and its messages. Tasks linked to it are deleted with ``cascade=True``;
        without it, a session with tasks is refused, naming how many it would leave orphaned."""
        check_id(session_id, "session_id")
        return delete_session(self.log, session_id, cascade=cascade)

    def user(self, user_id: str, *, schema: type[BaseModel] | None = None) -> UserState:
        """A user's versioned document (preferences, profile), validated by ``schema`` if given."""
        check_id(user_id, "user_id")
        return UserState(self.log, user_id, schema)
