"""Sessions, windows, compaction, renderers, user state and fresh reads, on every backend."""
# mypy: disable-error-code="index,unused-ignore"

from __future__ import annotations

import itertools
from typing import Any

import pytest
from pydantic import BaseModel

import tether


@pytest.fixture
def app(store_url: str) -> tether.App:
    return tether.App(store_url)


def _chat(session: tether.Session, turns: int) -> None:
    for i in range(turns):
        session.add("user", f"Question {i}: where should I fly? Some more words.")
        session.add("assistant", "Let me look.", tool_calls=[{"id": f"c{i}", "name": "search", "arguments": {"q": i}}])
        session.add("tool", f"results for {i}", tool_call_id=f"c{i}")
        session.add("assistant", f"Answer {i}. Fly to NYC.")


def test_messages_are_appended_in_order_and_listed(app: tether.App) -> None:
    chat = app.session("s1", user_id="ada")
    first = chat.add("system", "You book trips.")
    added = chat.add_many(
        [{"role": "user", "content": "hi", "channel": "web"}, {"role": "assistant", "content": "hello"}]
    )
    assert [m.seq for m in [first, *added]] == [2, 3, 4]
    assert added[0].meta == {"channel": "web"}
    assert [m.content for m in chat.messages()] == ["You book trips.", "hi", "hello"]
    assert [m.content for m in chat.messages(since=2, limit=1)] == ["hi"]
    assert app.session("s1").messages() == chat.messages()  # reopened: the same conversation
    popped = chat.pop()
    assert popped is not None and popped.content == "hello"
    assert [m.content for m in chat.messages()] == ["You book trips.", "hi"]
    chat.clear()
    assert chat.messages() == [] and chat.window(100).messages == ()
    chat.close()
    with pytest.raises(tether.InvalidInputError, match="closed"):
        chat.add("user", "anyone?")
    assert [s.closed for s in app.sessions(user_id="ada")] == [True]


def test_bad_messages_are_refused(app: tether.App) -> None:
    chat = app.session("s1")
    with pytest.raises(tether.InvalidInputError, match="role"):
        chat.add("robot", "beep")  # type: ignore[arg-type]
    with pytest.raises(tether.InvalidInputError, match="tool_call_id"):
        chat.add("tool", "result")
    with pytest.raises(tether.InvalidInputError, match="tool_calls"):
        chat.add("user", "x", tool_calls=[{"id": "1", "name": "f"}])
    with pytest.raises(tether.InvalidInputError):
        chat.add_many([{"role": "user", "content": "ok"}, {"role": "user", "content": {"not": "text"}}])
    assert chat.messages() == []  # all or nothing


def test_sessions_are_listed_by_user_and_scoped_by_tenant(store_url: str) -> None:
    store = tether.open_store(store_url)
    acme, globex = tether.App(store, tenant="acme"), tether.App(store, tenant="globex")
    acme.session("a1", user_id="ada").add("user", "hi")
    acme.session("a2", user_id="bob")
    globex.session("a1", user_id="ada")
    assert {s.session_id for s in acme.sessions()} == {"a1", "a2"}
    assert [s.session_id for s in acme.sessions(user_id="ada")] == ["a1"]
    assert globex.session("a1").messages() == []
    assert acme.list_tasks() == []  # sessions are not tasks


def test_delete_session_refuses_orphans_unless_cascading(app: tether.App) -> None:
    @app.task
    def t(ctx: tether.TaskContext) -> int:
        return 1

    app.session("s1").add("user", "hi")
    app.run(t, session_id="s1", task_id="task-1")
    with pytest.raises(tether.TetherError, match="1 task"):
        app.delete_session("s1")
    assert app.delete_session("s1", cascade=True) == 1
    assert app.sessions() == [] and app.list_tasks() == []
    app.session("s2").add("user", "hi")
    assert app.delete_session("s2") == 0


