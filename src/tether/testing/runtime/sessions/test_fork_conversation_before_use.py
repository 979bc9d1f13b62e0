"""A fork or a rewind made before its task first used its conversation still gets a conversation of its
own: its appends never land in its parent's (a named, shared session) or in the branch set aside."""
# mypy: disable-error-code="no-any-return"

from __future__ import annotations

import tether


def _chat(app: tether.App) -> None:
    @app.task
    def chat(ctx: tether.TaskContext, question: str) -> str:
        ctx.session.add("user", question)
        ctx.session.add("assistant", "Paris.")
        return "Paris."


def _contents(app: tether.App, session_id: str) -> list[str]:
    return [m.content for m in app.session(session_id).messages()]


def test_a_fork_before_the_first_append_writes_to_a_conversation_of_its_own(store_url: str) -> None:
    app = tether.App(store_url)
    _chat(app)
    app.run("chat", "Capital of France?", task_id="c1", session_id="support-1")
    app.fork("c1", at=1, new_id="c1-fork")  # at the task's creation: before its first append
    assert app.resume("c1-fork").output == "Paris."
    assert _contents(app, "support-1") == ["Capital of France?", "Paris."]  # the parent's, untouched
    own = app.state("c1-fork").session_id
    assert own == "support-1@c1-fork"
    assert _contents(app, own) == ["Capital of France?", "Paris."]
    assert app.replay("c1-fork").clean


def test_a_rewind_before_the_first_append_leaves_the_set_aside_conversation_alone(store_url: str) -> None:
    app = tether.App(store_url)
    _chat(app)
    app.run("chat", "Capital of Spain?", task_id="c2")  # its own conversation, named after it
    app.rewind("c2", to=1)
    assert app.resume("c2").output == "Paris."
    assert app.state("c2~1").session_id == "c2"
    assert _contents(app, "c2") == ["Capital of Spain?", "Paris."]  # the set-aside branch's, untouched
    own = app.state("c2").session_id
    assert own is not None and own != "c2"
    assert _contents(app, own) == ["Capital of Spain?", "Paris."]
    assert app.replay("c2").clean


def test_a_fork_of_a_task_that_never_used_a_conversation_makes_none(store_url: str) -> None:
    app = tether.App(store_url)

    @app.task
    def plain(ctx: tether.TaskContext) -> int:
        return 1

    app.run(plain, task_id="p")
    app.fork("p", at=1, new_id="p-fork")
    assert app.state("p-fork").session_id is None
    rows = app.store.list_tasks(app.tenant, tether.store.TaskFilter(internal=True), limit=10)
    assert [r for r in rows if r.type == "tether.session"] == []


def test_a_fork_or_rewind_before_a_named_conversation_exists_makes_it_the_new_tasks_own(store_url: str) -> None:
    """The task names a shared conversation that nobody has written yet (it waits before its first
    append): a fork and a rewind made then are refused nothing, and each later writes a branch of its own."""
    app = tether.App(store_url)

    @app.task
    def ask_first(ctx: tether.TaskContext) -> str:
        answer = ctx.wait_for_input("go")
        ctx.session.add("user", answer)
        return answer

    for task_id in ("w1", "w2"):
        app.run(ask_first, task_id=task_id, session_id="shared-9")
    assert app.store.get_task(app.tenant, "session:shared-9") is None  # not made yet
    fork = app.fork("w1", at=1, new_id="w1-fork")
    rewound = app.rewind("w2", to=1)
    for task_id in (fork.task_id, rewound.task_id):
        app.send_input(task_id, "go", f"from {task_id}")
        assert app.resume(task_id).output == f"from {task_id}"
        own = app.state(task_id).session_id
        assert own is not None and own != "shared-9"
        assert _contents(app, own) == [f"from {task_id}"]
    assert app.store.get_task(app.tenant, "session:shared-9") is None  # neither wrote to the shared one


def test_a_fork_made_before_its_parent_named_a_conversation_is_listed_by_its_own(store_url: str) -> None:
    """A task started without a session is listed by the one made for it once it uses it; a fork made
    before that use gets a conversation of its own, and is listed by that one, not the parent's."""
    app = tether.App(store_url)
    _chat(app)
    app.run("chat", "Capital of Italy?", task_id="c3")  # uses the conversation made for it: "c3"
    app.fork("c3", at=1, new_id="c3-fork")
    app.resume("c3-fork")
    own = app.state("c3-fork").session_id
    assert own is not None and own != "c3"

    def listed(session_id: str) -> list[str]:
        return sorted(t.task_id for t in app.list_tasks(session_id=session_id))

    assert listed("c3") == ["c3"]
    assert listed(own) == ["c3-fork"]
