"""The conversation inside a task, at a crash injected inside tether: a crash between the append and
its record does not append twice (the kit's tether.testing.runtime.sessions.test_task_session checks
the rest on every backend)."""

from __future__ import annotations

from typing import Any

import pytest

import tether
from tether.runtime import session as task_session
from tether.testing.runtime.sessions.test_task_session import Stop, contents


@pytest.fixture
def app(store_url: str) -> tether.App:
    return tether.App(store_url)


def test_a_crash_between_the_append_and_its_record_does_not_append_twice(
    app: tether.App, monkeypatch: pytest.MonkeyPatch
) -> None:
    original = task_session.TaskSession._append
    crash = {"on": True}

    def append_then_die(self: Any, events: Any, origin: str) -> Any:
        written = original(self, events, origin)
        if crash["on"]:
            raise Stop  # the messages are in the session; the task has not recorded them
        return written

    monkeypatch.setattr(task_session.TaskSession, "_append", append_then_die)

    @app.task
    def reply(ctx: tether.TaskContext) -> int:
        ctx.session.add_many([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}])
        return len(ctx.session.messages())

    with pytest.raises(Stop):
        app.run(reply, task_id="t")
    assert len(app.session("t").messages()) == 2
    crash["on"] = False
    assert app.resume("t").output == 2
    assert contents(app, "t") == [("user", "hi"), ("assistant", "hello")]
    written = [r.event for r in app.log.events("t") if type(r.event).__name__ == "SessionWritten"]
    assert [(w.first, w.last, w.roles) for w in written] == [(2, 3, ["user", "assistant"])]