def test_window_keeps_budget_turns_and_tool_pairs(app: tether.App) -> None:
    chat = app.session("s1")
    chat.add("system", "You book trips.")
    _chat(chat, 10)
    window = chat.window(max_tokens=150, keep_last=2)
    assert window.messages[0].role == "system" and window.counter.startswith("estimate")
    assert window.tokens <= 150 and window.dropped > 0
    assert window.messages[-1].content == "Answer 9. Fly to NYC."
    ids = {c.id for m in window.messages for c in m.tool_calls}
    assert all(m.tool_call_id in ids for m in window.messages if m.role == "tool")
    tiny = chat.window(max_tokens=5, keep_last=2)  # over budget only to keep 2 turns
    assert [m.role for m in tiny.messages] == ["system", "assistant", "tool", "assistant"]


def test_compaction_keeps_originals_and_shrinks_the_window(app: tether.App) -> None:
    chat = app.session("s1")
    chat.add("system", "You book trips.")
    _chat(chat, 8)
    before = chat.messages()
    summary = chat.compact(keep_last=2)
    assert summary is not None and "Question 0" in summary.text and summary.covers_to > summary.covers_from
    assert chat.messages() == before  # never deleted
    window = chat.window(max_tokens=10_000)
    assert window.summary == summary and window.messages[1].content.startswith("Summary of the earlier")
    assert len(window.messages) == 2 + 3  # system, summary, the last two turns
    again = chat.compact(summarizer=lambda msgs, prev: f"{prev[:10]}+{len(msgs)}", keep_last=1)
    assert again is not None and again.text.endswith("+2") and len(chat.summaries()) == 2
    assert chat.compact(keep_last=5) is None  # nothing to fold


def test_automatic_compaction(app: tether.App) -> None:
    chat = app.session("s1", summarizer=tether.extractive_summarizer, compact_when_tokens_over=200)
    _chat(chat, 12)
    assert chat.summaries() and chat.window(10_000).summary is not None
    assert len(chat.messages()) == 48


def test_renderers_match_the_sdks(app: tether.App) -> None:
    openai_types = pytest.importorskip("openai.types.chat")
    anthropic_types = pytest.importorskip("anthropic.types")
    from pydantic import TypeAdapter

    chat = app.session("s1")
    chat.add("system", "You book trips.")
    _chat(chat, 2)
    window = chat.window(max_tokens=10_000)
    openai_messages = window.to_openai()
    adapter = TypeAdapter(openai_types.ChatCompletionMessageParam)
    for message in openai_messages:
        validated = adapter.validate_python(message)
        assert validated["role"] == message["role"]
    assert openai_messages[2]["tool_calls"][0]["function"] == {"name": "search", "arguments": '{"q":0}'}
    anthropic = window.to_anthropic()
    assert anthropic["system"] == "You book trips."
    param = TypeAdapter(anthropic_types.MessageParam)
    roles = []
    for message in anthropic["messages"]:
        validated = param.validate_python(message)
        list(validated["content"])  # iterables validate lazily
        roles.append(message["role"])
    assert all(a != b for a, b in itertools.pairwise(roles))  # strictly alternating
    # A plain-text message renders as a plain string, as Anthropic (and OpenAI) take it.
    blocks = [b["type"] for m in anthropic["messages"] if not isinstance(m["content"], str) for b in m["content"]]
    assert "tool_use" in blocks and "tool_result" in blocks


class Profile(BaseModel):
    seat: str = "any"
    home: str | None = None


def test_user_state(app: tether.App) -> None:
    ada = app.user("ada", schema=Profile)
    assert ada.get() == Profile()
    assert ada.set("seat", "aisle") == 2
    with pytest.raises(tether.InvalidInputError):
        ada.set("seat", 42)  # type: ignore[arg-type]
    assert ada.version == 2
    doc = ada.update(lambda d: {**d, "home": "LHR"})
    assert doc == {"seat": "aisle", "home": "LHR"}
    other = app.user("ada", schema=Profile)  # another handle, as another process would have
    other.set("seat", "window")
    with pytest.raises(tether.ConflictError):
        ada.set("seat", "middle", expected_version=3)
    assert ada.update(lambda d: {**d, "seat": d["seat"] + "!"})["seat"] == "window!"  # retried, no lost update
    assert [c.set for c in ada.history()] == [
        {"seat": "aisle", "home": None},
        {"home": "LHR"},
        {"seat": "window"},
        {"seat": "window!"},
    ]
    assert app.list_tasks() == []


