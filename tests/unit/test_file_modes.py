"""tether's SQLite files are owner-only by default; ``?mode=`` widens them on purpose."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

import tether


@pytest.fixture
def usual_umask() -> Iterator[None]:
    old = os.umask(0o022)
    yield
    os.umask(old)


def _modes(db: Path) -> dict[str, int]:
    found = {}
    for suffix in ("", "-wal", "-shm", "-lock"):
        path = Path(f"{db}{suffix}")
        assert path.exists(), path
        found[suffix or "db"] = stat.S_IMODE(path.stat().st_mode)
    return found


def _touch(url: str) -> tether.App:
    app = tether.App(url)

    @app.task
    def noop(ctx: tether.TaskContext) -> int:
        return 1

    app.run(noop)
    return app


def test_files_are_owner_only_by_default(tmp_path: Path, usual_umask: None) -> None:
    app = _touch(f"sqlite:///{tmp_path / 't.db'}")
    assert _modes(tmp_path / "t.db") == {"db": 0o600, "-wal": 0o600, "-shm": 0o600, "-lock": 0o600}
    app.close()


def test_mode_option_widens_them(tmp_path: Path, usual_umask: None) -> None:
    app = _touch(f"sqlite:///{tmp_path / 't.db'}?mode=0640")
    assert set(_modes(tmp_path / "t.db").values()) == {0o640}
    app.close()


@pytest.mark.parametrize("mode", ["abc", "0400", "01777", "9"])
def test_bad_modes_are_refused(tmp_path: Path, mode: str) -> None:
    with pytest.raises(tether.ConfigurationError, match="mode"):
        tether.open_store(f"sqlite:///{tmp_path / 't.db'}?mode={mode}")
    assert not (tmp_path / "t.db").exists()
