"""Bad arguments are refused at the call, by name, on every backend, before any store sees them."""

from __future__ import annotations

import pytest

import tether
from tether.checks import MAX_ID_LENGTH


def _app(url: str) -> tether.App:
    app = tether.App(url)

    @app.task
    def noop(ctx: tether.TaskContext, x: object = None) -> object:
        return x

    return app


def test_counts_and_positions_are_checked(store_url: str) -> None:
    app = _app(store_url)
    run = app.run("noop", 1)
    with pytest.raises(tether.InvalidInputError, match="limit"):
        app.list_tasks(limit=10**30)
    with pytest.raises(tether.InvalidInputError, match="offset"):
        app.list_tasks(offset=-1)
    with pytest.raises(tether.InvalidInputError, match="at must be an integer"):
        app.fork(run.task_id, at=True)
    with pytest.raises(tether.InvalidInputError, match="upto"):
        app.replay(run.task_id, upto=0)
    app.close()


BAD_IDS = [
    pytest.param("", id="empty"),
    pytest.param("   ", id="whitespace"),
    pytest.param("a\ud800b", id="lone-surrogate"),
    pytest.param("a\0b", id="nul"),
    pytest.param(5, id="int"),
    pytest.param(b"abc", id="bytes"),
    pytest.param("x" * 10_000, id="too-long"),
]


@pytest.mark.parametrize("bad", BAD_IDS)
def test_bad_ids_are_refused_alike_everywhere(store_url: str, bad: object) -> None:
    app = _app(store_url)
    with pytest.raises(tether.InvalidInputError, match="task_id"):
        app.run("noop", task_id=bad)  # type: ignore[arg-type]
    with pytest.raises(tether.InvalidInputError, match="user_id"):
        app.run("noop", user_id=bad)  # type: ignore[arg-type]
    with pytest.raises(tether.InvalidInputError, match="session_id"):
        app.session(bad)  # type: ignore[arg-type]
    with pytest.raises(tether.InvalidInputError, match="user_id"):
        app.user(bad)  # type: ignore[arg-type]
    with pytest.raises(tether.InvalidInputError, match="task_id"):
        app.get(bad)  # type: ignore[arg-type]
    with pytest.raises(tether.ConfigurationError, match="tenant"):
        tether.App(store_url, tenant=bad)  # type: ignore[arg-type]
    assert app.list_tasks() == []
    app.close()


def test_the_longest_id_is_accepted(store_url: str) -> None:
    app = _app(store_url)
    longest = "é" * MAX_ID_LENGTH
    run = app.run("noop", 3, task_id=longest, user_id=longest, session_id=longest)
    assert run.output == 3 and app.get(longest).state.user_id == longest
    app.session(longest).add("user", "hi")
    assert app.user(longest).set("k", 1) == 2
    with pytest.raises(tether.InvalidInputError, match=f"at most {MAX_ID_LENGTH}"):
        app.run("noop", task_id=longest + "x")
    app.close()


def test_a_long_id_is_not_reported_as_an_outage(store_url: str) -> None:
    app = _app(store_url)
    with pytest.raises(tether.InvalidInputError) as caught:
        app.run("noop", task_id="x" * 10_000)
    assert not isinstance(caught.value, tether.StoreUnavailableError)
    app.close()
