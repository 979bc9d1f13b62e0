"""One App shared by threads — a server's requests, a worker's concurrency, ctx.map — reading
and writing the same tasks: what the log remembers stays consistent."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

import tether

TASKS, CALLS = 6, 1500


@pytest.mark.parametrize("url", ["memory://", "sqlite"])
def test_readers_and_a_writer_share_one_app(tmp_path: Path, url: str) -> None:
    app = tether.App(url if url == "memory://" else f"sqlite:///{tmp_path / 't.db'}")

    @app.tool(readonly=True)
    def step(i: int) -> int:
        return i

    @app.task
    def long(ctx: tether.TaskContext, n: int) -> int:
        return sum(ctx.call(step, i) for i in range(n))

    for t in range(TASKS):
        app.start(long, CALLS, task_id=f"t{t}")
    errors: list[BaseException] = []
    stop = threading.Event()

    def read() -> None:
        try:
            while not stop.is_set():
                for t in range(TASKS):
                    state = app.state(f"t{t}")
                    assert [c.n for c in state.calls] == list(range(1, len(state.calls) + 1))
                app.list_tasks()
        except BaseException as exc:
            errors.append(exc)

    readers = [threading.Thread(target=read) for _ in range(4)]
    for reader in readers:
        reader.start()
    try:
        writers = [threading.Thread(target=app.resume, args=(f"t{t}",)) for t in range(TASKS)]
        for writer in writers:
            writer.start()
        for writer in writers:
            writer.join()
    finally:
        stop.set()
        for reader in readers:
            reader.join()
    assert not errors, errors[:3]
    assert [app.state(f"t{t}").output for t in range(TASKS)] == [sum(range(CALLS))] * TASKS
