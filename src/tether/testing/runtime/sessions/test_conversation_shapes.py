"""Messages in the providers' own shapes: stored verbatim, rendered back identically, converted or
refused across providers, validated before anything is written — on every backend.

Every rendered message is checked against the official SDKs' typed request parameters.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pytest
from pydantic import TypeAdapter

import tether

chat_types = pytest.importorskip("openai.types.chat")
responses_types = pytest.importorskip("openai.types.responses")
anthropic_types = pytest.importorskip("anthropic.types")

CHAT = TypeAdapter(chat_types.ChatCompletionMessageParam)
RESPONSES = TypeAdapter(responses_types.ResponseInputItemParam)
ANTHROPIC = TypeAdapter(anthropic_types.MessageParam)


def _materialize(value: Any) -> Any:
    """The SDK's validated value with its lazily validated iterables consumed (which validates them)."""
    if isinstance(value, dict):
        return {k: _materialize(v) for k, v in value.items()}
    if isinstance(value, str | bytes):
        return value
    if isinstance(value, Iterable):
        return [_materialize(v) for v in value]
    return value


def sdk_valid(adapter: TypeAdapter[Any], message: dict[str, Any]) -> None:
    """``message`` is a valid SDK parameter, and every key in it is one the SDK type knows."""
    assert _materialize(adapter.validate_python(message)) == message


@pytest.fixture
def app(store_url: str) -> tether.App:
    return tether.App(store_url)


OPENAI_CHAT: list[dict[str, Any]] = [
    {"role": "developer", "content": "You book trips."},
    {"role": "system", "content": [{"type": "text", "text": "Be brief."}], "name": "policy"},
    {
        "role": "user",
        "name": "ada",
        "content": [
            {"type": "text", "text": "Where is this, and what did I say?"},
            {"type": "image_url", "image_url": {"url": "https://example.com/a.png", "detail": "low"}},
            {"type": "input_audio", "input_audio": {"data": "UklGRg==", "format": "wav"}},
        ],
    },
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "search", "arguments": '{"q": "NYC"}'}},
            {"id": "call_2", "type": "function", "function": {"name": "weather", "arguments": '{"city":"NYC"}'}},
        ],
    },
    {"role": "tool", "tool_call_id": "call_1", "content": "BA117"},
    {"role": "tool", "tool_call_id": "call_2", "content": [{"type": "text", "text": "sunny"}]},
    {"role": "assistant", "content": "BA117, and it is sunny.", "refusal": None},
    {"role": "user", "content": "Book it."},
    {"role": "assistant", "content": [{"type": "refusal", "refusal": "I cannot book flights."}]},
]

ANTHROPIC_MESSAGES: list[dict[str, Any]] = [
    {"role": "user", "content": "Fly me to NYC."},
    {
        "role": "assistant",
        "content": [
            {"type": "thinking", "thinking": "Search first.", "signature": "c2ln"},
            {"type": "text", "text": "Searching."},
            {"type": "tool_use", "id": "toolu_1", "name": "search", "input": {"q": "NYC"}},
            {"type": "tool_use", "id": "toolu_2", "name": "weather", "input": {"city": "NYC"}},
        ],
    },
    {
        "role": "user",
        "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": "BA117"},
            {
                "type": "tool_result",
                "tool_use_id": "toolu_2",
                "content": [{"type": "text", "text": "sunny"}],
                "is_error": False,
            },
            {"type": "text", "text": "And the price?"},
        ],
    },
    {"role": "assistant", "content": [{"type": "redacted_thinking", "data": "eHl6"}, {"type": "text", "text": "420."}]},
    {
        "role": "user",
        "content": [
            {"type": "text", "text": "Here is my passport.", "cache_control": {"type": "ephemeral"}},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}},
        ],
    },
]

RESPONSES_ITEMS: list[dict[str, Any]] = [
    {"role": "developer", "content": "You book trips."},
    {
        "type": "message",
        "role": "user",
        "content": [
            {"type": "input_text", "text": "Where is this?"},
            {"type": "input_image", "image_url": "data:image/png;base64,iVBORw0KGgo=", "detail": "high"},
        ],
    },
    {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "Look it up."}]},
    {"type": "function_call", "call_id": "call_1", "name": "search", "arguments": '{"q":"NYC"}'},
    {"type": "function_call", "call_id": "call_2", "name": "weather", "arguments": "{}"},
    {"type": "function_call_output", "call_id": "call_1", "output": "BA117"},
    {"type": "function_call_output", "call_id": "call_2", "output": "sunny"},
    {
        "type": "message",
        "id": "msg_1",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": "BA117; sunny.", "annotations": []}],
    },
    {"type": "item_reference", "id": "msg_0"},
]


