"""The conversation inside a task (``ctx.session``): exactly-once appends, replayed reads,
copy-on-write forks and rewinds, and what history and show say about it."""
# mypy: disable-error-code="arg-type,union-attr"

from __future__ import annotations

from typing import Any

import pytest

import tether
from tether.testing import dump_database


class Stop(BaseException):
    """Stands for a crash: the process dies here."""


@pytest.fixture
def app(store_url: str) -> tether.App:
    return tether.App(store_url)


def contents(app: tether.App, session_id: str) -> list[tuple[str, str]]:
    return [(m.role, m.content) for m in app.session(session_id).messages()]


def test_a_session_is_made_for_a_task_that_names_none(app: tether.App) -> None:
    @app.task
    def chat(ctx: tether.TaskContext) -> str:
        ctx.session.add("user", "hi")
        return ctx.session.id

    run = app.run(chat, task_id="t1")
    assert run.output == "t1" and run.state.session_id == "t1"
    assert contents(app, "t1") == [("user", "hi")]


def test_appends_happen_once_however_often_the_task_is_resumed(app: tether.App) -> None:
    crash = {"at": 1}
    seen: list[int] = []

    @app.task
    def loop(ctx: tether.TaskContext) -> int:
        for turn in range(3):
            ctx.session.add("user", f"question {turn}")
            seen.append(len(ctx.session.messages()))
            if turn == crash["at"]:
                raise Stop
            ctx.session.add("assistant", f"answer {turn}")
        return len(ctx.session.messages())

    app.session("s").add("system", "be brief")
    with pytest.raises(Stop):
        app.run(loop, task_id="t", session_id="s")
    crash["at"] = -1
    first_run = list(seen)
    seen.clear()
    assert app.resume("t").output == 7
    # The resumed run saw, at each read, what the first run saw; then went on.
    assert seen[: len(first_run)] == first_run == [2, 4]
    assert contents(app, "s") == [
        ("system", "be brief"),
        ("user", "question 0"),
        ("assistant", "answer 0"),
        ("user", "question 1"),
        ("assistant", "answer 1"),
        ("user", "question 2"),
        ("assistant", "answer 2"),
    ]


@pytest.mark.tether_requires("dump")
def test_outside_messages_show_from_the_next_read_and_replay_exactly(app: tether.App, store_url: str) -> None:
    reads: list[list[str]] = []

    @app.task
    def support(ctx: tether.TaskContext) -> int:
        reads.append([m.content for m in ctx.session.messages()])
        ctx.wait_for_input("go")
        reads.append([m.content for m in ctx.session.messages()])
        ctx.session.add("assistant", "on it")
        return len(reads[-1])

    app.session("s").add("user", "my order is late")
    app.run(support, task_id="t", session_id="s")
    app.session("s").add("user", "any news?")  # a person writes while the task waits
    app.send_input("t", "go", True)
    assert reads == [["my order is late"]]
    reads.clear()
    assert app.resume("t").output == 2
    assert reads == [["my order is late"], ["my order is late", "any news?"]]
    app.session("s").add("user", "thanks")  # after the end: a replay must not see it
    reads.clear()
    before = dump_database(store_url, app.store)
    report = app.replay("t")
    assert report.clean, report
    assert reads == [["my order is late"], ["my order is late", "any news?"]]
    assert dump_database(store_url, app.store) == before


@pytest.mark.tether_requires("dump")
def test_replay_of_a_task_that_stopped_mid_conversation_writes_nothing(app: tether.App, store_url: str) -> None:
    @app.task
    def chat(ctx: tether.TaskContext) -> None:
        ctx.session.add("user", "one")
        ctx.session.messages()
        raise Stop

    with pytest.raises(Stop):
        app.run(chat, task_id="t")
    before = dump_database(store_url, app.store)
    assert app.replay("t").clean
    assert dump_database(store_url, app.store) == before


