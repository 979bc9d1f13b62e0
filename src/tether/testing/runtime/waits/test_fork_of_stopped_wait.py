"""A fork (or rewind) at the end of a task that stopped waiting — cancelled, or set aside by a rewind,
while it waited — waits on its question again: listed with what it waits for, answerable, replayable."""

from __future__ import annotations

import pytest

import tether


@pytest.mark.parametrize("stopped", ["cancelled", "set_aside"])
def test_a_fork_of_a_task_that_stopped_waiting_asks_its_question_again(store_url: str, stopped: str) -> None:
    app = tether.App(store_url)

    @app.task
    def chat(ctx: tether.TaskContext) -> str:
        ctx.session.add("user", "hi")
        return str(ctx.wait_for_input("reply", prompt="say something"))

    app.run(chat, task_id="c1")
    source = "c1"
    if stopped == "cancelled":
        app.cancel("c1")
    else:
        app.rewind("c1", to=app.state("c1").version)
        source = "c1~1"
    app.fork(source, at=app.state(source).version, new_id="again")
    run = app.resume("again")
    assert run.status is tether.Status.AWAITING_INPUT
    assert run.state.waiting is not None and run.state.waiting.key == "reply"
    assert run.state.waiting.prompt == "say something"
    again = app.resume("again")  # resumed once more, unanswered: the question is not asked a third time
    assert [e.event.event_type for e in app.history("again")].count("InputRequested") == 2
    assert again.state.waiting is not None and again.state.waiting.key == "reply"
    app.send_input("again", "reply", "hello")
    assert app.resume("again").output == "hello"
    assert app.replay("again").clean
