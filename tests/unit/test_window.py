"""Properties of the context window and of compaction (hypothesis)."""

from __future__ import annotations

import functools
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tether
from tether.conversation import EstimateCounter, Window, message_tokens, turns

texts = st.text(alphabet="abcdefghij .", min_size=0, max_size=120)


@st.composite
def conversations(draw: st.DrawFn) -> list[dict[str, object]]:
    messages: list[dict[str, object]] = []
    if draw(st.booleans()):
        messages.append({"role": "system", "content": draw(texts)})
    for i in range(draw(st.integers(1, 25))):
        kind = draw(st.integers(0, 5))
        if kind == 0:
            messages.append({"role": "user", "content": draw(texts)})
        elif kind == 1:
            messages.append({"role": "assistant", "content": draw(texts)})
        elif kind == 4:  # another system message, anywhere: every one is kept, in order
            messages.append({"role": "system", "content": draw(texts)})
        elif kind == 5:  # a tool result whose call is not there: never shown
            messages.append({"role": "tool", "content": draw(texts), "tool_call_id": f"gone-{i}"})
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


def _check_pairs(shown: list[tether.Message]) -> None:
    """Never a tool result without the assistant message that called it, right before its results."""
    called: set[str] = set()
    for m in shown:
        if m.role == "assistant":
            called = {c.id for c in m.tool_calls}
        elif m.role == "tool":
            assert m.tool_call_id in called, (m, shown)
        else:
            called = set()


def _session(messages: list[dict[str, Any]] | list[dict[str, object]]) -> tether.Session:
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
    _check_pairs(shown)
    # Every system message, in order, whatever the budget.
    stored = session.messages()
    assert [m.seq for m in shown if m.role == "system"] == [m.seq for m in stored if m.role == "system"]
    # Always the newest message (that is not a system message or a result of nothing).
    orphan = {m.seq for m in stored if m.role == "tool" and str(m.tool_call_id).startswith("gone-")}
    newest = max((m for m in stored if m.role != "system" and m.seq not in orphan), key=lambda m: m.seq, default=None)
    assert newest is None or shown[-1].seq == newest.seq
    assert not orphan & {m.seq for m in shown}
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
    _check_pairs(list(window.messages))
    shown = {m.seq for m in window.messages}
    caller = {c.id: m.seq for m in before if m.role == "assistant" for c in m.tool_calls}
    for m in before:
        if m.role == "system":
            assert m.seq in shown
        elif m.role == "tool":  # shown exactly when the call it answers is (not summarized, not missing)
            assert (m.seq in shown) == (caller.get(str(m.tool_call_id)) in shown), m
        elif summary is None or m.seq > summary.covers_to:
            assert m.seq in shown


# ----------------------------------------------------------------------------- mixed provider shapes

SHAPES = ("tether", "openai", "anthropic", "openai_responses")


def _image(i: int, shape: str, detail: str | None) -> dict[str, Any]:
    url = f"https://example.com/{i}.png"
    if shape == "openai":
        return {"type": "image_url", "image_url": {"url": url, **({"detail": detail} if detail else {})}}
    if shape == "anthropic":
        return {"type": "image", "source": {"type": "url", "url": url}}
    return {"type": "input_image", "image_url": url, "detail": detail or "auto"}