def _looping_agent(app: tether.App, model_saw: list[list[str]]) -> Any:
    @app.tool(readonly=True)
    def model(messages: list[str]) -> str:
        return f"reply to {messages[-1]}"

    @app.task
    def agent(ctx: tether.TaskContext, turns: int) -> int:
        ctx.plan([f"turn {t}" for t in range(turns)])
        for turn in range(turns):
            with ctx.step(f"turn {turn}"):
                ctx.session.add("user", f"q{turn}")
                seen = [m.content for m in ctx.session.messages()]
                model_saw.append(seen)
                ctx.session.add("assistant", ctx.call(model, seen))
        return len(ctx.session.messages())

    return agent


def test_fork_sees_the_conversation_at_the_fork_point_and_leaves_the_parent_alone(app: tether.App) -> None:
    model_saw: list[list[str]] = []
    agent = _looping_agent(app, model_saw)
    app.session("s").add("system", "sys")
    assert app.run(agent, 3, task_id="p", session_id="s").output == 7
    parent_messages = contents(app, "s")
    # Fork right after turn 0 ended.
    at = next(r.seq for r in app.log.events("p") if type(r.event).__name__ == "StepCompleted")
    fork = app.fork("p", at=at, new_id="f")
    assert fork.state.session_id == "s@f"
    app.session("s@f").add("user", "said to the fork only")
    model_saw.clear()
    assert app.resume("f").output == 8
    # Turn 0 replayed as it was; then only pre-fork messages and the fork's own.
    assert model_saw[0] == ["sys", "q0"]
    assert model_saw[1] == ["sys", "q0", "reply to q0", "said to the fork only", "q1"]
    assert contents(app, "s") == parent_messages  # the parent's conversation is untouched
    branch_messages = contents(app, "s@f")[:5]
    assert branch_messages == [
        ("system", "sys"),
        *parent_messages[1:3],
        ("user", "said to the fork only"),
        ("user", "q1"),
    ]
    # Copy-on-write: the fork's branch is one row and one event, not a copy of the messages.
    branch = app.store.get_task(app.tenant, "session:s@f")
    assert branch is not None and branch.parent_id == "session:s"


def test_rewind_branches_the_conversation_too(app: tether.App) -> None:
    model_saw: list[list[str]] = []
    agent = _looping_agent(app, model_saw)
    app.run(agent, 2, task_id="p", session_id="s")
    parent_messages = contents(app, "s")
    at = next(r.seq for r in app.log.events("p") if type(r.event).__name__ == "StepCompleted")
    rewound = app.rewind("p", to=at)
    assert rewound.state.session_id == "s@p.1"
    model_saw.clear()
    assert app.resume("p").output == 4
    assert model_saw == [["q0"], ["q0", "reply to q0", "q1"]]
    assert contents(app, "s") == parent_messages


def test_steps_history_and_show_name_the_messages_a_step_added(app: tether.App) -> None:
    agent = _looping_agent(app, [])
    app.run(agent, 2, task_id="t")
    state = app.state("t")
    assert [len(step.messages) for step in state.plan] == [2, 2]
    summaries = [h.summary for h in app.history("t") if h.type == "SessionWritten"]
    assert summaries and all("conversation" in s for s in summaries), summaries


def test_a_closed_session_refuses_the_task_append(app: tether.App) -> None:
    app.session("s").add("user", "hi")
    app.session("s").close()

    @app.task
    def chat(ctx: tether.TaskContext) -> None:
        ctx.session.add("assistant", "hello")

    run = app.run(chat, task_id="t", session_id="s")
    assert run.status is tether.Status.FAILED and "closed" in run.failure.message


def test_bad_messages_are_refused_before_anything_is_written(app: tether.App) -> None:
    @app.task
    def chat(ctx: tether.TaskContext) -> None:
        ctx.session.add_many([{"role": "user", "content": "fine"}, {"role": "wizard", "content": "no"}])

    run = app.run(chat, task_id="t")
    assert run.status is tether.Status.FAILED and "role" in run.failure.message
    assert app.store.get_task(app.tenant, "session:t") is None or app.session("t").messages() == []


