"""A message's content: a message that must say something and says ``None`` (or nothing) is refused,
naming the field and what was expected, and nothing is written; an assistant message that only calls
tools has content ``None`` and reads back as ``None`` — on every backend, outside and inside a task."""

from __future__ import annotations

from typing import Any

import pytest

import tether
from tether.testing import dump_database, opens_share

CALL = {"id": "c1", "name": "search", "arguments": {"q": "NYC"}}
CHAT_CALL = {"id": "c4", "type": "function", "function": {"name": "search", "arguments": '{"q": "NYC"}'}}


def _fresh(url: str, app: tether.App) -> tether.App:
    """An App of its own on the same database (the same App for the memory store)."""
    return tether.App(url) if opens_share(url) else app


@pytest.mark.tether_requires("dump")
@pytest.mark.parametrize(
    ("args", "kwargs", "expected"),
    [
        (("user", None), {}, "content of a user message is None; expected a string"),
        (("user",), {}, "content of a user message is None; expected a string"),
        (("system", None), {}, "content of a system message is None; expected a string"),
        (("assistant", None), {}, "content of an assistant message is None; expected a string"),
        (("tool", None), {"tool_call_id": "c1"}, "content of a tool message is None; expected a string"),
        (({"role": "user", "content": None},), {}, "content of a user message is None; expected a string"),
        (({"role": "user"},), {}, "content of a user message is missing; expected a string"),
        (({"role": "assistant", "content": None},), {}, "content of an assistant message is None; expected"),
        (
            ({"role": "user", "content": None},),
            {"format": "openai"},
            "content of an OpenAI Chat user message is None; expected a string or a list of content parts",
        ),
        (
            ({"role": "assistant", "content": None, "tool_calls": []},),
            {},
            "content of an OpenAI Chat assistant message is None; expected a string or a list of content parts",
        ),
        (
            ({"type": "message", "role": "user", "content": None},),
            {},
            "content is NoneType; expected a string or a list of input_text/input_image parts",
        ),
        (
            ({"role": "user", "content": None},),
            {"format": "anthropic"},
            "content is NoneType; expected a string or a list of content blocks",
        ),
        (
            ([{"role": "user", "content": "hi"}],),
            {},
            "add() takes one message, as a role and its content or as a dict; got list (for several messages, "
            "add_many([...]))",
        ),
        ((7, "hi"), {}, "add() takes one message, as a role and its content or as a dict; got int"),
    ],
)
def test_content_none_is_refused_and_nothing_is_written(
    store_url: str, args: tuple[Any, ...], kwargs: dict[str, Any], expected: str
) -> None:
    app = tether.App(store_url)
    chat = app.session("s1")
    chat.add("user", "Fly me to NYC.")
    before = dump_database(store_url, app.store)
    with pytest.raises(tether.InvalidInputError) as info:
        chat.add(*args, **kwargs)
    assert str(info.value).startswith(expected)
    with pytest.raises(tether.InvalidInputError) as info:  # in a batch: all or none
        chat.add_many([{"role": "user", "content": "ok"}, {"role": "user", "content": None}])
    assert str(info.value) == (
        "messages[1]: content of a user message is None; expected a string "
        "(content may be None only in an assistant message with tool_calls)"
    )
    assert dump_database(store_url, app.store) == before
    assert [m.content for m in _fresh(store_url, app).session("s1").messages()] == ["Fly me to NYC."]


def test_an_assistant_message_that_only_calls_tools_keeps_content_none(store_url: str) -> None:
    app = tether.App(store_url)
    chat = app.session("s1")
    chat.add("user", "Fly me to NYC.")
    chat.add("assistant", None, tool_calls=[CALL])  # the short form
    chat.add({"role": "assistant", "content": None, "tool_calls": [{**CALL, "id": "c2"}]})  # tether's form
    chat.add({"role": "assistant", "tool_calls": [{**CALL, "id": "c3"}]})  # no content at all
    chat.add({"role": "assistant", "content": None, "tool_calls": [CHAT_CALL]})  # OpenAI Chat
    stored = _fresh(store_url, app).session("s1").messages()
    assert [m.original for m in stored[1:]] == [
        {"role": "assistant", "content": None, "tool_calls": [CALL]},
        {"role": "assistant", "content": None, "tool_calls": [{**CALL, "id": "c2"}]},
        {"role": "assistant", "content": None, "tool_calls": [{**CALL, "id": "c3"}]},
        {"role": "assistant", "content": None, "tool_calls": [CHAT_CALL]},
    ]
    assert [m.content for m in stored[1:]] == ["", "", "", ""]  # no text
    chat.add_many([{"role": "tool", "tool_call_id": c, "content": "BA117"} for c in ("c1", "c2", "c3", "c4")])
    rendered = _fresh(store_url, app).session("s1").window(max_tokens=100_000).to_openai()
    assert rendered[1]["content"] is None and [c["id"] for c in rendered[1]["tool_calls"]] == ["c1", "c2", "c3", "c4"]


def test_ctx_session_refuses_content_none_and_writes_nothing(store_url: str) -> None:
    app = tether.App(store_url)

    @app.task
    def chat(ctx: tether.TaskContext) -> list[str]:
        ctx.session.add("user", "hi")
        refused: list[str] = []
        for bad in (("user", None), ([{"role": "user", "content": "hi"}],)):
            try:
                ctx.session.add(*bad)
            except tether.InvalidInputError as exc:
                refused.append(str(exc))
        ctx.session.add("assistant", None, tool_calls=[CALL])
        return refused

    done = app.run(chat, task_id="c1")
    assert done.output[0].startswith("content of a user message is None; expected a string")
    assert done.output[1] == (
        "add() takes one message, as a role and its content or as a dict; got list "
        "(for several messages, add_many([...]))"
    )
    stored = _fresh(store_url, app).session("c1").messages()
    assert [m.original for m in stored] == [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": None, "tool_calls": [CALL]},
    ]
