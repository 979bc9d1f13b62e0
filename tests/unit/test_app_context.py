"""The Python API's conventions: App and the stores as context managers (``with`` and ``async with``),
``App()`` choosing its store in the order the CLI does, and an async twin for each read and control
method that runs off the event loop."""

from __future__ import annotations

import asyncio
import inspect
import threading
from pathlib import Path

import pytest

import tether
from tether.store import DEFAULT_URL, open_store, resolve_url

TWINS = (
    "get",
    "state",
    "list_tasks",
    "pending_inputs",
    "send_input",
    "resolve_call",
    "cancel",
    "request_cancel",
    "request_retry",
    "history",
    "diff",
    "fork",
    "rewind",
    "replay",
    "check",
    "sessions",
)


def _closed(app: tether.App) -> bool:
    try:
        app.list_tasks()
    except Exception:
        return True
    return False


def test_app_closes_at_the_end_of_a_with_block(tmp_path: Path) -> None:
    with tether.App(str(tmp_path / "t.db")) as app:
        assert isinstance(app, tether.App)
        assert not _closed(app)
    assert _closed(app)
    with pytest.raises(RuntimeError), tether.App(str(tmp_path / "t.db")) as other:
        raise RuntimeError("the block failed")
    assert _closed(other)  # closed however the block ends


def test_app_closes_at_the_end_of_an_async_with_block(tmp_path: Path) -> None:
    async def main() -> tether.App:
        async with tether.App(str(tmp_path / "t.db")) as app:
            assert await app.list_tasks_async() == []
        return app

    assert _closed(asyncio.run(main()))


@pytest.mark.parametrize("url", ["memory://", "sqlite:///{tmp}/s.db"])
def test_stores_are_context_managers(tmp_path: Path, url: str) -> None:
    with open_store(url.format(tmp=tmp_path)) as store:
        assert store.list_tasks("default", tether.store.TaskFilter(), limit=1) == []

    async def main() -> None:
        async with open_store(url.format(tmp=tmp_path)) as store:
            assert store.url.startswith(url.partition(":")[0])

    asyncio.run(main())


def test_app_honours_tether_url_and_an_explicit_url_wins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TETHER_URL", f"sqlite:///{tmp_path / 'from_env.db'}")
    with tether.App() as app:
        assert app.store.url == f"sqlite:///{tmp_path / 'from_env.db'}"
    with tether.App("given.db") as app:
        assert app.store.url == "sqlite:///given.db"
    monkeypatch.setenv("TETHER_URL", "")  # set but empty: as if unset
    assert resolve_url() == DEFAULT_URL
    monkeypatch.delenv("TETHER_URL")
    with tether.App() as app:
        assert app.store.url == DEFAULT_URL
    assert (tmp_path / "from_env.db").exists() and (tmp_path / "tether.db").exists()


def test_every_read_and_control_method_has_an_async_twin_with_its_signature() -> None:
    for name in TWINS:
        sync, twin = getattr(tether.App, name), getattr(tether.App, f"{name}_async")
        assert inspect.iscoroutinefunction(twin), name
        assert inspect.signature(twin) == inspect.signature(sync), name
        assert twin.__name__ == f"{name}_async" and f":meth:`{name}`" in (twin.__doc__ or "")
    # one convention: the twins of run, resume and retry are named the same way
    assert all(inspect.iscoroutinefunction(getattr(tether.App, f"{n}_async")) for n in ("run", "resume", "retry"))


def test_an_async_twin_leaves_the_event_loop_free_while_it_blocks() -> None:
    """cancel_async runs a compensation that waits for the loop to act: only a twin that runs off the
    loop lets the loop run the coroutine that opens the gate."""
    gate = threading.Event()
    opened: list[bool] = []
    app = tether.App("memory://")

    def undo(result: str) -> None:
        opened.append(gate.wait(3))

    @app.tool
    def book() -> str:
        return "b1"

    @app.task
    def trip(ctx: tether.TaskContext) -> None:
        ctx.call(book, compensate=undo)
        ctx.wait_for_input("approve")

    run = app.run(trip)

    async def main() -> tether.TaskHandle:
        async def open_gate() -> None:
            await asyncio.sleep(0)
            gate.set()

        handle, _ = await asyncio.gather(app.cancel_async(run.task_id, "changed plans", actor="ann"), open_gate())
        return handle

    with app:
        handle = asyncio.run(main())
        assert handle.status is tether.Status.CANCELLED and opened == [True]
        assert asyncio.run(app.state_async(run.task_id)).cancel_reason == "changed plans"
