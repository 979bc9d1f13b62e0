"""The server's Apps: one per tenant, shared by every request thread, for a bounded number of tenants.

An App remembers the tasks it read, folded (its log's cache, ``cache_bytes``), and is safe to
share between threads (see :class:`tether.log.memory.Memory`). So the server keeps one App per
tenant, for the ``tenants`` tenants it served most recently, each with an equal share of the
server's ``cache_bytes``: what it keeps folded is bounded by that budget, not by how many
threads answer requests or how many tenants have keys. A tenant whose App was let go gets a new
one, empty, at its next request.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from tether.checks import check_int
from tether.errors import ConfigurationError
from tether.runtime.app import App
from tether.runtime.specs import Registry
from tether.serve.auth import AuthError, Principal
from tether.serve.keys import SYSTEM_TENANT
from tether.store import Store

__all__ = ["TenantApps"]


class TenantApps:
    """The tenant's App for a principal: ``TenantApps(store, cache_bytes=…, tenants=…)(principal)``.

    Args:
        store: the one store every App reads and writes.
        cache_bytes: the server's budget of folded tasks, in bytes of their stored events, split
            evenly between the Apps kept.
        tenants: how many tenants' Apps are kept at once (the least recently used let go first).
        registry: the tasks' code, when the server was given it (each App shares it).

    Example:
        >>> import tether
        >>> from tether.serve.auth import Principal
        >>> apps = TenantApps(tether.open_store("memory://"), cache_bytes=2**20, tenants=2)
        >>> apps(Principal("a", "ci", "header")) is apps(Principal("a", "bot", "header"))
        True
    """

    def __init__(self, store: Store, *, cache_bytes: int, tenants: int, registry: Registry | None = None) -> None:
        check_int(cache_bytes, "cache_bytes", low=0, error=ConfigurationError)
        check_int(tenants, "cache_tenants", low=1, error=ConfigurationError)
        self._store = store
        self._tenants = tenants
        self._registry = registry
        self.share = cache_bytes // tenants
        """The ``cache_bytes`` of each App."""
        self._apps: OrderedDict[str, App] = OrderedDict()  # the least recently used first
        self._lock = threading.Lock()

    def __call__(self, who: Principal) -> App:
        if who.tenant == SYSTEM_TENANT:  # never reachable with a key; refused all the same
            raise AuthError("no such tenant", status=403)
        with self._lock:
            app = self._apps.get(who.tenant)
            if app is not None:
                self._apps.move_to_end(who.tenant)
                return app
            app = self._apps[who.tenant] = self._new(who.tenant)
            while len(self._apps) > self._tenants:
                self._apps.popitem(last=False)  # requests under way keep theirs; nothing to close
            return app

    def _new(self, tenant: str) -> App:
        app = App(self._store, tenant=tenant, cache_bytes=self.share)
        if self._registry is not None:
            app.engine.registry = self._registry
        return app

    def kept(self) -> list[App]:
        """The Apps kept now, the least recently used first."""
        with self._lock:
            return list(self._apps.values())
