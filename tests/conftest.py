from __future__ import annotations

import os

import pytest

# Backends every conformance test runs against. PostgreSQL joins through TETHER_TEST_PG_URL
# once its backend lands.
BACKENDS = ["memory", "sqlite"]


@pytest.fixture(params=BACKENDS)
def store_url(request: pytest.FixtureRequest, tmp_path: os.PathLike[str]) -> str:
    if request.param == "memory":
        return "memory://"
    return f"sqlite:///{os.path.join(tmp_path, 'tether.db')}"