# ----------------------------------------------------------------------------- round trips


def test_openai_chat_round_trip(app: tether.App) -> None:
    chat = app.session("s1")
    added = chat.add_many(OPENAI_CHAT)
    assert [m.format for m in added][:3] == ["openai", "openai", "openai"]
    rendered = chat.window(max_tokens=100_000).to_openai()
    assert rendered == OPENAI_CHAT
    for message in rendered:
        sdk_valid(CHAT, message)
    assert [m.original for m in chat.messages()] == OPENAI_CHAT
    assert [m.role for m in chat.messages()] == [
        "system",
        "system",
        "user",
        "assistant",
        "tool",
        "tool",
        "assistant",
        "user",
        "assistant",
    ]
    calls = chat.messages()[3].tool_calls
    assert [(c.id, c.name, c.arguments) for c in calls] == [
        ("call_1", "search", {"q": "NYC"}),
        ("call_2", "weather", {"city": "NYC"}),
    ]
    rendered[3]["tool_calls"].clear()  # the caller's copy, not the stored message
    assert chat.window(max_tokens=100_000).to_openai() == OPENAI_CHAT


def test_anthropic_round_trip(app: tether.App) -> None:
    chat = app.session("s1")
    chat.add_many(ANTHROPIC_MESSAGES)
    messages = chat.messages()
    assert [m.format for m in messages] == ["tether", "anthropic", "anthropic", "anthropic", "anthropic"]
    assert [m.role for m in messages] == ["user", "assistant", "tool", "assistant", "user"]
    assert messages[2].answers == ("toolu_1", "toolu_2") and messages[2].content == "BA117\nsunny\nAnd the price?"
    rendered = chat.window(max_tokens=100_000).to_anthropic()
    assert rendered == {"messages": ANTHROPIC_MESSAGES}
    for message in rendered["messages"]:
        sdk_valid(ANTHROPIC, message)
    again = app.session("s2")
    again.add_many(ANTHROPIC_MESSAGES, format="anthropic")  # named explicitly: the same
    assert {m.format for m in again.messages()} == {"anthropic"}
    assert again.window(max_tokens=100_000).to_anthropic() == {"messages": ANTHROPIC_MESSAGES}


def test_openai_responses_round_trip(app: tether.App) -> None:
    chat = app.session("s1")
    chat.add_many(RESPONSES_ITEMS)
    assert [m.format for m in chat.messages()][1:] == ["openai_responses"] * 8
    rendered = chat.window(max_tokens=100_000).to_openai_responses()
    assert rendered == RESPONSES_ITEMS
    for item in rendered:
        sdk_valid(RESPONSES, item)
    # The reasoning, the two calls and their two outputs are one turn; the answer and the reference two more.
    window = chat.window(max_tokens=1, keep_last=3)
    assert [m.original.get("type") for m in window.messages] == [
        None,
        "reasoning",
        "function_call",
        "function_call",
        "function_call_output",
        "function_call_output",
        "message",
        "item_reference",
    ]


def test_the_short_form_and_plain_messages_render_identically_everywhere(app: tether.App) -> None:
    chat = app.session("s1")
    plain = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "hello"},
    ]
    chat.add_many(plain)
    window = chat.window(max_tokens=1000)
    assert window.to_openai() == plain
    assert window.to_openai_responses() == plain
    assert window.to_anthropic() == {"system": "Be brief.", "messages": plain[1:]}
    assert [m.original for m in chat.messages()] == plain and {m.format for m in chat.messages()} == {"tether"}
    note = chat.add("user", "an aside", type="aside", refusals=0)  # metadata, as before shapes existed
    assert note.format == "tether" and note.meta == {"type": "aside", "refusals": 0}


# ----------------------------------------------------------------------------- across providers


