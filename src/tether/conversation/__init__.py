"""Sessions: the conversation, the context window, compaction, and renderers for model APIs.

Messages come in and go out in the providers' own shapes (OpenAI Chat Completions, OpenAI
Responses items, Anthropic content blocks) as well as tether's short role/content form. The
package is split by concept:

- ``shapes``: which shape a message is, validation, and reading it into neutral parts;
- ``messages``: the session's events, ``Message``/``Summary``/``SessionView`` and the pure fold;
- ``window``: token counting, turns (a tool call with its results) and the window;
- ``render``: a window's messages in each provider's shape, verbatim where they came in it;
- ``session``: ``Session`` itself, compaction, and listing/deleting sessions.
"""

from __future__ import annotations

from tether.conversation.messages import (
    ROLES,
    Message,
    MessageAdded,
    MessageRemoved,
    MessagesCleared,
    Role,
    SessionClosed,
    SessionOpened,
    SessionView,
    Summary,
    SummaryAdded,
    SummaryWithdrawn,
    ToolCallRequest,
    check_one_message,
    fold_history,
    fold_view,
    list_messages,
    message_from_event,
    parts_of,
    standing_summary,
    to_event,
    withdraws,
)
from tether.conversation.session import (
    SESSION_TYPE,
    Session,
    SessionInfo,
    Summarizer,
    delete_session,
    extractive_summarizer,
    list_sessions,
    open_session,
    stream_id,
    summary_of,
    write_view_snapshot,
)
from tether.conversation.shapes import FORMATS, Format, detect
from tether.conversation.window import (
    IMAGE_TOKENS,
    IMAGE_TOKENS_LOW,
    EstimateCounter,
    TiktokenCounter,
    TokenCounter,
    Window,
    as_compacted,
    build_window,
    default_counter,
    message_tokens,
    summary_message,
    turns,
)

__all__ = [
    "FORMATS",
    "IMAGE_TOKENS",
    "IMAGE_TOKENS_LOW",
    "ROLES",
    "SESSION_TYPE",
    "EstimateCounter",
    "Format",
    "Message",
    "MessageAdded",
    "MessageRemoved",
    "MessagesCleared",
    "Role",
    "Session",
    "SessionClosed",
    "SessionInfo",
    "SessionOpened",
    "SessionView",
    "Summarizer",
    "Summary",
    "SummaryAdded",
    "SummaryWithdrawn",
    "TiktokenCounter",
    "TokenCounter",
    "ToolCallRequest",
    "Window",
    "as_compacted",
    "build_window",
    "check_one_message",
    "default_counter",
    "delete_session",
    "detect",
    "extractive_summarizer",
    "fold_history",
    "fold_view",
    "list_messages",
    "list_sessions",
    "message_from_event",
    "message_tokens",
    "open_session",
    "parts_of",
    "standing_summary",
    "stream_id",
    "summary_message",
    "summary_of",
    "to_event",
    "turns",
    "withdraws",
    "write_view_snapshot",
]
