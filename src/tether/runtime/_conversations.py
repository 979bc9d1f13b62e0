"""Conversations and users over a task log: sessions (open, list, delete) and users' documents.
:class:`~tether.App` offers each as a method of its own (documented there)."""

from __future__ import annotations

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
from tether.log import TaskLog
from tether.userstate import UserState

__all__ = ["Conversations"]


class Conversations:
    """Conversations and the users they belong to, on one task log."""

    def __init__(self, log: TaskLog) -> None:
        self.log = log

    def session(
        self,
        session_id: str | None = None,
        *,
        user_id: str | None = None,
        counter: TokenCounter | None = None,
        summarizer: Summarizer | None = None,
        compact_when_tokens_over: int | None = None,
    ) -> Session:
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
        return list_sessions(self.log, user_id=user_id, limit=limit, offset=offset)

    def delete_session(self, session_id: str, *, cascade: bool = False) -> int:
        check_id(session_id, "session_id")
        return delete_session(self.log, session_id, cascade=cascade)

    def user(self, user_id: str, *, schema: type[BaseModel] | None = None) -> UserState:
        check_id(user_id, "user_id")
        return UserState(self.log, user_id, schema)