def test_fetch_records_reads_and_never_serves_stale(app: tether.App) -> None:
    reads: list[str] = []
    crash = {"now": True}

    def calendar(day: str) -> list[str]:
        reads.append(day)
        return [f"{day} 14:00 (read {len(reads)})"]

    @app.task
    def plan(ctx: tether.TaskContext) -> list[Any]:
        first = ctx.fetch(calendar, "mon", ttl=60)
        again = ctx.fetch(calendar, "mon", ttl=60)  # fresh enough: served from the record
        stale = ctx.fetch(calendar, "mon", ttl=0)  # ttl 0: always read
        if crash["now"]:
            raise KeyboardInterrupt
        return [first, again, stale]

    with pytest.raises(KeyboardInterrupt):
        app.run(plan, task_id="p")
    assert reads == ["mon", "mon"]
    crash["now"] = False
    done = app.resume("p")  # replay: history is history, nothing is read again
    assert reads == ["mon", "mon"]
    assert done.output == [["mon 14:00 (read 1)"], ["mon 14:00 (read 1)"], ["mon 14:00 (read 2)"]]
    assert [c.kind for c in done.state.calls] == ["fetch"] * 3


def test_pop_removes_the_newest_message_after_a_compaction_covered_them_all(app: tether.App) -> None:
    """A summary covers messages; it never removes them: pop() takes the newest one still in the
    session, covered or not (it took the system prompt, or nothing, once every message was covered)."""
    session = app.session("trip", user_id="u1")
    session.add("system", "You book trips.")
    session.add("user", "Fly me to NYC.")
    session.add("assistant", "Booked BA117.")
    session.compact(keep_last=0)
    assert [m.role for m in session.messages()] == ["system", "user", "assistant"]
    assert session.pop().content == "Booked BA117."  # type: ignore[union-attr]
    assert session.pop().content == "Fly me to NYC."  # type: ignore[union-attr]
    assert [m.role for m in session.messages()] == ["system"]


OPS = ["user", "user", "assistant", "system", "pop", "pop", "compact", "compact", "undo", "clear"]


def test_pop_always_takes_the_last_of_messages_whatever_came_before(store_url: str) -> None:
    """Two writers, adds, pops, compactions, their undos and clears in a random order (seeded): each
    pop() removes what messages() lists last at that moment."""
    import random

    for seed in range(20):
        rnd = random.Random(seed)
        app = tether.App(store_url)
        writers = [app.session(f"s{seed}"), app.session(f"s{seed}")]
        for n in range(40):
            session = rnd.choice(writers)
            op = rnd.choice(OPS)
            if op in ("user", "assistant", "system"):
                session.add(op, f"{op} {n}")
            elif op == "pop":
                shown = session.messages()
                popped = session.pop()
                assert (popped.seq if popped else None) == (shown[-1].seq if shown else None), (seed, n)
            elif op == "compact":
                session.compact(keep_last=rnd.choice([0, 0, 1, 2]))
            elif op == "undo":
                session.undo_compaction()
            else:
                session.clear()


@pytest.mark.tether_requires("dump")
def test_add_many_at_an_expected_version_is_refused_once_another_writer_appended(store_url: str) -> None:
    from tether.errors import ConflictError
    from tether.testing import dump_database

    app = tether.App(store_url)
    mine, theirs = app.session("s1"), app.session("s1")
    mine.add("user", "hello")
    seen = mine.version
    theirs.add("assistant", "hi")  # another writer, after mine looked
    before = dump_database(store_url, app.store)
    with pytest.raises(ConflictError):
        mine.add_many([{"role": "user", "content": "as if nobody spoke"}], expected_version=seen)
    assert dump_database(store_url, app.store) == before  # nothing written
    mine.add_many([{"role": "user", "content": "after you"}], expected_version=mine.version)
    assert [m.content for m in mine.messages()] == ["hello", "hi", "after you"]
