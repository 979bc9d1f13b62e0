"""A store URL's password is never shown or kept: not in store.url, banners, errors or --json."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest

import tether
from tests.cli._console import run_tether
from tests.cli.test_cli import pythonpath
from tests.conftest import pg_url
from tether.store.base import redact_url

SECRET = "s3cret-pw"


def _with_password(url: str) -> str:
    parts = urlsplit(url)
    user, _, host = parts.netloc.rpartition("@")
    return urlunsplit(parts._replace(netloc=f"{user.partition(':')[0]}:{SECRET}@{host}"))


@pytest.fixture
def secret_url() -> Iterator[str]:
    for url in pg_url("redact"):
        yield _with_password(url)


def test_redact_url() -> None:
    assert redact_url(f"postgresql://u:{SECRET}@h:5432/db?schema=x") == "postgresql://u:***@h:5432/db?schema=x"
    assert SECRET not in redact_url(f"postgresql://u@h/db?password={SECRET}&schema=x")
    assert redact_url("sqlite:///tmp/t.db") == "sqlite:///tmp/t.db"


def test_store_url_holds_no_password(secret_url: str) -> None:
    app = tether.App(secret_url)
    assert SECRET not in app.store.url and ":***@" in app.store.url
    assert SECRET not in repr(app.store) and SECRET not in repr(app)
    app.close()


def test_worker_banner_and_errors_hold_no_password(secret_url: str, tmp_path: Path) -> None:
    (tmp_path / "secretapp.py").write_text(f"import tether\napp = tether.App({secret_url!r})\n")
    env = {**os.environ, "TETHER_URL": "", "PYTHONPATH": pythonpath(tmp_path), "COLUMNS": "300"}
    done = run_tether("worker", "secretapp:app", "--idle-exit", cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr
    assert "postgres:***@" in done.stderr and SECRET not in done.stderr + done.stdout
    unreachable = _with_password("postgresql://postgres@127.0.0.1:1/nowhere")
    failed = run_tether("tasks", "--db", unreachable, "--json", cwd=tmp_path, env=env)
    assert failed.returncode != 0 and "127.0.0.1" in failed.stdout + failed.stderr
    assert SECRET not in failed.stdout + failed.stderr


def test_demo_output_holds_no_password(secret_url: str, tmp_path: Path) -> None:
    done = run_tether("demo", "--db", secret_url, cwd=tmp_path, env={**os.environ, "TETHER_URL": "", "COLUMNS": "300"})
    assert done.returncode == 0, done.stderr
    assert "postgres:***@" in done.stdout and SECRET not in done.stdout + done.stderr
