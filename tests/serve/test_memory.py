"""What the server keeps in memory under concurrent reads: bounded by its configuration, not by
how many threads answer requests or how many tenants ask."""

from __future__ import annotations

import gc
import threading
from typing import Any

import httpx
import pytest

import tether
from tests.serve.conftest import LiveServer
from tether.serve import create_app
from tether.serve.keys import KeyRing

MB = 1_000_000
BUDGET = 6 * 1024 * 1024


def _held(app: tether.App) -> int:
    """The bytes an App's log counts of the tasks it keeps folded (its cache's own tally)."""
    return int(app.log._memory.held[1])


def _apps_over(store: Any) -> list[tether.App]:
    gc.collect()
    return [o for o in gc.get_objects() if isinstance(o, tether.App) and o.store is store]


@pytest.fixture(params=["sqlite", "postgres"])
def store_url(request: pytest.FixtureRequest, tmp_path: Any) -> Any:
    from tests.conftest import pg_url

    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'tether.db'}"
    else:
        yield from pg_url()


@pytest.mark.timeout(300)
def test_forty_clients_reading_large_tasks_of_two_tenants_keep_the_budget(store_url: str) -> None:
    tenants = ("acme", "globex")
    writers = {t: tether.App(store_url, tenant=t) for t in tenants}
    # The same task ids in both tenants: each read must reach its own tenant's task, whatever the
    # server (its Apps, their caches, the store's) remembers of the other's under that id.
    tasks = {
        t: [
            app.log.create(type="big", task_id=f"big-{i}", inputs={"blob": f"{t}:{i}:" + "x" * MB}).task_id
            for i in range(8)
        ]
        for t, app in writers.items()
    }
    assert tasks["acme"] == tasks["globex"]
    ring = KeyRing(writers["acme"].store)
    keys = {t: ring.create(tenant=t, name="reader")[0] for t in tenants}
    asgi = create_app(store_url, cache_bytes=BUDGET, cache_tenants=2)
    server_store = asgi.state.store
    failures: list[str] = []

    def read(n: int) -> None:
        # Each client thread reads both tenants' tasks by turns, under each tenant's own key.
        with httpx.Client(base_url=live.base, timeout=60) as c:
            for i in range(6):
                tenant, k = tenants[(n + i) % 2], (n + i // 2) % len(tasks["acme"])
                task = tasks[tenant][k]
                response = c.get(f"/v1/tasks/{task}", headers={"Authorization": f"Bearer {keys[tenant]}"})
                if response.status_code != 200 or len(response.content) < MB:
                    failures.append(f"{tenant} {task}: {response.status_code} {response.text[:200]}")
                    continue
                blob = response.json()["state"]["inputs"]["blob"]
                if not blob.startswith(f"{tenant}:{k}:"):
                    failures.append(f"{tenant} {task}: read {blob[:12]!r}")

    try:
        with LiveServer(asgi) as live:
            clients = [threading.Thread(target=read, args=(n,)) for n in range(40)]
            for t in clients:
                t.start()
            for t in clients:
                t.join()
            assert failures == []
            apps = _apps_over(server_store)
            # One App per tenant, shared by every request thread (one per thread and tenant made 80).
            assert sorted(a.tenant for a in apps) == sorted(tenants)
            assert {id(a) for a in apps} == {id(a) for a in asgi.state.apps.kept()}
            # What they keep folded is within the budget: a tenant's share is 3 MiB of 1 MB tasks.
            held = sum(_held(a) for a in apps)
            assert MB <= held <= BUDGET, held
    finally:
        asgi.state.feed.stop()
        server_store.close()
        for app in writers.values():
            app.close()


def test_the_server_keeps_the_tenants_it_served_last(tmp_path: Any) -> None:
    """Keys of many tenants: the Apps kept stay at ``cache_tenants``, the least recently served let go."""
    from tether.serve.auth import Principal

    asgi = create_app(f"sqlite:///{tmp_path / 't.db'}", cache_bytes=BUDGET, cache_tenants=3)
    apps = asgi.state.apps
    try:
        for i in range(10):
            apps(Principal(f"t{i}", "reader", "header"))
        apps(Principal("t7", "reader", "header"))  # served again: the most recent
        assert [a.tenant for a in apps.kept()] == ["t8", "t9", "t7"]
        assert len(_apps_over(asgi.state.store)) == 3  # the others were let go, not kept elsewhere
    finally:
        asgi.state.store.close()


@pytest.mark.parametrize("bad", [{"cache_bytes": -1}, {"cache_tenants": 0}, {"cache_bytes": "64MB"}])
def test_a_bad_budget_is_refused_naming_it(bad: dict[str, Any]) -> None:
    with pytest.raises(tether.ConfigurationError, match=next(iter(bad))):
        create_app("memory://", **bad)