@st.composite
def mixed_conversations(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Well-formed conversations whose turns each come in one of the shapes, with parts that every
    provider can hold (text, images, tool calls and results), so every renderer must succeed."""
    messages: list[dict[str, Any]] = []
    for i in range(draw(st.integers(1, 14))):
        shape, kind, say = draw(st.sampled_from(SHAPES)), draw(st.integers(0, 4)), draw(texts)
        if kind == 0:  # a system or developer message, anywhere
            messages.append(
                {"role": "system", "content": say} if shape in ("tether", "anthropic")
                else {"role": "developer", "content": [{"type": "text", "text": say}]} if shape == "openai"
                else {"type": "message", "role": "system", "content": [{"type": "input_text", "text": say}]}
            )
        elif kind == 1:  # a user message, perhaps with an image
            image = draw(st.sampled_from([None, "low", "high"])) if shape != "tether" else None
            if shape == "tether":
                messages.append({"role": "user", "content": say})
            else:
                part = {"type": "input_text" if shape == "openai_responses" else "text", "text": say}
                messages.append({"role": "user", "content": [part] + ([_image(i, shape, image)] if image else [])})
        elif kind == 2:
            messages.append({"role": "assistant", "content": say})
        else:  # an assistant calling tools, and every result
            ids = [f"c{i}-{k}" for k in range(draw(st.integers(1, 3)))]
            args = [{"k": k, "say": say[:10]} for k in range(len(ids))]
            results = [draw(texts) for _ in ids]
            messages += _tool_turn(shape, say, ids, args, results)
            if shape == "anthropic" and kind == 4:  # the user speaks in the same message as the results
                messages[-1]["content"].append({"type": "text", "text": say or "and?"})
    return messages


def _tool_turn(shape: str, say: str, ids: list[str], args: list[dict[str, Any]], results: list[str]) -> list[Any]:
    if shape == "tether":
        calls = [{"id": c, "name": "tool", "arguments": a} for c, a in zip(ids, args, strict=True)]
        return [{"role": "assistant", "content": say, "tool_calls": calls}] + [
            {"role": "tool", "content": r, "tool_call_id": c} for c, r in zip(ids, results, strict=True)]
    if shape == "openai":
        calls = [{"id": c, "type": "function", "function": {"name": "tool", "arguments": orjson.dumps(a).decode()}}
                 for c, a in zip(ids, args, strict=True)]
        return [{"role": "assistant", "content": say or None, "tool_calls": calls}] + [
            {"role": "tool", "content": r, "tool_call_id": c} for c, r in zip(ids, results, strict=True)]
    if shape == "anthropic":
        uses = [{"type": "tool_use", "id": c, "name": "tool", "input": a} for c, a in zip(ids, args, strict=True)]
        return [{"role": "assistant", "content": [{"type": "text", "text": say}, *uses]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": c, "content": r}
                                             for c, r in zip(ids, results, strict=True)]}]
    lead = [{"type": "message", "role": "assistant", "content": say}] if say else []
    return lead + [{"type": "function_call", "call_id": c, "name": "tool", "arguments": orjson.dumps(a).decode()}
                   for c, a in zip(ids, args, strict=True)] + [
        {"type": "function_call_output", "call_id": c, "output": r} for c, r in zip(ids, results, strict=True)]


@functools.cache
def _adapters() -> tuple[Any, Any, Any]:
    chat = pytest.importorskip("openai.types.chat")
    responses = pytest.importorskip("openai.types.responses")
    anthropic = pytest.importorskip("anthropic.types")
    from pydantic import TypeAdapter

    return (TypeAdapter(chat.ChatCompletionMessageParam), TypeAdapter(anthropic.MessageParam),
            TypeAdapter(responses.ResponseInputItemParam))


def _check_rendered(window: Window) -> None:
    """Every renderer's output: valid for the SDK, and never a tool result without its call."""
    chat, anthropic, responses = _adapters()
    openai_messages = window.to_openai()
    for i, m in enumerate(openai_messages):
        chat.validate_python(m)
        if m["role"] == "tool":  # answers the assistant message just before the run of tool messages
            j = i
            while openai_messages[j - 1]["role"] == "tool":
                j -= 1
            assert j > 0 and m["tool_call_id"] in {c["id"] for c in openai_messages[j - 1].get("tool_calls") or []}
    request = window.to_anthropic()
    previous: dict[str, Any] | None = None
    for m in request["messages"]:
        list(anthropic.validate_python(m)["content"])
        blocks = m["content"] if isinstance(m["content"], list) else []
        for b in blocks:
            if b["type"] == "tool_result":
                assert previous is not None and isinstance(previous["content"], list)
                assert b["tool_use_id"] in {u["id"] for u in previous["content"] if u["type"] == "tool_use"}
        previous = m
    assert [m["role"] for m in request["messages"]][:1] in ([], ["user"])
    called: set[str] = set()
    for item in window.to_openai_responses():
        responses.validate_python(item)
        if item.get("type") == "function_call":
            called.add(item["call_id"])
        elif item.get("type") == "function_call_output":
            assert item["call_id"] in called


@settings(max_examples=100, deadline=None)
@given(mixed_conversations(), st.integers(1, 600), st.integers(0, 4))
def test_window_properties_over_mixed_shapes(messages: list[dict[str, Any]], budget: int, keep_last: int) -> None:
    session = _session(messages)
    stored = session.messages()
    assert [m.original for m in stored] == messages  # verbatim, whatever the shape
    window = session.window(max_tokens=budget, keep_last=keep_last)
    shown = list(window.messages)
    system = [m for m in stored if m.role == "system"]
    assert [m.seq for m in shown if m.role == "system"] == [m.seq for m in system]  # all, in order, first
    assert shown[: len(system)] == system
    assert stored[-1].seq in {m.seq for m in shown}  # always the newest
    called: set[str] = set()
    for m in shown:
        called |= {c.id for c in m.tool_calls}
        assert set(m.answers) <= called
    recent = [m for m in shown if m.role != "system"]
    conversation = [m for m in stored if m.role != "system"]
    assert recent == conversation[len(conversation) - len(recent):]  # the newest turns, nothing left out between
    if window.tokens > budget:  # over budget only to keep exactly keep_last turns
        all_turns = turns([m for m in stored if m.role != "system"])
        assert len(turns(recent)) == min(max(keep_last, 1), len(all_turns))
    assert window.tokens == sum(message_tokens(m, EstimateCounter()) for m in shown)
    _check_rendered(window)


@settings(max_examples=60, deadline=None)
@given(mixed_conversations(), st.integers(0, 4), st.integers(1, 3))
def test_compaction_over_mixed_shapes_never_loses_a_message(
    messages: list[dict[str, Any]], keep_last: int, rounds: int
) -> None:
    session = _session(messages)
    before = session.messages()
    for _ in range(rounds):
        session.compact(keep_last=keep_last)
        assert session.messages() == before
        assert [m.original for m in session.messages()] == messages
    window = session.window(max_tokens=100_000, keep_last=keep_last)
    shown = {m.seq for m in window.messages}
    covered = window.summary.covers_to if window.summary else 0
    for m in before:
        assert m.seq in shown or (m.role != "system" and m.seq <= covered)
    _check_rendered(window)
