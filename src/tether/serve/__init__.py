"""``tether serve``: an HTTP API (``/v1``, OpenAPI at ``/openapi.json``) and a web inspector (``/``).

Install with ``pip install 'tether[serve]'``. Mount it in your own ASGI server, or run
``tether serve --db URL``.

Example:
    >>> import tether
    >>> from tether.serve import create_app
    >>> asgi = create_app("memory://", no_auth=True)   # keys: `tether keys create --tenant T --name N`
    >>> sorted(p for p in asgi.openapi()["paths"] if p in ("/v1/tasks", "/v1/events"))
    ['/v1/events', '/v1/tasks']
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager

try:
    from fastapi import FastAPI, Request
except ImportError as exc:  # pragma: no cover - the extra is missing
    raise ImportError("tether serve needs its extra: pip install 'tether[serve]'") from exc

from tether.checks import check_id, check_positive
from tether.runtime.app import App
from tether.runtime.liveness import ALIVE_WITHIN
from tether.serve._ids import SegmentedPaths
from tether.serve._listing import Listings
from tether.serve._openapi import ERROR_RESPONSES, describe, operation_id
from tether.serve._tenants import TenantApps
from tether.serve.api import Serving, build_router
from tether.serve.auth import LOOPBACK_HOSTS, Principal, authenticate
from tether.serve.feed import ChangeFeed
from tether.serve.keys import KeyRing
from tether.serve.operations import add_operations
from tether.serve.problems import add_error_handlers, status_of
from tether.serve.ui import build_pages
from tether.store import Store, open_store

__all__ = ["create_app", "status_of"]

KEY_CHECK_AGE = 1.0
"""Seconds the server trusts its last read of the API keys when an open stream checks its key."""


def create_app(
    app_or_url: App | Store | str,
    *,
    no_auth: bool = False,
    tenant: str = "default",
    allowed_hosts: frozenset[str] | set[str] | None = None,
    cache_bytes: int = 64 * 1024 * 1024,
    cache_tenants: int = 8,
    alive_within: float = ALIVE_WITHIN,
) -> FastAPI:
    """The ASGI app: the ``/v1`` API, its OpenAPI document, and the web inspector.

    Args:
        app_or_url: an :class:`~tether.App`, a store, or a store URL. Tasks run in workers, never
            here; of an App, the server uses its store and its registered tasks (to fork a task
            with new inputs, checked against its signature).
        no_auth: answer without keys, as ``tenant``, to loopback ``Host`` names only (a local
            inspector). ``tether serve`` refuses it on a non-loopback bind.
        tenant: the tenant of ``no_auth`` mode; with keys, each key names its own.
        allowed_hosts: ``Host`` names accepted under ``no_auth`` (default: loopback names).
        cache_bytes: the most the server keeps of the tasks it read, folded, in bytes of their
            stored events, for all its threads and tenants together (see ``docs/serve.md``).
        cache_tenants: how many tenants' folded tasks it keeps at once, each in an equal share
            of ``cache_bytes`` (the least recently served tenant's dropped first).
        alive_within: seconds after its last liveness record that a worker which has not said it
            stopped counts as alive, for the task page and ``GET /v1/workers`` (default 90, three of
            a worker's heartbeats; shorter suits workers started with a shorter ``--heartbeat``).
    """
    check_positive(alive_within, "alive_within")
    store = app_or_url.store if isinstance(app_or_url, App) else app_or_url
    if isinstance(store, str):
        store = open_store(store)
    check_id(tenant, "tenant")
    code = app_or_url.registry if isinstance(app_or_url, App) else None
    apps = TenantApps(store, cache_bytes=cache_bytes, tenants=cache_tenants, registry=code)
    keys = KeyRing(store)
    feed = ChangeFeed(store)
    hosts = frozenset(allowed_hosts) if allowed_hosts is not None else LOOPBACK_HOSTS
    principal, live = _principals(keys, no_auth_tenant=tenant if no_auth else None, hosts=hosts)
    api = _api(feed)
    api.state.store = store  # close it when done if create_app opened it from a URL
    api.state.keys = keys
    api.state.feed = feed
    api.state.listings = listings = Listings(feed)  # the live task list's reads, shared by its clients
    api.state.no_auth = no_auth
    api.state.authenticate = principal
    api.state.apps = apps  # one App per tenant, shared by the request threads
    add_error_handlers(api)
    describe(api, no_auth=no_auth)
    api.add_middleware(SegmentedPaths)  # an id's %2F stays in its path segment
    add_operations(api, store)  # /healthz, /readyz, /metrics and the access log
    serving = Serving(apps, feed.bump, feed, listings, live, has_code=code is not None, alive_within=alive_within)
    api.include_router(build_router(serving), responses=ERROR_RESPONSES)
    api.include_router(build_pages(apps, principal, keys, no_auth=no_auth, alive_within=alive_within))
    return api


def _principals(
    keys: KeyRing, *, no_auth_tenant: str | None, hosts: frozenset[str]
) -> tuple[Callable[[Request], Principal], Callable[[Principal], bool]]:
    """Who a request is (authenticated by its key, or ``no_auth_tenant`` to ``hosts``), and whether
    a principal may still be answered (its key not revoked since, as an open stream checks)."""

    def principal(request: Request) -> Principal:
        who = authenticate(request, keys, no_auth_tenant=no_auth_tenant, allowed_hosts=hosts)
        request.state.principal = who  # authenticated: its errors may say more (see _add_error_handlers)
        return who

    def live(who: Principal) -> bool:
        return who.key_id is None or keys.live(who.key_id, max_age=KEY_CHECK_AGE)

    return principal, live


def _api(feed: ChangeFeed) -> FastAPI:
    """The FastAPI application, described, with the change feed running while it serves."""
    return FastAPI(
        title="tether",
        version="1",
        description="Durable state for AI agents: tasks, their history and state, control, inputs, sessions.",
        lifespan=_feed_running(feed),
        docs_url=None,  # the interactive docs pages load their script from a CDN: the document is enough
        redoc_url=None,
        responses=ERROR_RESPONSES,
        generate_unique_id_function=operation_id,  # stable ids: the routes' names, not FastAPI's made-up ones
    )


def _feed_running(feed: ChangeFeed) -> Callable[[FastAPI], AbstractAsyncContextManager[None]]:
    """The ASGI lifespan: the change feed's thread runs while the server does."""

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        feed.start()
        try:
            yield
        finally:
            feed.stop()

    return lifespan
