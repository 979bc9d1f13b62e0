"""PostgreSQL faults: connections that say whose they are, schema names checked at open,
and every wait bounded when the server goes away."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import tether
from tests.conftest import PG_URL, pg_url


@pytest.fixture
def url() -> Iterator[str]:
    yield from pg_url("pgf")


def test_connections_carry_the_schema_in_application_name(url: str) -> None:
    import psycopg

    app = tether.App(url)
    app.session("s1").add("user", "hi")
    schema = url.rpartition("schema=")[2]
    with psycopg.connect(PG_URL, autocommit=True) as admin:
        names = [
            r[0]
            for r in admin.execute(
                "SELECT application_name FROM pg_stat_activity WHERE datname = current_database() "
                "AND pid <> pg_backend_pid() AND application_name = %s",
                (f"tether:{schema}",),
            )
        ]
        assert names, "tether's connections are not tagged with their schema"
        # Ending only our own leaves every other client alone, and tether recovers.
        admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s",
            (f"tether:{schema}",),
        )
        assert admin.execute("SELECT 1").fetchone() == (1,)
    assert [m.content for m in app.session("s1").messages()] == ["hi"]
    app.close()
