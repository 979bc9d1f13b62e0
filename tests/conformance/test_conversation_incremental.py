"""A session read from its newest end (outline snapshots, a tail read backwards) equals the whole fold,
on every backend: for any interleaving of appends, removals, clears, compactions and reopenings,
windows and views equal ``build_window(fold_view(every event))``."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tether
from tether.conversation import EstimateCounter, _incremental, build_window, extractive_summarizer, fold_view, window
from tether.conversation.session import Session, open_session

COUNTER = EstimateCounter()
_ids = itertools.count()

op = st.one_of(
    st.tuples(st.just("user"), st.integers(1, 40)),
    st.tuples(st.just("assistant"), st.integers(1, 40)),
    st.tuples(st.just("call"), st.integers(1, 3)),  # an assistant message with calls, then their results
    st.tuples(st.just("split"), st.integers(1, 3)),  # parallel calls stored one assistant item each
    st.tuples(st.just("orphan"), st.integers(1, 5)),  # a tool result whose call is not there
    st.tuples(st.just("system"), st.integers(1, 10)),
    st.tuples(st.just("pop"), st.just(0)),
    st.tuples(st.just("clear"), st.just(0)),
    st.tuples(st.just("compact"), st.integers(0, 3)),
    st.tuples(st.just("reopen"), st.just(0)),
)


@pytest.fixture
def log(store_url: str, monkeypatch: pytest.MonkeyPatch) -> tether.TaskLog:
    # Small pages, a small tail and frequent snapshots, so a short session exercises all of them.
    monkeypatch.setattr(_incremental, "_FIRST_PAGE", 2)
    monkeypatch.setattr(_incremental, "_TAIL_CAP", 6)
    monkeypatch.setattr(window, "_FIRST_SPAN", 1)
    return tether.TaskLog(store_url, snapshots=tether.SnapshotPolicy(every=3))


def _open(log: tether.TaskLog, sid: str, auto: bool = False) -> Session:
    """``auto``: compacts itself once the turns after its summary weigh over 150 tokens."""
    return open_session(
        log,
        sid,
        user_id="u",
        counter=COUNTER,
        summarizer=extractive_summarizer if auto else None,
        compact_when_tokens_over=150 if auto else None,
    )


def _apply(session: Session, name: str, arg: int, n: int) -> None:
    if name in ("user", "assistant", "system"):
        session.add(name, f"{name} {n} " + "word " * arg)
    elif name == "call":
        ids = [f"c{n}-{i}" for i in range(arg)]
        session.add("assistant", "", tool_calls=[{"id": i, "name": "t", "arguments": {}} for i in ids])
        session.add_many([{"role": "tool", "tool_call_id": i, "content": f"result {i}"} for i in ids])
    elif name == "split":
        ids = [f"c{n}-{i}" for i in range(arg)]
        session.add_many([{"role": "assistant", "content": "", "tool_calls": [{"id": i, "name": "t"}]} for i in ids])
        session.add_many([{"role": "tool", "tool_call_id": i, "content": f"result {i}"} for i in ids])
    elif name == "orphan":
        session.add("tool", "lost " * arg, tool_call_id=f"gone{n}")
    elif name == "pop":
        session.pop()
    elif name == "clear":
        session.clear()
    elif name == "compact":
        session.compact(keep_last=arg)


def _check(log: tether.TaskLog, session: Session) -> None:
    whole = fold_view(session._stream.read())
    assert session.view() == whole
    for max_tokens, keep_last in [(1, 0), (60, 1), (200, 2), (10_000, 6)]:
        for reader in (session, _open(log, session.id)):
            got = reader.window(max_tokens, keep_last)
            assert got == build_window(whole, max_tokens, keep_last, COUNTER)
            assert got.messages == _whole_window(whole, max_tokens, keep_last)


def _whole_window(view: Any, max_tokens: int, keep_last: int) -> tuple[Any, ...]:
    """The window as it was computed before it was read from the end: every turn grouped."""
    from tether.conversation import message_tokens, turns

    fixed = list(build_window(view.model_copy(update={"recent": ()}), max_tokens, 0, COUNTER).messages)
    budget = max_tokens - sum(message_tokens(m, COUNTER) for m in fixed)
    chosen: list[list[Any]] = []
    for group in reversed(turns(view.recent)):
        cost = sum(message_tokens(m, COUNTER) for m in group)
        if len(chosen) < max(keep_last, 1) or cost <= budget:
            chosen.append(group)
            budget -= cost
        else:
            break
    return tuple(fixed + [m for group in reversed(chosen) for m in group])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=st.lists(op, max_size=25), auto=st.booleans())
def test_incremental_session_equals_whole_fold(log: tether.TaskLog, ops: list[tuple[str, Any]], auto: bool) -> None:
    sid = f"s{next(_ids)}"
    session = _open(log, sid, auto)
    for n, (name, arg) in enumerate(ops):
        if name == "reopen":
            session = _open(log, sid, auto)
        else:
            _apply(session, name, arg, n)
    _check(log, session)


def test_a_long_session_opens_from_its_outline_snapshot(log: tether.TaskLog) -> None:
    session = _open(log, "long")
    session.add("system", "be brief")
    for i in range(40):
        session.add("user", f"question {i}")
        session.add("assistant", f"answer {i}")
    reads: list[tuple[int, int | None]] = []
    original = log.store.read_events

    def read_events(tenant: str, task_id: str, *, after: int = 0, upto: int | None = None) -> Any:
        reads.append((after, upto))
        return original(tenant, task_id, after=after, upto=upto)

    log.store.read_events = read_events  # type: ignore[method-assign]
    reopened = _open(log, "long")
    window = reopened.window(40, keep_last=1)
    assert [m.content for m in window.messages][:1] == ["be brief"]
    assert all(after > 0 for after, _ in reads)  # never from the first event
    _check(log, reopened)


def test_read_latest_is_the_newest_snapshot_and_the_events_after_it(log: tether.TaskLog) -> None:
    store, tenant = log.store, log.tenant
    session = _open(log, "latest")
    for i in range(7):
        session.add("user", f"m{i}")  # every=3: outline snapshots along the way
    snap, rows = store.read_latest(tenant, "session:latest")
    newest = store.get_snapshot(tenant, "session:latest", at_most=2**30)
    assert snap == newest and snap is not None
    assert [r.seq for r in rows] == list(range(snap.seq + 1, session.view().version + 1))
    assert rows == store.read_events(tenant, "session:latest", after=snap.seq)
    log.fork_stream("session:latest", 4, new_id="session:branch")  # a fork reads its parent's part too
    snap, rows = store.read_latest(tenant, "session:branch")
    after = snap.seq if snap else 0
    assert rows == store.read_events(tenant, "session:branch", after=after)
    assert _open(log, "branch").view() == fold_view(_open(log, "branch")._stream.read())
    with pytest.raises(tether.TaskNotFoundError):
        store.read_latest(tenant, "session:nobody")


def test_opening_a_postgres_session_is_one_round_trip(store_url: str) -> None:
    if not store_url.startswith("postgresql"):
        pytest.skip("counts PostgreSQL statements")
    import psycopg

    log = tether.TaskLog(store_url, snapshots=tether.SnapshotPolicy(every=50))
    session = _open(log, "rt")
    for i in range(120):
        session.add("user", f"m{i}")
    statements: list[str] = []
    original = psycopg.Connection.execute

    def execute(self: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
        statements.append(str(query))
        return original(self, query, *args, **kwargs)

    psycopg.Connection.execute = execute  # type: ignore[method-assign]
    try:
        _open(log, "rt")
    finally:
        psycopg.Connection.execute = original  # type: ignore[method-assign]
    assert len(statements) <= 2, statements
