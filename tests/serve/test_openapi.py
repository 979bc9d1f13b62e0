"""The OpenAPI document fuzzed with schemathesis: no 5xx, and every answer fits the document."""

from __future__ import annotations

from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis import checks

from tests.serve.conftest import Served


@pytest.fixture(params=["sqlite", "postgres"])
def store_url(request: pytest.FixtureRequest, tmp_path: Any) -> Any:
    """Only the durable backends here: the fuzzing is the slow part of the suite."""
    from tests.conftest import pg_url

    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'tether.db'}"
    else:
        yield from pg_url()


def test_no_5xx_and_answers_fit_the_document(served: Served) -> None:
    loaded = schemathesis.openapi.from_asgi("/openapi.json", served.asgi)
    schema = loaded.exclude(path_regex=r"/events$")  # endless streams: covered by test_live.py
    operations = [result.ok() for result in schema.get_all_operations()]
    real_ids = {"task_id": served.waiting, "session_id": "s1", "user_id": "u1", "key": "approve"}
    assert len(operations) >= 15
    for operation in operations:

        @given(case=operation.as_strategy(), real=st.sampled_from([False, True]))
        @settings(
            max_examples=25,
            deadline=None,
            database=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
        )
        def fuzz(case: Any, real: bool) -> None:
            if real:  # half the cases ask about things that exist, so the fuzz reaches past the 404s
                for name, value in real_ids.items():
                    if name in (case.path_parameters or {}):
                        case.path_parameters[name] = value
            # Every default check but positive_data_acceptance: a request can fit the document and still
            # be the caller's mistake the document cannot express (a step the task never ran, an
            # answer that does not fit the wait's own schema); those are 400s, with a code.
            case.call_and_validate(headers=served.headers(), excluded_checks=[checks.positive_data_acceptance])

        fuzz()