async def _async_chat(ctx: tether.AsyncTaskContext) -> int:
    ctx.session.add("user", "async hi")
    return len(ctx.session.window(max_tokens=100).to_openai())


def test_async_tasks_use_the_same_conversation(app: tether.App) -> None:
    chat = app.task(_async_chat)
    assert app.run(chat, task_id="a").output == 1
    assert app.replay("a").clean


def test_compaction_inside_a_task_happens_once_and_replays_without_the_summarizer(app: tether.App) -> None:
    summarized: list[int] = []
    crash = {"on": True}

    def summarizer(messages: list[Any], previous: str | None) -> str:
        summarized.append(len(messages))
        return f"{len(messages)} messages"

    @app.task
    def chat(ctx: tether.TaskContext) -> str:
        for i in range(8):
            ctx.session.add("user" if i % 2 == 0 else "assistant", f"m{i}")
        summary = ctx.session.compact(summarizer, keep_last=1)
        nothing = ctx.session.compact(summarizer, keep_last=1)  # nothing left to fold
        if crash["on"]:
            raise Stop
        assert summary is not None and nothing is None
        return summary.text

    with pytest.raises(Stop):
        app.run(chat, task_id="t")
    assert summarized == [7]
    crash["on"] = False
    assert app.resume("t").output == "7 messages"
    assert summarized == [7]  # replayed: the summarizer is not asked again
    assert [s.text for s in app.session("t").summaries()] == ["7 messages"]
    assert app.replay("t").clean and summarized == [7]


def test_the_task_conversation_kept_past_its_run_says_where_to_read_it(store_url: str) -> None:
    app = tether.App(store_url)
    kept: list[Any] = []

    @app.task
    def chat(ctx: tether.TaskContext) -> int:
        kept.append(ctx.session)
        ctx.session.add("user", "hi")
        return len(ctx.session.messages())

    assert app.run(chat, task_id="k").output == 1
    with pytest.raises(tether.TetherError, match=r"used after its run ended.*app.session\('k'\)"):
        kept[0].messages()
    assert [m.content for m in app.session("k").messages()] == ["hi"]


def test_changed_code_keeps_the_conversation_a_task_in_flight_wrote(app: tether.App) -> None:
    """docs/agent-loop.md: an append replays by position and number of messages. A reworded prompt
    leaves a task in flight with the prompt it started with (the model, shown the recorded window,
    is not asked again); an append of another number of messages is a divergence."""
    prompt = {"text": "You are a travel agent.", "extra": False}
    asked: list[list[str]] = []

    @app.tool(readonly=True)
    def model(messages: list[dict[str, Any]]) -> str:
        asked.append([m["content"] for m in messages])
        return "Where to?"

    @app.task
    def chat(ctx: tether.TaskContext) -> str:
        first = [{"role": "system", "content": prompt["text"]}, {"role": "user", "content": "Hi"}]
        ctx.session.add_many(first + ([{"role": "user", "content": "Hurry"}] if prompt["extra"] else []))
        reply = ctx.call(model, ctx.session.window(max_tokens=1_000).to_openai())
        ctx.session.add("assistant", reply)
        return str(ctx.wait_for_input("next"))

    assert app.run(chat, task_id="p").status is tether.Status.AWAITING_INPUT
    app.send_input("p", "next", "done")
    prompt["text"] = "You are a careful travel agent."  # the next deploy rewords the prompt
    assert app.resume("p").output == "done"
    assert contents(app, "p")[0] == ("system", "You are a travel agent.") and len(asked) == 1
    prompt["extra"] = True  # and appends one message more where the task appended two
    report = app.replay("p")
    assert not report.clean and report.divergence is not None
    assert "append to the conversation (#1: system, user, user)" in str(report.divergence)
