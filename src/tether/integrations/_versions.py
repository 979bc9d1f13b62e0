"""The framework versions each adapter is tested with, and the check each runs when imported.

An extra admits the tested minor series and the next one (``openai-agents>=0.24,<0.26``), so a
framework's new minor release can be installed the day it ships; an adapter imported beside a
version outside its tested series says so once, naming the series, instead of failing later in a
way that looks like tether's bug.
"""

from __future__ import annotations

import re
import warnings
from importlib import metadata

__all__ = ["TESTED", "UntestedVersionWarning", "check_tested", "tested_range"]

TESTED: dict[str, tuple[str, str]] = {
    # distribution: (the first version tested, the minor series tested)
    "langgraph": ("1.2.24", "1.2"),
    "langgraph-checkpoint": ("4.3.2", "4.3"),
    "openai-agents": ("0.24.0", "0.24"),
    "pydantic-ai-slim": ("2.68.0", "2.68"),
    "google-adk": ("2.13.0", "2.13"),
}


class UntestedVersionWarning(UserWarning):
    """A framework is installed at a version its tether adapter was not tested with."""


def _release(version: str) -> tuple[int, ...]:
    """``1.2.24`` -> (1, 2, 24); a pre-release or local suffix ends it (``1.3.0rc1`` -> (1, 3, 0))."""
    found = re.match(r"\d+(?:\.\d+)*", version)
    return tuple(int(part) for part in found.group().split(".")) if found else ()


def tested_range(distribution: str) -> str:
    """The versions of ``distribution`` its adapter is tested with, as a requirement: ``>=1.2.24,<1.3``."""
    first, series = TESTED[distribution]
    major, minor = _release(series)
    return f">={first},<{major}.{minor + 1}"


def check_tested(distribution: str, adapter: str) -> None:
    """Warn (:class:`UntestedVersionWarning`) when the installed ``distribution`` is outside the range
    ``adapter`` is tested with; say nothing when it is inside, or when its version cannot be read."""
    try:
        installed = metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return
    first, series = TESTED[distribution]
    version = _release(installed)
    if _release(first) <= version and version[:2] == _release(series):
        return
    warnings.warn(
        f"{adapter} is tested with {distribution}{tested_range(distribution)}; {installed} is installed. "
        f"If something fails, install a tested version: pip install '{distribution}{tested_range(distribution)}'",
        UntestedVersionWarning,
        stacklevel=3,
    )
