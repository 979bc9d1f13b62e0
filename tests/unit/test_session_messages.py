"""A session's records read into messages: each record once per read, and the view folded from them
equal to the view folded from the records alone."""

from __future__ import annotations

import pytest

import tether
from tether.conversation import fold_view, to_event
from tether.conversation import messages as conversation_messages
from tether.conversation.messages import MessageRemoved, SessionOpened, list_messages
from tether.events import Recorded

ITEMS = [
    {"role": "user", "content": "Where is order A-1?"},
    {"type": "function_call", "call_id": "c1", "name": "lookup", "arguments": '{"id": "A-1"}'},
    {"type": "function_call_output", "call_id": "c1", "output": "lost"},
    {"role": "developer", "content": "Be brief."},
]


def _records() -> list[Recorded]:
    records = [Recorded(1, 1.0, SessionOpened(session_id="s"))]
    records += [Recorded(seq, float(seq), to_event(item)) for seq, item in enumerate(ITEMS, 2)]
    return [*records, Recorded(6, 6.0, MessageRemoved(seq=3))]


def test_a_view_folded_with_the_listings_messages_takes_them_and_equals_the_plain_fold() -> None:
    records = _records()
    listing = list_messages(records)  # the removed message (#3) is not in it
    view = fold_view(records, made=listing)
    assert view == fold_view(records)
    assert [m.seq for m in view.recent] == [2, 4] and [m.seq for m in view.system] == [5]
    assert all(m is listing[m.seq] for m in (*view.system, *view.recent))


def test_a_task_reads_each_record_of_its_conversation_into_a_message_once(monkeypatch: pytest.MonkeyPatch) -> None:
    app = tether.App("memory://")
    app.session("chat").add_many(ITEMS, format="openai_responses")
    read = conversation_messages.message_from_event
    made: list[int] = []

    def counted(rec: Recorded, ev: conversation_messages.MessageAdded) -> conversation_messages.Message:
        made.append(rec.seq)
        return read(rec, ev)

    monkeypatch.setattr(conversation_messages, "message_from_event", counted)

    @app.task
    def chat(ctx: tether.TaskContext) -> list[str]:
        return [m.role for m in ctx.session.window(10_000, keep_last=0).messages]

    assert app.run(chat, session_id="chat").output == ["system", "user", "assistant", "tool"]
    assert sorted(made) == [2, 3, 4, 5]
