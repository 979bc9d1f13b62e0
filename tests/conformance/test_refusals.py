"""Bad arguments are refused at the call, by name, before any store sees them: the refusals that need
no backend (the kit's tether.testing.runtime.tasks.test_refusals checks the rest on every backend)."""

from __future__ import annotations

import math
import os
from pathlib import Path

import pytest

import tether
from tether.testing.runtime.tasks.test_refusals import _app


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
