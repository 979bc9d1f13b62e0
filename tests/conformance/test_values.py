"""Values round-trip identically on every backend, or are refused with the same error everywhere."""

from __future__ import annotations

import math

import pytest

import tether

STRANGE = {"nul": "a\0b", "key\0": ["\0", "\\u0000", "x\0"], "nested": {"deep": "\0\0"}}


def _app(url: str) -> tether.App:
    app = tether.App(url)

    @app.tool
    def echo(value: object) -> object:
        return value

    @app.task
    def relay(ctx: tether.TaskContext, value: object) -> object:
        return ctx.call(echo, value)

    return app


def test_nul_characters_round_trip(store_url: str) -> None:
    app = _app(store_url)
    run = app.run("relay", STRANGE)
    assert run.status is tether.Status.COMPLETED and run.output == STRANGE
    elsewhere = tether.App(store_url) if not store_url.startswith("memory") else app
    state = tether.TaskLog(app.store).load(run.task_id)
    assert state.inputs == {"value": STRANGE} and state.output == STRANGE
    assert state.calls[0].result == STRANGE and state.calls[0].status == "completed"
    chat = app.session("s1")
    chat.add("user", "a\0b")
    assert [m.content for m in elsewhere.session("s1").messages()] == ["a\0b"]
    app.close()


def test_a_nul_tool_result_does_not_fail_the_task(store_url: str) -> None:
    app = _app(store_url)
    run = app.run("relay", "a\0b")
    assert (run.status, run.output, run.failure) == (tether.Status.COMPLETED, "a\0b", None)
    app.close()
