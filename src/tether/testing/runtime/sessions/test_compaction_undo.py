"""Undoing a compaction: the summary is withdrawn, the messages it covered (never deleted) are in the
window again, and the summary before it stands again — read by the same session object, by a fresh
one (through the view's snapshot), on every backend."""

from __future__ import annotations

import tether
from tether.testing import opens_share


def window_contents(session: tether.Session) -> list[str]:
    return [m.content for m in session.window(max_tokens=100_000, keep_last=0).messages]


def test_undo_brings_the_covered_messages_back(store_url: str) -> None:
    app = tether.App(store_url)
    chat = app.session("long")
    chat.add("system", "Be brief.")
    for i in range(6):
        chat.add("user", f"Question {i}.")
    everything = window_contents(chat)
    assert chat.undo_compaction() is None  # nothing to undo

    first = chat.compact(keep_last=4)
    assert first is not None
    for i in range(6, 10):
        chat.add("user", f"Question {i}.")
    second = chat.compact(keep_last=2)
    assert second is not None and second.covers_from == first.covers_from
    assert window_contents(chat)[2:] == ["Question 8.", "Question 9."]

    other = tether.App(store_url).session("long") if opens_share(store_url) else app.session("long")
    assert len(window_contents(other)) == 4  # another reader, its view cached with the second summary
    assert chat.undo_compaction() == second
    after_first = ["Be brief.", f"Summary of the earlier conversation:\n{first.text}"] + [
        f"Question {i}." for i in range(2, 10)
    ]
    assert window_contents(chat) == after_first  # the first compaction stands again
    assert chat.summaries() == [first]
    reopened = tether.App(store_url).session("long") if opens_share(store_url) else app.session("long")
    assert window_contents(reopened) == after_first  # a fresh reader, from the snapshot
    assert window_contents(other) == after_first  # the cached reader folds again when it sees the undo

    assert chat.undo_compaction() == first
    assert window_contents(chat) == everything + [f"Question {i}." for i in range(6, 10)]
    assert chat.window(max_tokens=100_000).summary is None and chat.summaries() == []
    assert len(chat.messages()) == 11  # nothing was ever deleted

    chat.compact(keep_last=1)  # compacting again after an undo works as before
    assert window_contents(chat)[-1] == "Question 9." and len(window_contents(chat)) == 3
