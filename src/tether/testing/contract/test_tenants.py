"""Tenants: a task of one tenant is invisible to every other."""

from __future__ import annotations

from tether.errors import TaskNotFoundError
from tether.store import Store, TaskFilter
from tether.testing.contract._records import _create, _expect


def test_tenants_never_see_each_other(store: Store) -> None:
    _create(store, "a")
    assert store.get_task("someone-else", "a") is None
    assert store.list_tasks("someone-else", TaskFilter()) == []
    _expect(TaskNotFoundError, lambda: store.read_events("someone-else", "a"))
