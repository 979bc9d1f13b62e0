"""The hooks the kit asks of the plugins and conftest files around it."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from tether.testing.backends import Backend, Target


@pytest.hookspec(firstresult=True)
def pytest_tether_backend(url: str) -> Backend | None:
    """The :class:`~tether.testing.Backend` for a store URL the kit does not know (a new backend's
    scheme), or ``None`` to leave it to another plugin. tether's own backends need none."""


@pytest.hookspec(firstresult=True)
def pytest_tether_targets(config: pytest.Config) -> list[Target] | None:
    """The backends to run on when no ``--tether-url`` is given: a list of
    :class:`~tether.testing.Target` (a URL, and a reason to skip it, if it cannot be reached
    here). A repository that proves several backends on every run answers it in its conftest."""
