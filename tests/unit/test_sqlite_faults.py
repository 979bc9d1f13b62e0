"""SQLite's own faults — a full disk, a damaged page — are the store's problem, never the task's."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

import tether


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 2 MB tmpfs of our own (root only); skipped, with the reason, where mounting is not allowed."""
    folder = tmp_path / "small"
    folder.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(folder)], capture_output=True, text=True
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({done.stderr.strip() or done.returncode}); needs root")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


def _fill(folder: Path, leave: int) -> Path:
    """Fill the file system up to ``leave`` bytes free."""
    filler = folder / "filler"
    stat = os.statvfs(folder)
    free = stat.f_bavail * stat.f_frsize
    with open(filler, "wb") as out:
        out.write(b"\0" * max(0, free - leave))
    return filler


def test_a_full_disk_leaves_the_task_resumable(small_disk: Path) -> None:
    url = f"sqlite:///{small_disk / 't.db'}"
    app = tether.App(url)
    big = "x" * 400_000

    @app.tool
    def fetch() -> str:
        return big

    @app.task
    def job(ctx: tether.TaskContext) -> int:
        return len(ctx.call(fetch))

    app.start(job, task_id="job")
    filler = _fill(small_disk, leave=100_000)
    with pytest.raises(tether.StoreFullError, match="disk is full") as caught:
        app.run(job, task_id="job")
    assert isinstance(caught.value, tether.StoreUnavailableError) and "t.db" in str(caught.value)
    state = app.state("job")
    assert state.status is not tether.Status.FAILED and state.failure is None
    assert [c.status for c in state.calls] == ["intended"]
    filler.unlink()
    done = app.resume("job")
    assert (done.status, done.output) == (tether.Status.COMPLETED, 400_000)
    app.close()


def _corrupt_a_data_page(path: Path) -> None:
    """Scribble over the pages after the schema's: the events' data, not the file header."""
    size = path.stat().st_size
    with open(path, "r+b") as f:
        f.seek(4096 * 3)
        f.write(os.urandom(min(size - 4096 * 3, 4096 * 8)))


def test_a_damaged_page_is_named_with_the_fix(tmp_path: Path) -> None:
    path = tmp_path / "t.db"
    app = tether.App(f"sqlite:///{path}")

    @app.task
    def job(ctx: tether.TaskContext, blob: str) -> int:
        return len(blob)

    for n in range(40):
        app.run(job, "y" * 2000, task_id=f"job-{n}")
    app.close()  # folds the WAL into the file
    _corrupt_a_data_page(path)
    reader = tether.App(f"sqlite:///{path}")
    with pytest.raises(tether.StoreCorruptError) as caught:
        for n in range(40):
            reader.get(f"job-{n}")
        reader.list_tasks(limit=100)
    message = str(caught.value)
    assert str(path) in message and "integrity_check" in message
    assert isinstance(caught.value, tether.StoreUnavailableError)
    reader.close()


def test_no_sqlite3_error_crosses_the_store_boundary(tmp_path: Path) -> None:
    """A statement SQLite refuses for its value, or at all, arrives as a tether error, never as sqlite3's."""
    import sqlite3

    from tether.errors import InvalidInputError, TetherError
    from tether.store.sqlite import SQLiteStore

    store = SQLiteStore(str(tmp_path / "t.db"))
    try:
        for raised, expected in (
            (sqlite3.DataError("string or blob too big"), InvalidInputError),
            (sqlite3.IntegrityError("NOT NULL constraint failed"), InvalidInputError),
            (sqlite3.ProgrammingError("Error binding parameter 1"), TetherError),
        ):

            def broken(*args: object, raised: Exception = raised) -> None:
                raise raised

            store._conn = _Refusing(store._conn, broken)  # type: ignore[assignment]
            with pytest.raises(expected) as info:
                store.get_task("default", "t1")
            assert not isinstance(info.value, sqlite3.Error) and info.value.__cause__ is raised
            store._conn = store._conn.inner  # type: ignore[attr-defined]
    finally:
        store.close()


class _Refusing:
    """A connection whose every statement raises what ``refuse`` raises."""

    def __init__(self, inner: object, refuse: object) -> None:
        self.inner = inner
        self.execute = refuse

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)
