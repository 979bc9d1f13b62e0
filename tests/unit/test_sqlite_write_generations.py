"""The SQLite write gate's generation: a connection trusts what it remembers of a stream (its version,
the lease token it wrote under) and skips the guard's reads only while it was the last writer of the
whole database. Any write by another connection — in this process or another — in between, or a
change of the lease through this connection, must send the next append through the full guard: a
stale lease holder's write is refused and nothing of it is stored.

Each stale append here is one event (the one-statement path) or a batch (the multi-row path), made
after a fenced write of one event has taught the connection the stream's version and token (so the
short path is open to it); every refusal is checked by reading the stream back.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import tether
from tether.store import EventRow, TaskRow
from tether.store.sqlite import SQLiteStore

T = "default"


def _rows(first: int, count: int) -> list[EventRow]:
    return [
        EventRow(seq, "ObservationRecorded", 1, 0.0, f'{{"n": {seq}}}', None) for seq in range(first, first + count)
    ]


def _create(store: SQLiteStore, task_id: str) -> None:
    store.create_task(T, TaskRow(task_id, T, "x", "running", None, None, 0.0, 0.0, 1), _rows(1, 1)[0])


def _seqs(store: SQLiteStore, task_id: str) -> list[int]:
    return [r.seq for r in store.read_events(T, task_id)]


def _write_as_last(store: SQLiteStore, task_id: str, version: int, token: int, size: int) -> int:
    """Append one event, then ``size`` more, fenced by ``token``: ``store`` is the last writer and
    remembers the stream's version and token. Returns the new version."""
    store.append(T, task_id, _rows(version + 1, 1), version, fence=token)
    store.append(T, task_id, _rows(version + 2, size), version + 1, fence=token)  # the short path
    return version + 1 + size


@pytest.fixture
def two(tmp_path: Path) -> Iterator[tuple[SQLiteStore, SQLiteStore]]:
    path = str(tmp_path / "t.db")
    a, b = SQLiteStore(path), SQLiteStore(path)
    yield a, b
    a.close()
    b.close()


@pytest.mark.parametrize("size", [1, 3])
def test_a_takeover_by_another_connection_refuses_the_old_holders_next_append(
    two: tuple[SQLiteStore, SQLiteStore], size: int
) -> None:
    a, b = two
    _create(a, "t")
    token = a.acquire_lease(T, "t", "a", 60.0, 0.0)
    assert token is not None
    version = _write_as_last(a, "t", 1, token, size)
    new = b.acquire_lease(T, "t", "b", 60.0, 100.0)  # a's lease expired; b writes nothing yet
    assert new is not None and new != token
    with pytest.raises(tether.LeaseLostError):
        a.append(T, "t", _rows(version + 1, size), version, fence=token)
    assert _seqs(b, "t") == list(range(1, version + 1))
    b.append(T, "t", _rows(version + 1, size), version, fence=new)
    assert {r.fence for r in a.read_events(T, "t")[version:]} == {new}


@pytest.mark.parametrize("size", [1, 3])
def test_a_takeover_of_another_stream_is_not_forgotten_once_this_connection_writes_again(
    two: tuple[SQLiteStore, SQLiteStore], size: int
) -> None:
    """b's takeover of stream "y" comes between a's writes; a's next write goes to stream "x" (the full
    guard: a was not the last writer) and makes it the last writer again. What a remembered of "y"
    from before b's write must be gone all the same: its stale append to "y" is refused."""
    a, b = two
    _create(a, "x")
    _create(a, "y")
    tx, ty = a.acquire_lease(T, "x", "a", 60.0, 0.0), a.acquire_lease(T, "y", "a", 60.0, 0.0)
    assert tx is not None and ty is not None
    vy = _write_as_last(a, "y", 1, ty, size)
    new = b.acquire_lease(T, "y", "b", 60.0, 100.0)
    assert new is not None
    vx = _write_as_last(a, "x", 1, tx, size)  # a's lease on x still holds
    with pytest.raises(tether.LeaseLostError):
        a.append(T, "y", _rows(vy + 1, size), vy, fence=ty)
    assert _seqs(b, "y") == list(range(1, vy + 1))
    assert _seqs(b, "x") == list(range(1, vx + 1))


@pytest.mark.parametrize("size", [1, 3])
@pytest.mark.parametrize("how", ["acquire", "claim"])
def test_a_lease_taken_through_the_same_connection_refuses_the_old_token(tmp_path: Path, how: str, size: int) -> None:
    """One store shared by two workers of a process: the second takes the task over once the first's
    lease has expired (by name, or by claiming what is runnable) through the same connection, which
    so stays the last writer: the first's token is stale all the same, and its append is refused."""
    store = SQLiteStore(str(tmp_path / "t.db"))
    try:
        _create(store, "t")
        old = store.acquire_lease(T, "t", "w1", 60.0, 0.0)
        assert old is not None
        version = _write_as_last(store, "t", 1, old, size)
        if how == "acquire":
            new = store.acquire_lease(T, "t", "w2", 60.0, 100.0)
        else:
            claimed = store.claim(T, "w2", 60.0, 100.0)
            assert claimed is not None and claimed[0] == "t"
            new = claimed[1]
        assert new is not None and new != old
        with pytest.raises(tether.LeaseLostError):
            store.append(T, "t", _rows(version + 1, size), version, fence=old)
        assert _seqs(store, "t") == list(range(1, version + 1))
        store.append(T, "t", _rows(version + 1, size), version, fence=new)
    finally:
        store.close()


_TAKE_OVER = """
import sys
from tether.store.sqlite import SQLiteStore
store = SQLiteStore(sys.argv[1])
print(store.acquire_lease("default", "t", "other-process", 60.0, 100.0))
store.close()
"""


@pytest.mark.parametrize("size", [1, 3])
def test_a_takeover_by_another_process_refuses_the_old_holders_next_append(tmp_path: Path, size: int) -> None:
    path = str(tmp_path / "t.db")
    store = SQLiteStore(path)
    try:
        _create(store, "t")
        token = store.acquire_lease(T, "t", "here", 60.0, 0.0)
        assert token is not None
        version = _write_as_last(store, "t", 1, token, size)
        src = str(Path(tether.__file__).resolve().parent.parent)
        env = {**os.environ, "PYTHONPATH": src}
        done = subprocess.run(
            [sys.executable, "-c", _TAKE_OVER, path], capture_output=True, text=True, env=env, check=True
        )
        new = int(done.stdout.strip())
        assert new != token
        with pytest.raises(tether.LeaseLostError):
            store.append(T, "t", _rows(version + 1, size), version, fence=token)
        assert _seqs(store, "t") == list(range(1, version + 1))
        store.append(T, "t", _rows(version + 1, size), version, fence=new)
    finally:
        store.close()
