"""Bad arguments are refused at the call, by name, on every backend, before any store sees them."""

from __future__ import annotations

import math
import os
from pathlib import Path

import pytest

import tether
from tether.checks import MAX_ID_LENGTH


def _app(url: str) -> tether.App:
    app = tether.App(url)

    @app.task
    def noop(ctx: tether.TaskContext, x: object = None) -> object:
        return x

    return app


@pytest.mark.parametrize("ttl", [math.nan, math.inf, -1.0, 0])
def test_lease_ttl_must_be_finite_and_positive(ttl: float) -> None:
    with pytest.raises(tether.ConfigurationError, match="lease_ttl"):
        tether.App("memory://", lease_ttl=ttl)


def test_app_url_must_be_text() -> None:
    with pytest.raises(tether.ConfigurationError, match="url"):
        tether.App(5)  # type: ignore[arg-type]


def test_a_bare_path_is_sqlite(tmp_path: Path) -> None:
    app = tether.App(str(tmp_path / "agent.db"))
    assert app.store.url.startswith("sqlite:///") and (tmp_path / "agent.db").exists()
    with pytest.raises(tether.ConfigurationError, match=r"directory .* does not exist"):
        tether.App(str(tmp_path / "missing" / "agent.db"))


@pytest.mark.parametrize(
    ("query", "name"),
    [("busy_timeout=abc", "busy_timeout"), ("busy_timeout=nan", "busy_timeout"), ("busy_timeout=-1", "busy_timeout")],
)
def test_sqlite_url_options_are_checked(tmp_path: Path, query: str, name: str) -> None:
    with pytest.raises(tether.ConfigurationError, match=name):
        tether.open_store(f"sqlite:///{tmp_path / 't.db'}?{query}")


@pytest.mark.parametrize(("query", "name"), [("pool_max=abc", "pool_max"), ("pool_min=-1", "pool_min")])
def test_postgres_url_options_are_checked(query: str, name: str) -> None:
    pytest.importorskip("psycopg")
    # Refused before any connection is tried: the host does not exist.
    with pytest.raises(tether.ConfigurationError, match=name):
        tether.open_store(f"postgresql://nobody@host.invalid:1/db?{query}")


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


def test_none_is_the_only_way_to_ask_for_a_new_id(tmp_path: Path) -> None:
    app = _app("memory://")
    assert len(app.run("noop", task_id=None).task_id) == 32
    with pytest.raises(tether.InvalidInputError):
        app.run("noop", task_id="")
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize(
    ("options", "name"),
    [({"concurrency": 0}, "concurrency"), ({"poll": math.nan}, "poll"), ({"grace": math.inf}, "grace")],
)
def test_worker_options_are_checked_before_any_thread_starts(options: dict[str, float], name: str) -> None:
    app = _app("memory://")
    with pytest.raises(tether.ConfigurationError, match=name):
        app.run_worker(idle_exit=True, **options)  # type: ignore[arg-type]