ANTHROPIC_OF_CHAT = {
    "system": "You book trips.\n\nBe brief.",
    "messages": [
        {"role": "user", "content": [{"type": "text", "text": "(conversation continues)"}]},
        {
            "role": "assistant",
            "content": [
                {"type": "tool_use", "id": "call_1", "name": "search", "input": {"q": "NYC"}},
                {"type": "tool_use", "id": "call_2", "name": "weather", "input": {"city": "NYC"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "call_1", "content": "BA117"},
                {"type": "tool_result", "tool_use_id": "call_2", "content": [{"type": "text", "text": "sunny"}]},
            ],
        },
        {"role": "assistant", "content": "BA117, and it is sunny."},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Book it."},
                {"type": "text", "text": "Look:"},
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}},
            ],
        },
    ],
}
"""What the OpenAI chat below (no audio, no refusal, an image after it) renders to for Anthropic."""


def test_openai_chat_converts_to_anthropic_and_responses(app: tether.App) -> None:
    chat = app.session("s1")
    chat.add_many([m for i, m in enumerate(OPENAI_CHAT) if i not in (2, 8)])  # no audio, no refusal
    chat.add(
        "user",
        [
            {"type": "text", "text": "Look:"},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
        ],
    )
    window = chat.window(max_tokens=100_000)
    anthropic = window.to_anthropic()
    assert anthropic == ANTHROPIC_OF_CHAT
    for message in anthropic["messages"]:
        sdk_valid(ANTHROPIC, message)
    items = window.to_openai_responses()
    assert items[0] == {"role": "developer", "content": "You book trips."}
    assert items[1] == {"role": "system", "content": [{"type": "input_text", "text": "Be brief."}]}
    assert items[2:6] == [
        {"type": "function_call", "call_id": "call_1", "name": "search", "arguments": '{"q": "NYC"}'},
        {"type": "function_call", "call_id": "call_2", "name": "weather", "arguments": '{"city":"NYC"}'},
        {"type": "function_call_output", "call_id": "call_1", "output": "BA117"},
        {"type": "function_call_output", "call_id": "call_2", "output": [{"type": "input_text", "text": "sunny"}]},
    ]
    assert items[-1] == {
        "role": "user",
        "content": [
            {"type": "input_text", "text": "Look:"},
            {"type": "input_image", "image_url": "data:image/png;base64,iVBORw0KGgo=", "detail": "auto"},
        ],
    }
    for item in items:
        sdk_valid(RESPONSES, item)


def test_anthropic_converts_to_openai_chat_and_responses(app: tether.App) -> None:
    chat = app.session("s1")
    chat.add("system", "You book trips.")
    chat.add_many([ANTHROPIC_MESSAGES[0], _without_thinking(ANTHROPIC_MESSAGES[1]), ANTHROPIC_MESSAGES[2]])
    window = chat.window(max_tokens=100_000)
    assert window.to_openai() == [
        {"role": "system", "content": "You book trips."},
        {"role": "user", "content": "Fly me to NYC."},
        {
            "role": "assistant",
            "content": [{"type": "text", "text": "Searching."}],
            "tool_calls": [
                {"id": "toolu_1", "type": "function", "function": {"name": "search", "arguments": '{"q":"NYC"}'}},
                {"id": "toolu_2", "type": "function", "function": {"name": "weather", "arguments": '{"city":"NYC"}'}},
            ],
        },
        {"role": "tool", "tool_call_id": "toolu_1", "content": "BA117"},
        {"role": "tool", "tool_call_id": "toolu_2", "content": [{"type": "text", "text": "sunny"}]},
        {"role": "user", "content": [{"type": "text", "text": "And the price?"}]},
    ]
    for message in window.to_openai():
        sdk_valid(CHAT, message)
    items = window.to_openai_responses()
    assert items[2:5] == [
        {"role": "assistant", "content": "Searching."},
        {"type": "function_call", "call_id": "toolu_1", "name": "search", "arguments": '{"q":"NYC"}'},
        {"type": "function_call", "call_id": "toolu_2", "name": "weather", "arguments": '{"city":"NYC"}'},
    ]
    for item in items:
        sdk_valid(RESPONSES, item)


