"""Tokens and cost in the record: read from the providers' result shapes or reported with ctx.usage,
counted once however often a task replays, and a fork's totals split into inherited and its own."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import tether
from tether.errors import InvalidInputError
from tether.telemetry import Usage, parse_since, usage_of

OPENAI_CHAT = {"object": "chat.completion", "model": "gpt-4o", "usage": {"prompt_tokens": 11, "completion_tokens": 7}}
RESPONSES = {"object": "response", "model": "gpt-4.1", "usage": {"input_tokens": 5, "output_tokens": 2}}
ANTHROPIC = {
    "type": "message",
    "model": "claude-sonnet",
    "usage": {"input_tokens": 10, "output_tokens": 3, "cache_read_input_tokens": 100, "cache_creation_input_tokens": 1},
}
GEMINI = {"model_version": "gemini-2.5", "usage_metadata": {"prompt_token_count": 8, "candidates_token_count": 4}}
GEMINI_CAMEL = {"usageMetadata": {"promptTokenCount": 8, "candidatesTokenCount": 4, "thoughtsTokenCount": 6}}


@pytest.mark.parametrize(
    ("result", "expected"),
    [
        (OPENAI_CHAT, (11, 7, "gpt-4o", "openai")),
        (RESPONSES, (5, 2, "gpt-4.1", "openai")),
        (ANTHROPIC, (111, 3, "claude-sonnet", "anthropic")),  # cache reads and writes are input too
        (GEMINI, (8, 4, "gemini-2.5", "gcp.gemini")),
        (GEMINI_CAMEL, (8, 10, None, "gcp.gemini")),  # thinking tokens are output
    ],
)
def test_usage_read_from_each_providers_shape(result: dict, expected: tuple) -> None:
    found = usage_of(result)
    assert found is not None
    usage, model, provider = found
    assert (usage.input_tokens, usage.output_tokens, model, provider) == expected


@pytest.mark.parametrize("result", [None, "text", 3, [1], {"usage": "lots"}, {"model": "m"}, {"usage": {"tokens": 3}}])
def test_no_usage_where_there_is_none(result: object) -> None:
    assert usage_of(result) is None


@pytest.fixture
def app() -> Iterator[tether.App]:
    app = tether.App("memory://")
    yield app
    app.close()


def test_a_forked_and_resumed_task_counts_each_call_once(app: tether.App) -> None:
    model_calls: list[str] = []

    @app.tool
    def model(prompt: str) -> dict:
        model_calls.append(prompt)
        return {**OPENAI_CHAT, "id": prompt}

    @app.task
    def chat(ctx: tether.TaskContext) -> str:
        ctx.call(model, "first")
        ctx.usage(cost=0.25)  # the price of the call just made; its tokens stay the result's
        ctx.wait_for_input("more")
        ctx.call(model, "second")
        ctx.usage(input_tokens=1, output_tokens=1, cost=0.5, model="local")  # a call with no usage of its own
        return "done"

    handle = app.run(chat, task_id="t1", user_id="ada")
    assert handle.status.value == "awaiting_input"
    app.send_input("t1", "more", True)
    app.resume("t1")  # replays the first call and its report: neither is recorded again
    app.resume("t1")  # and a run of a finished task adds nothing either
    assert model_calls == ["first", "second"]
    own = app.usage("t1").own
    assert (own.input_tokens, own.output_tokens, own.cost, own.calls) == (12, 8, 0.75, 2)

    asked = next(e.seq for e in app.history("t1") if e.type == "InputRequested")
    fork = app.fork("t1", at=asked, new_id="f1")
    app.send_input(fork.task_id, "more", True)
    app.resume(fork.task_id)
    forked = app.usage("f1")
    assert (forked.inherited.input_tokens, forked.inherited.cost, forked.inherited.calls) == (11, 0.25, 1)
    assert (forked.own.input_tokens, forked.own.cost, forked.own.calls) == (1, 0.5, 1)
    assert [c.inherited for c in forked.calls] == [True, False]
    assert model_calls == ["first", "second", "second"]

    # Over the tenant, a fork's inherited part is its parent's, counted there once.
    report = app.usage(by="task")
    assert report.total == Usage(13, 9, 1.25, 3)
    assert report.groups["t1"].total_tokens == 20 and report.groups["f1"].total_tokens == 2
    assert app.usage(by="user").groups["ada"].total_tokens == 22  # the fork is the same user's
    assert app.usage(user_id="nobody").total.calls == 0
    assert app.usage(by="model").groups["gpt-4o"].total_tokens == 18
    assert app.usage(since="1h").total.calls == 3 and app.usage(since=4_102_444_800).total.calls == 0


def test_ctx_usage_refuses_what_is_not_a_count(app: tether.App) -> None:
    @app.task
    def bad(ctx: tether.TaskContext, field: str, value: object) -> None:
        ctx.usage(**{field: value})

    for field, value in [("input_tokens", -1), ("output_tokens", 1.5), ("cost", "free"), ("cost", True)]:
        failure = app.run(bad, field, value).state.failure
        assert failure is not None and failure.exception_type == "InvalidInputError"
        assert failure.message.startswith(f"ctx.usage: {field} must be")
    failure = app.run(bad, "model", "m").state.failure
    assert failure is not None and "needs input_tokens, output_tokens or cost" in failure.message


def test_since_and_by_say_what_they_take(app: tether.App) -> None:
    assert parse_since("7d", now=1_000_000.0) == 1_000_000.0 - 7 * 86400
    assert parse_since("2026-01-01") == 1767225600.0
    with pytest.raises(InvalidInputError, match="duration back from now"):
        parse_since("last week")
    with pytest.raises(InvalidInputError, match="grouped by one of task, type, user, session, model, day"):
        app.usage(by="colour")
