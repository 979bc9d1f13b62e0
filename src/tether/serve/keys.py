"""API keys for ``tether serve``, kept in the tether database itself.

A key belongs to one tenant and has a name (the actor its writes are recorded under). The key
is shown once, when it is made; the store keeps only its SHA-256 (the secret is 32 random bytes,
so a slow hash would add nothing). Keys live in an internal stream (type ``tether.keys``) of a
tenant of their own, ``tether-system``, so no tenant's task listing or API can reach them, and no
store schema changes were needed.

Example:
    >>> import tether
    >>> from tether.serve.keys import KeyRing
    >>> ring = KeyRing(tether.open_store("memory://"))
    >>> secret, key = ring.create(tenant="acme", name="ci")
    >>> ring.verify(secret) == key
    True
"""

from __future__ import annotations

import hashlib
import hmac
import math
import secrets
import threading
import time
from dataclasses import dataclass

from tether.checks import check_id
from tether.errors import InvalidInputError
from tether.events import Event, define_event
from tether.log import TaskLog
from tether.log.conflicts import retry_on_conflict
from tether.log.streams import Stream
from tether.store import Store

__all__ = ["SYSTEM_TENANT", "ApiKey", "KeyCreated", "KeyRevoked", "KeyRing"]

SYSTEM_TENANT = "tether-system"
"""The tenant that holds tether's own records (API keys): never a tenant of tasks."""
_STREAM = "keys"
_TYPE = "tether.keys"
_PREFIX = "tk"


@define_event
class KeysOpened(Event):
    """The key stream's first event."""

    def describe(self) -> str:
        return "API keys opened"


@define_event
class KeyCreated(Event):
    key_id: str
    tenant: str
    name: str
    sha256: str
    created_at: float

    def describe(self) -> str:  # its hash is not shown: a line is for people, not for matching keys
        return f"API key {self.key_id} created for tenant {self.tenant} ({self.name})"


@define_event
class KeyRevoked(Event):
    key_id: str

    def describe(self) -> str:
        return f"API key {self.key_id} revoked"


@dataclass(frozen=True)
class ApiKey:
    """A key as the server knows it: never the secret, only who it speaks for."""

    key_id: str
    tenant: str
    name: str
    created_at: float
    revoked: bool = False


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


class KeyRing:
    """The API keys of one store: create, list, revoke, verify."""

    def __init__(self, store: Store) -> None:
        self._stream = Stream(TaskLog(store, tenant=SYSTEM_TENANT), _STREAM, _TYPE)
        self._lock = threading.Lock()
        self._keys: dict[str, tuple[ApiKey, str]] = {}  # key_id -> (key, sha256)
        self._version = 0
        self._read_at = -math.inf
        """When the last read of the key stream began (``time.monotonic``)."""

    def _refresh(self) -> int:
        with self._lock:
            return self._read()

    def _read(self) -> int:
        """Read the key events since the last read (under ``_lock``)."""
        started = time.monotonic()
        if not self._stream.exists():
            self._read_at = started
            return 0
        for rec in self._stream.read(after=self._version):
            event = rec.event
            if isinstance(event, KeyCreated):
                key = ApiKey(event.key_id, event.tenant, event.name, event.created_at)
                self._keys[event.key_id] = (key, event.sha256)
            elif isinstance(event, KeyRevoked) and event.key_id in self._keys:
                old, digest = self._keys[event.key_id]
                self._keys[event.key_id] = (ApiKey(old.key_id, old.tenant, old.name, old.created_at, True), digest)
            self._version = rec.seq
        self._read_at = started
        return self._version

    def live(self, key_id: str, *, max_age: float) -> bool:
        """Whether ``key_id`` is a key not revoked, as the store said at most ``max_age`` seconds ago:
        the key stream is read again only when the last read is older, so the open streams of a
        server, which each ask every few seconds, read it once for them all."""
        with self._lock:
            if time.monotonic() - self._read_at > max_age:
                self._read()
            found = self._keys.get(key_id)
        return found is not None and not found[0].revoked

    def create(self, *, tenant: str, name: str) -> tuple[str, ApiKey]:
        """Make a key for ``tenant`` named ``name``; returns ``(secret, key)``. The secret is not kept."""
        check_id(tenant, "tenant")
        check_id(name, "name")
        if tenant == SYSTEM_TENANT:
            raise InvalidInputError(f"{SYSTEM_TENANT!r} holds tether's own records; it is not a tenant of tasks")
        self._stream.create(KeysOpened())
        key_id = secrets.token_hex(6)
        secret = f"{_PREFIX}_{key_id}_{secrets.token_urlsafe(32)}"
        key = ApiKey(key_id, tenant, name, time.time())
        event = KeyCreated(key_id=key_id, tenant=tenant, name=name, sha256=_digest(secret), created_at=key.created_at)
        self._append(event)
        return secret, key

    def revoke(self, key_id: str) -> ApiKey:
        """Revoke a key: requests made with it are refused from then on."""
        self._refresh()
        found = self._keys.get(key_id)
        if found is None:
            raise InvalidInputError(f"no API key {key_id!r}; `tether keys list` shows them")
        self._append(KeyRevoked(key_id=key_id))
        self._refresh()
        return self._keys[key_id][0]

    def _append(self, event: Event) -> None:
        retry_on_conflict(lambda: self._stream.append([event], self._stream.version()), stream=_STREAM, tries=20)

    def list(self) -> list[ApiKey]:
        self._refresh()
        return sorted((k for k, _ in self._keys.values()), key=lambda k: k.created_at)

    def verify(self, secret: str) -> ApiKey | None:
        """The live key ``secret`` is, or ``None``. Compared in constant time."""
        parts = secret.split("_")
        if len(parts) < 3 or parts[0] != _PREFIX:
            return None
        key_id = parts[1]
        found = self._keys.get(key_id)
        if found is None:  # made since we last looked, perhaps
            self._refresh()
            found = self._keys.get(key_id)
        if found is None:
            return None
        key, digest = found
        if not hmac.compare_digest(digest, _digest(secret)):
            return None
        if not key.revoked:  # a revocation may have landed since: look again before saying yes
            self._refresh()
            key = self._keys[key_id][0]
        return None if key.revoked else key