def test_responses_converts_to_openai_chat_and_anthropic(app: tether.App) -> None:
    chat = app.session("s1")
    chat.add_many([item for item in RESPONSES_ITEMS if item.get("type") not in ("reasoning", "item_reference")])
    window = chat.window(max_tokens=100_000)
    openai = window.to_openai()
    assert openai[2] == {
        "role": "assistant",
        "content": None,
        "tool_calls": [  # two items, one Chat message
            {"id": "call_1", "type": "function", "function": {"name": "search", "arguments": '{"q":"NYC"}'}},
            {"id": "call_2", "type": "function", "function": {"name": "weather", "arguments": "{}"}},
        ],
    }
    assert [m["role"] for m in openai] == ["developer", "user", "assistant", "tool", "tool", "assistant"]
    assert openai[1]["content"][1] == {
        "type": "image_url",
        "image_url": {"url": "data:image/png;base64,iVBORw0KGgo=", "detail": "high"},
    }
    for message in openai:
        sdk_valid(CHAT, message)
    anthropic = window.to_anthropic()
    assert [m["role"] for m in anthropic["messages"]] == ["user", "assistant", "user", "assistant"]
    assert [b["type"] for b in anthropic["messages"][1]["content"]] == ["tool_use", "tool_use"]
    assert [b["tool_use_id"] for b in anthropic["messages"][2]["content"]] == ["call_1", "call_2"]
    for message in anthropic["messages"]:
        sdk_valid(ANTHROPIC, message)


def _without_thinking(message: dict[str, Any]) -> dict[str, Any]:
    return {**message, "content": [b for b in message["content"] if "thinking" not in b["type"]]}


@pytest.mark.parametrize(
    ("messages", "render", "expected"),
    [
        (ANTHROPIC_MESSAGES[:2], "to_openai", "message 3: an Anthropic 'thinking' block has no OpenAI Chat form"),
        (
            ANTHROPIC_MESSAGES[:4],
            "to_openai_responses",
            "message 3: an Anthropic 'thinking' block has no OpenAI Responses form",
        ),
        (OPENAI_CHAT[:3], "to_anthropic", "message 4: an OpenAI Chat 'input_audio' part has no Anthropic form"),
        (
            OPENAI_CHAT[:3],
            "to_openai_responses",
            "message 4: an OpenAI Chat 'input_audio' part has no OpenAI Responses form",
        ),
        (OPENAI_CHAT[8:], "to_anthropic", "message 2: an OpenAI Chat 'refusal' part has no Anthropic form"),
        (RESPONSES_ITEMS[2:4], "to_openai", "message 2: an OpenAI Responses 'reasoning' item has no OpenAI Chat form"),
        (
            RESPONSES_ITEMS[8:],
            "to_anthropic",
            "message 2: an OpenAI Responses 'item_reference' item has no Anthropic form",
        ),
        (
            [{"role": "system", "content": [{"type": "input_image", "image_url": "https://x/y.png", "detail": "low"}]}],
            "to_anthropic",
            "message 2: an OpenAI Responses 'input_image' part in a system message has no Anthropic form",
        ),
        (
            [
                ANTHROPIC_MESSAGES[1] | {"content": ANTHROPIC_MESSAGES[1]["content"][2:3]},
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "tool_result",
                            "tool_use_id": "toolu_1",
                            "content": [{"type": "image", "source": {"type": "url", "url": "https://x/y.png"}}],
                        }
                    ],
                },
            ],
            "to_openai",
            "message 3: an Anthropic 'image' block inside a tool result has no OpenAI Chat form",
        ),
        (
            [
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "[1, 2]"}}],
                }
            ],
            "to_anthropic",
            "message 2: an OpenAI Chat tool call 'c1' has arguments that are not a JSON object",
        ),
    ],
)
def test_what_has_no_form_in_another_provider_is_refused(
    app: tether.App, messages: list[dict[str, Any]], render: str, expected: str
) -> None:
    chat = app.session("s1")
    chat.add_many(messages)
    window = chat.window(max_tokens=100_000)
    with pytest.raises(tether.InvalidInputError) as info:
        getattr(window, render)()
    assert str(info.value).startswith(expected)


# ----------------------------------------------------------------------------- validation


