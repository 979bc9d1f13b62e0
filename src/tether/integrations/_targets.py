"""What every adapter's constructor takes: a store URL or an :class:`~tether.App`, one convention.

A URL opens an app of the adapter's own (closed by the adapter's ``close()``); an app is shared and
stays the caller's to close. ``tether+`` before a URL's scheme (``tether+sqlite:///agent.db``) is how
a framework's registry of URL schemes names tether (ADK's ``services.yaml``, ``--session_service_uri``);
the adapters take it everywhere, so one URL works in the framework's configuration and in code.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tether.errors import ConfigurationError

if TYPE_CHECKING:
    from tether.runtime.app import App

__all__ = ["SCHEME_PREFIX", "Target", "one_target", "open_target"]

SCHEME_PREFIX = "tether+"
_EXAMPLES = "a store URL (sqlite:///agent.db, postgresql://…, memory://, tether+sqlite:///agent.db) or a tether.App"


class Target:
    """The app an adapter works on, and whether the adapter opened it (and so closes it)."""

    __slots__ = ("app", "owned")

    def __init__(self, app: App, owned: bool) -> None:
        self.app = app
        self.owned = owned

    def close(self) -> None:
        if self.owned:
            self.app.close()


def open_target(target: Any, owner: str, *, tenant: str | None = None) -> Target:
    """The app ``target`` names for the adapter ``owner`` (its class name, for the error): a URL (with
    or without ``tether+``; ``None`` is tether's default database) opens one, scoped to ``tenant``; an
    app is used as it is (a ``tenant`` other than its own is refused). Anything else raises
    :class:`~tether.ConfigurationError` naming what was given and what is expected."""
    from tether.runtime.app import App

    if isinstance(target, App):
        if tenant is not None and tenant != target.tenant:
            raise ConfigurationError(
                f"{owner} was given an App of tenant {target.tenant!r} and tenant={tenant!r}: "
                "an App brings its own tenant (pass a URL to choose one)"
            )
        return Target(target, owned=False)
    if target is None or isinstance(target, str):
        url = target.removeprefix(SCHEME_PREFIX) if target else None
        if url is not None and not url.strip():
            raise ConfigurationError(f"{owner} was given an empty URL; it takes {_EXAMPLES}")
        return Target(App(url, tenant=tenant or "default"), owned=True)
    shown = repr(target)
    shown = shown if len(shown) <= 80 else shown[:77] + "..."
    raise ConfigurationError(f"{owner} takes {_EXAMPLES}, not {type(target).__name__} {shown}")


def one_target(target: Any, uri: str | None, owner: str) -> Any:
    """``target`` or ``uri`` (the keyword a framework's registry passes a URL by), never both."""
    if uri is None:
        return target
    if target is not None:
        raise ConfigurationError(f"{owner} was given both a target ({target!r}) and uri={uri!r}: pass one")
    if not isinstance(uri, str):
        raise ConfigurationError(f"{owner}'s uri must be a store URL, not {type(uri).__name__} {uri!r}")
    return uri
