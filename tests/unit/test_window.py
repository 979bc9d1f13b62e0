"""Properties of the context window and of compaction (hypothesis)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

import tether
from tether.conversation import EstimateCounter, message_tokens

texts = st.text(alphabet="abcdefghij .", min_size=0, max_size=120)


@st.composite
def conversations(draw: st.DrawFn) -> list[dict[str, object]]:
    messages: list[dict[str, object]] = []
    if draw(st.booleans()):
        messages.append({"role": "system", "content": draw(texts)})
    for i in range(draw(st.integers(1, 25))):
        kind = draw(st.integers(0, 3))
        if kind == 0:
            messages.append({"role": "user", "content": draw(texts)})
        elif kind == 1:
            messages.append({"role": "assistant", "content": draw(texts)})
        else:
            calls = draw(st.integers(1, 3))
            ids = [f"c{i}-{k}" for k in range(calls)]
            messages.append(
                {
                    "role": "assistant",
                    "content": draw(texts),
                    "tool_calls": [{"id": c, "name": "tool", "arguments": {"k": k}} for k, c in enumerate(ids)],
                }
            )
            for c in ids:
                messages.append({"role": "tool", "content": draw(texts), "tool_call_id": c})
    return messages


def _session(messages: list[dict[str, object]]) -> tether.Session:
    app = tether.App("memory://")
    session = app.session("s", counter=EstimateCounter())
    session.add_many(messages)
    return session


@settings(max_examples=120, deadline=None)
@given(conversations(), st.integers(1, 400), st.integers(0, 4))
def test_window_properties(messages: list[dict[str, object]], budget: int, keep_last: int) -> None:
    session = _session(messages)
    window = session.window(max_tokens=budget, keep_last=keep_last)
    counter = EstimateCounter()
    shown = list(window.messages)
    # Never a tool result without the assistant message that called it, right before its results.
    called: set[str] = set()
    for m in shown:
        if m.role == "assistant":
            called = {c.id for c in m.tool_calls}
        elif m.role == "tool":
            assert m.tool_call_id in called
    # Always the newest message.
    newest = max(session.messages(), key=lambda m: m.seq)
    assert shown[-1].seq == newest.seq or newest.role == "system"
    # Within budget, unless keeping keep_last turns (and system messages) needs more.
    if window.tokens > budget:
        non_system = [m for m in shown if m.role != "system"]
        turn_starts = [m for m in non_system if m.role != "tool"]
        assert len(turn_starts) <= max(keep_last, 1)
    assert window.tokens == sum(message_tokens(m, counter) for m in shown)


@settings(max_examples=80, deadline=None)
@given(conversations(), st.integers(0, 5), st.integers(1, 3))
def test_compaction_never_loses_a_message(messages: list[dict[str, object]], keep_last: int, rounds: int) -> None:
    session = _session(messages)
    before = session.messages()
    for _ in range(rounds):
        session.compact(keep_last=keep_last)
        assert session.messages() == before
    window = session.window(max_tokens=100_000, keep_last=keep_last)
    summary = window.summary
    # Everything is either in the summary's range or in the window.
    shown = {m.seq for m in window.messages}
    for m in before:
        if m.role == "system":
            assert m.seq in shown
        elif summary is None or m.seq > summary.covers_to:
            assert m.seq in shown or m.role == "tool"