@pytest.mark.parametrize(
    ("message", "format", "expected"),
    [
        (
            {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function"}]},
            None,
            "tool_calls[0] has no 'function'; expected {'id': str, 'type': 'function', 'function'",
        ),
        (
            {
                "role": "assistant",
                "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": {"a": 1}}}],
            },
            None,
            "tool_calls[0].function.arguments (a JSON string, not a dict) is dict; expected a string",
        ),
        ({"role": "user", "content": [{"type": "image_url"}]}, None, "content[0] has no 'image_url' object"),
        (
            {"role": "user", "content": [{"type": "refusal", "refusal": "no"}]},
            None,
            "content[0] has type 'refusal', which an OpenAI Chat user message cannot hold",
        ),
        (
            {"role": "user", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": {}}]},
            None,
            "content[0] is a 'tool_use' block in a user message",
        ),
        (
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": "x"}]},
            None,
            "content[0].input is str; expected a dict",
        ),
        ({"role": "system", "content": "x"}, "anthropic", "role 'system' is not an Anthropic message role"),
        (
            {"type": "function_call", "name": "f", "arguments": "{}"},
            None,
            "function_call.call_id is NoneType; expected a string",
        ),
        (
            {"type": "function_call_output", "call_id": "c", "output": 3},
            None,
            "function_call_output.output is int; expected",
        ),
        (
            {"role": "user", "content": [{"type": "text", "text": "x"}], "channel": "web"},
            None,
            "unexpected key(s) ['channel'] in an OpenAI Chat user message",
        ),
        ({"role": "user", "content": [{"type": "mystery"}]}, None, "cannot tell which provider's shape"),
        ({"content": "x"}, None, "a message needs a 'role'"),
        ({"role": "function", "name": "f", "content": "x"}, None, "the deprecated OpenAI 'function' role"),
        ({"role": "user", "content": "x"}, "gemini", "format must be one of tether, openai"),
        ({"role": "tool", "content": "x"}, "openai", "tool_call_id (the id of the call this answers) is NoneType"),
    ],
)
def test_malformed_messages_are_refused_before_anything_is_written(
    app: tether.App, message: dict[str, Any], format: str | None, expected: str
) -> None:
    chat = app.session("s1")
    with pytest.raises(tether.InvalidInputError) as info:
        chat.add_many([{"role": "user", "content": "fine"}, message], format=format)
    assert expected in str(info.value)
    assert str(info.value).startswith("messages[1]: ") or format == "gemini"  # which message was wrong
    assert chat.messages() == []  # all or nothing
    with pytest.raises(tether.InvalidInputError) as alone:
        chat.add(message, format=format)
    assert str(alone.value).startswith(expected)  # one message: no index
    assert chat.messages() == []


# ----------------------------------------------------------------------------- the window and compaction


def test_window_keeps_calls_and_results_together_in_every_shape(app: tether.App) -> None:
    chat = app.session("s1")
    chat.add("system", "You book trips.")
    for _ in range(2):
        for shape in (ANTHROPIC_MESSAGES[:3], OPENAI_CHAT[3:7], RESPONSES_ITEMS[2:8]):
            chat.add_many(shape)
    for budget in (1, 200, 400, 800, 100_000):
        window = chat.window(max_tokens=budget, keep_last=1)
        called: set[str] = set()
        for m in window.messages:
            called |= {c.id for c in m.tool_calls}
            assert set(m.answers) <= called
        assert window.messages[-1].seq == chat.messages()[-1].seq
        if window.tokens > budget:
            assert len(tether.conversation.turns([m for m in window.messages if m.role != "system"])) == 1


def test_images_count_as_a_fixed_estimate(app: tether.App) -> None:
    chat = app.session("s1", counter=tether.EstimateCounter())
    low, other = chat.add_many(
        [
            {
                "role": "user",
                "content": [{"type": "image_url", "image_url": {"url": "https://x/a.png", "detail": "low"}}],
            },
            {"role": "user", "content": [{"type": "image", "source": {"type": "url", "url": "https://x/a.png"}}]},
        ]
    )
    counter = tether.EstimateCounter()
    assert tether.conversation.message_tokens(low, counter) == 85 + 4
    assert tether.conversation.message_tokens(other, counter) == 765 + 4
    assert chat.window(max_tokens=10_000).tokens == 85 + 765 + 8


def test_compaction_folds_provider_shapes_and_keeps_the_originals(app: tether.App) -> None:
    chat = app.session("s1")
    for _ in range(3):
        chat.add_many(ANTHROPIC_MESSAGES)
        chat.add_many(RESPONSES_ITEMS[1:8])
    before = chat.messages()
    summary = chat.compact(keep_last=2)
    assert summary is not None and "Fly me to NYC" in summary.text
    assert chat.messages() == before
    window = chat.window(max_tokens=100_000, keep_last=2)
    assert window.messages[0].content.startswith("Summary of the earlier")
    assert all(m.seq > summary.covers_to for m in window.messages[1:])
    assert [m.original for m in app.session("s1").messages()] == [m.original for m in before]  # reopened


# ----------------------------------------------------------------------------- the seams and stored records
