"""The pytest plugin: the ``--tether-url`` option, the backends it names, the fixtures every check of
the kit takes (a fresh namespace per test), the skips of capabilities a backend lacks, and the
report of what was proven."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tether.store import Store, open_store
from tether.testing import hookspecs
from tether.testing.backends import Backend, Target, builtin_backend
from tether.testing.capabilities import CAPABILITIES
from tether.testing.report import TAG, Proof

__all__ = [
    "dump_database",
    "opens_share",
    "pytest_addhooks",
    "pytest_addoption",
    "pytest_collection_modifyitems",
    "pytest_configure",
    "pytest_generate_tests",
    "pytest_report_header",
    "pytest_sessionstart",
    "store",
    "store_url",
    "tether_backend",
]

NO_TARGET = "no backend to run on: pass --tether-url=URL (memory://, sqlite:///x.db, postgresql://…)"
KIT = "tether.testing."


_targets_key = pytest.StashKey[list[Target]]()
_explicit_key = pytest.StashKey[bool]()
_made: dict[str, Backend] = {}  # the URL of each namespace handed out in this process -> its backend


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    pluginmanager.add_hookspecs(hookspecs)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("tether", "tether.testing: the conformance kit of tether's backends")
    group.addoption(
        "--tether-url",
        action="append",
        default=[],
        dest="tether_urls",
        metavar="URL",
        help="a store URL to prove (memory://, sqlite:///x.db, postgresql://…); give it again for several",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "tether_requires(*capabilities): the check proves optional capabilities; skipped on a backend without them",
    )
    urls: list[str] = config.getoption("tether_urls", default=[]) or []
    targets = [Target(url) for url in urls] if urls else list(config.hook.pytest_tether_targets(config=config) or [])
    seen: dict[str, int] = {}
    for target in targets:
        target.backend = _backend_for(config, target.url)
        name = target.backend.name
        seen[name] = seen.get(name, 0) + 1
        target.id = name if seen[name] == 1 else f"{name}{seen[name]}"
    config.stash[_targets_key] = targets
    config.stash[_explicit_key] = bool(urls)
    if targets:
        config.pluginmanager.register(Proof([t.id for t in targets]), "tether.testing.proof")


def _backend_for(config: pytest.Config, url: str) -> Backend:
    backend: Backend | None = config.hook.pytest_tether_backend(url=url) or builtin_backend(url)
    if backend is None:
        raise pytest.UsageError(
            f"tether.testing does not know the backend of {url!r}: a plugin must answer pytest_tether_backend "
            "for it (see tether.testing.Backend)"
        )
    return backend


def pytest_sessionstart(session: pytest.Session) -> None:
    """A URL given on the command line must be reachable: its author asked for it to be proven."""
    config = session.config
    if not config.stash.get(_explicit_key, False) or hasattr(config, "workerinput"):
        return
    for target in config.stash[_targets_key]:
        problem = target.backend.problem()
        if problem:
            raise pytest.UsageError(f"--tether-url={target.url}: {problem}")


def pytest_report_header(config: pytest.Config) -> list[str]:
    lines = []
    for target in config.stash.get(_targets_key, []):
        backend = target.backend
        declared = sorted(backend.capabilities) if backend.capabilities is not None else ["probed"]
        where = f"skipped — {target.skip}" if target.skip else target.url
        lines.append(f"tether.testing {target.id}: {where} (optional capabilities: {', '.join(declared) or 'none'})")
    return lines


@pytest.hookimpl(tryfirst=True)
def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "tether_backend" not in metafunc.fixturenames:
        return
    targets = metafunc.config.stash[_targets_key]
    if not targets:
        empty = pytest.param(None, marks=pytest.mark.skip(reason=NO_TARGET), id="no-backend")
        metafunc.parametrize("tether_backend", [empty], indirect=True)
        return
    metafunc.parametrize("tether_backend", targets, ids=[t.id for t in targets], indirect=True)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tag each of the kit's own checks with its backend, its capability (for the contract, its module:
    ``contract/appends``; for the runtime, its package: ``runtime/waits``) and the optional
    capabilities it needs, for the report."""
    for item in items:
        callspec = getattr(item, "callspec", None)
        module = getattr(getattr(item, "module", None), "__name__", "")
        if callspec is None or not module.startswith(KIT) or "tether_backend" not in callspec.params:
            continue
        target = callspec.params["tether_backend"]
        if not isinstance(target, Target):
            continue
        parts = module.removeprefix(KIT).split(".")  # contract.test_appends, runtime.waits.test_waiting
        area = "/".join(parts[:-1] if len(parts) > 2 else [parts[0], parts[1].removeprefix("test_")])
        requires = [name for mark in item.iter_markers("tether_requires") for name in mark.args]
        item.user_properties.append((TAG, (target.id, area, tuple(requires))))


@pytest.fixture
def tether_backend(request: pytest.FixtureRequest) -> Backend:
    """The backend this test runs on (parametrized over every ``--tether-url``); skips the test
    when the backend cannot run here or lacks a capability the test requires."""
    target: Target | None = getattr(request, "param", None)
    if target is None:
        pytest.skip(NO_TARGET)
    if target.skip:
        pytest.skip(target.skip)
    for mark in request.node.iter_markers("tether_requires"):
        for name in mark.args:
            if name not in CAPABILITIES:
                pytest.fail(f"tether_requires({name!r}): no such capability; known: {sorted(CAPABILITIES)}")
            if not target.backend.has(name):
                pytest.skip(f"{target.id} lacks {name}: it {CAPABILITIES[name].lacking}")
    return target.backend


@pytest.fixture
def store_url(tether_backend: Backend, tmp_path: Path) -> Iterator[str]:
    """A URL to an empty database of this test's own: a file in its temporary directory for SQLite,
    a schema of its own for PostgreSQL (tether's tables, no rows), a new store for each open of
    ``memory://``."""
    with tether_backend.namespace(tmp_path) as url:
        _made[url] = tether_backend
        yield url
        _made.pop(url, None)


@pytest.fixture
def store(store_url: str) -> Iterator[Store]:
    """The store at :func:`store_url`, closed afterwards."""
    opened = open_store(store_url)
    yield opened
    opened.close()


def _backend_of(url: str) -> Backend:
    backend = _made.get(url) or builtin_backend(url)
    if backend is None:
        raise LookupError(f"no backend the kit knows made {url!r}")
    return backend


def opens_share(url: str) -> bool:
    """Whether another open of ``url`` sees what this one wrote: the backend has ``cross_process``
    (a memory store is its opener's own). A check that needs a second view of the same database
    opens the URL again when this is true, and reuses its store object when it is not.

    Example:
        >>> opens_share("memory://")
        False
    """
    return _backend_of(url).has("cross_process")


def dump_database(url: str, store: Store | None = None) -> object:
    """Everything the database at ``url`` holds, to compare before and after an operation that must
    write nothing: SQLite's SQL dump, every table of a PostgreSQL schema, the memory store's
    dictionaries (``store`` is the open store; an in-process backend is dumped from it). A check
    that calls it is marked ``tether_requires("dump")``."""
    backend = _backend_of(url)
    try:
        return backend.dump(url, store)
    except NotImplementedError:
        pytest.skip(f"{backend.name} lacks dump: it {CAPABILITIES['dump'].lacking}")
