"""tether.testing: the conformance kit a backend runs to prove that tether works on it.

It is a pytest plugin and the checks it runs: the Store protocol's contract, split by capability
(appends and versions, leases and fencing, claiming, listing, snapshots, the ledger, tenants), and
the runtime's behaviour on top of it (tasks, recorded calls, waits and wake-ups, sessions, time
travel, ...). Every check takes a fresh, empty namespace of the backend (a file for SQLite, a schema
for PostgreSQL). Checks of an optional capability the backend lacks are skipped with the kit's
reason, and the run ends with a table of what was proven on each backend.

Run it against a store URL (the plugin is registered by tether's ``pytest11`` entry point; without
it, add ``-p tether.testing``)::

    pytest --pyargs tether.testing --tether-url=sqlite:///x.db
    pytest --pyargs tether.testing --tether-url=postgresql://me@localhost/db -n 4

A new backend describes itself with a :class:`Backend` (how to make a fresh namespace, which
optional capabilities it has, how to dump what it holds), returned from the
``pytest_tether_backend`` hook of a plugin.

Nothing in tether imports this package: it imports pytest.
"""

from __future__ import annotations

from tether.testing.backends import Backend, MemoryBackend, PostgresBackend, SQLiteBackend, Target
from tether.testing.capabilities import CAPABILITIES, Capability
from tether.testing.plugin import (
    dump_database,
    opens_share,
    pytest_addhooks,
    pytest_addoption,
    pytest_collection_modifyitems,
    pytest_configure,
    pytest_generate_tests,
    pytest_report_header,
    pytest_sessionstart,
    store,
    store_url,
    tether_backend,
)

__all__ = [
    "CAPABILITIES",
    "Backend",
    "Capability",
    "MemoryBackend",
    "PostgresBackend",
    "SQLiteBackend",
    "Target",
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
