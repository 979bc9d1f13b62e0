"""Who is asking: API keys (header or the inspector's cookie), CSRF, and the loopback-only open mode.

A request names its key in ``Authorization: Bearer KEY`` (or ``X-Tether-Key: KEY``); the web
inspector's login puts it in an HttpOnly, ``SameSite=Strict`` cookie instead. A browser sends
that cookie by itself, so every request that changes something and is authenticated by the
cookie (or by nothing, under ``--no-auth``) must also carry ``X-Tether-CSRF`` equal to the
``tether_csrf`` cookie: a page of another origin can neither read that cookie nor set that
header without a CORS preflight, which this server never grants. Under ``--no-auth`` the
``Host`` header must be a loopback name too, so a DNS-rebinding page cannot reach the API; a
script there (curl, httpx: a request that carries neither ``Origin`` nor ``Sec-Fetch-Site``, as
every browser's page request does) changes things without the CSRF header, and a browser's
request still needs it.
"""

from __future__ import annotations

import hmac
import secrets
from dataclasses import dataclass

from starlette.requests import Request

from tether.errors import TetherError
from tether.serve.keys import KeyRing

__all__ = [
    "CSRF_COOKIE",
    "CSRF_HEADER",
    "KEY_COOKIE",
    "NO_AUTH_ACTOR",
    "AuthError",
    "Principal",
    "authenticate",
    "csrf_matches",
    "new_csrf_token",
]

KEY_COOKIE = "tether_key"
CSRF_COOKIE = "tether_csrf"
CSRF_HEADER = "x-tether-csrf"
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1", "[::1]"})
_SAFE = frozenset({"GET", "HEAD", "OPTIONS"})
NO_AUTH_ACTOR = "no-auth"
"""The name writes are recorded under when the server runs with ``--no-auth`` (no key says who)."""


class AuthError(TetherError):
    """The request has no usable key (401) or fails the CSRF check (403)."""

    code = "unauthorized"

    def __init__(self, message: str, *, status: int = 401, code: str = "unauthorized") -> None:
        super().__init__(message)
        self.code = code
        self._status = status

    @property
    def status(self) -> int:
        return self._status


@dataclass(frozen=True)
class Principal:
    """The tenant a request acts in and the name its writes are recorded under."""

    tenant: str
    name: str
    via: str
    """``header``, ``cookie`` or ``none`` (``--no-auth``)."""
    key_id: str | None = None
    """The API key's id (``None`` under ``--no-auth``): a long answer checks it is still live."""


def new_csrf_token() -> str:
    return secrets.token_urlsafe(24)


def csrf_matches(token: str, sent: str) -> bool:
    """Whether ``sent`` is the CSRF ``token`` (compared in constant time). Both come from the
    request, which may send any byte: they are compared as UTF-8 bytes, since
    ``hmac.compare_digest`` refuses text that is not ASCII (a header of another alphabet answered 500)."""
    return bool(token) and hmac.compare_digest(token.encode("utf-8", "replace"), sent.encode("utf-8", "replace"))


def _host_name(request: Request) -> str:
    host = request.headers.get("host", "")
    if host.startswith("["):
        return host.partition("]")[0] + "]"
    return host.rpartition(":")[0] if ":" in host else host


def authenticate(
    request: Request, keys: KeyRing, *, no_auth_tenant: str | None, allowed_hosts: frozenset[str]
) -> Principal:
    """The principal of ``request``, or :class:`AuthError`."""
    if no_auth_tenant is not None:
        if _host_name(request) not in allowed_hosts:
            raise AuthError(
                "this server runs without keys and answers loopback hosts only", status=403, code="bad_host"
            )
        principal = Principal(no_auth_tenant, NO_AUTH_ACTOR, "none")
    else:
        principal = _from_key(request, keys)
    if request.method not in _SAFE and principal.via != "header" and not _script_without_keys(request, principal):
        if not csrf_matches(request.cookies.get(CSRF_COOKIE, ""), request.headers.get(CSRF_HEADER, "")):
            raise AuthError(
                f"a change made by a browser needs the {CSRF_HEADER} header equal to the {CSRF_COOKIE} cookie",
                status=403,
                code="csrf_failed",
            )
    return principal


def _script_without_keys(request: Request, principal: Principal) -> bool:
    """Whether a request under ``--no-auth`` comes from a script, not a browser's page: it carries
    neither ``Origin`` nor ``Sec-Fetch-Site``. Browsers send ``Origin`` with every cross-origin
    request and every POST, and ``Sec-Fetch-Site`` with every request, and a page cannot remove
    them, so another site's page cannot pass for a script (the rule of Go's
    ``http.CrossOriginProtection``). With keys, a browser's cookie always needs the CSRF header."""
    headers = request.headers
    return principal.via == "none" and "origin" not in headers and "sec-fetch-site" not in headers


def _from_key(request: Request, keys: KeyRing) -> Principal:
    auth = request.headers.get("authorization", "")
    secret = ""
    via = "header"
    if auth[:7].lower() == "bearer ":
        secret = auth[7:].strip()
    elif request.headers.get("x-tether-key"):
        secret = request.headers["x-tether-key"].strip()
    elif request.cookies.get(KEY_COOKIE):
        secret, via = request.cookies[KEY_COOKIE], "cookie"
    if not secret:
        raise AuthError("an API key is needed: Authorization: Bearer KEY (make one with `tether keys create`)")
    key = keys.verify(secret)
    if key is None:
        raise AuthError("this API key is not valid (unknown or revoked)")
    return Principal(key.tenant, key.name, via, key.key_id)
