"""Records stored in an older shape are migrated on read: what needs no backend (the kit's
tether.testing.runtime.tasks.test_upcast reads them from every backend)."""

from __future__ import annotations

import orjson
import pytest

from tether.events import DEFAULT_UPCASTERS


@pytest.mark.parametrize(
    ("type_name", "old"),
    [
        ("TaskForked", {"task_id": "f", "parent_task_id": "p", "at": 3}),
        ("TaskArchived", {"task_id": "p~1", "successor": "p"}),
        ("RetryRequested", {"failure_type": "E", "failure_message": "m", "retired": [4], "calls": [1]}),
    ],
)
def test_a_write_action_without_an_actor_decodes(type_name: str, old: dict[str, object]) -> None:
    event = DEFAULT_UPCASTERS.decode(type_name, 1, orjson.loads(orjson.dumps(old)))
    assert type(event).__name__ == type_name and event.actor is None  # type: ignore[attr-defined]
