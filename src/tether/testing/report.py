"""The report at the end of a run: for each capability the kit proves (one per module of checks,
and each optional one), how many checks passed, failed and were skipped on each backend."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import pytest

from tether.testing.capabilities import CAPABILITIES

__all__ = ["TAG", "Proof"]

TAG = "tether.testing"
"""The name of the user property each of the kit's checks carries: (backend, capability, optional ones)."""

_RANK = {"passed": 0, "skipped": 1, "failed": 2}


@dataclass(slots=True)
class _Outcome:
    backend: str
    area: str
    requires: tuple[str, ...]
    outcome: str = ""
    reason: str = ""


@dataclass(eq=False)  # a plugin: registered, so hashed, by identity
class Proof:
    """Counts the outcome of each of the kit's checks (from its reports, so it counts what xdist
    workers ran too) and writes the table in the terminal summary."""

    backends: list[str]
    checks: dict[str, _Outcome] = field(default_factory=dict)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        tag = dict(report.user_properties).get(TAG)
        if not isinstance(tag, tuple | list):
            return
        backend, area, requires = tag
        check = self.checks.setdefault(report.nodeid, _Outcome(str(backend), str(area), tuple(requires)))
        if report.failed:
            outcome = "failed"
        elif report.skipped:
            outcome = "skipped"
            check.reason = (
                str(report.longrepr[2]).removeprefix("Skipped: ") if isinstance(report.longrepr, tuple) else ""
            )
        elif report.when == "call":
            outcome = "passed"
        else:
            return
        if not check.outcome or _RANK[outcome] > _RANK[check.outcome]:
            check.outcome = outcome

    def table(self) -> list[str]:
        """The report's lines: a row per capability, a column per backend."""
        counts: dict[tuple[str, str], Counter[str]] = {}
        areas: list[str] = []
        for check in self.checks.values():
            for area in (check.area, *(f"optional: {name}" for name in check.requires)):
                if area not in areas:
                    areas.append(area)
                counts.setdefault((area, check.backend), Counter())[check.outcome or "skipped"] += 1
        areas.sort(key=lambda a: (a.startswith("optional: "), a))
        cells = {key: _cell(counter) for key, counter in counts.items()}
        first = max([len("capability"), *map(len, areas)])
        widths = [max([len(b), *(len(cells.get((a, b), "")) for a in areas)]) for b in self.backends]
        columns = list(zip(self.backends, widths, strict=True))
        lines = ["  ".join(["capability".ljust(first), *(b.ljust(w) for b, w in columns)]).rstrip()]
        for area in areas:
            row = [cells.get((area, b), "-").ljust(w) for b, w in columns]
            lines.append("  ".join([area.ljust(first), *row]).rstrip())
        return lines + self._lacking()

    def _lacking(self) -> list[str]:
        """Why each optional capability was skipped where it was: the kit's reason, once per backend."""
        lacking = sorted(
            {
                (check.backend, name)
                for check in self.checks.values()
                for name in check.requires
                if check.outcome == "skipped" and check.reason.startswith(f"{check.backend} lacks {name}")
            }
        )
        return [f"{backend} lacks {name}: it {CAPABILITIES[name].lacking}" for backend, name in lacking]

    @pytest.hookimpl(trylast=True)
    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        if not self.checks:
            return
        terminalreporter.write_sep("=", "tether.testing: what each backend proved")
        for line in self.table():
            terminalreporter.write_line(line)


def _cell(counter: Counter[str]) -> str:
    parts = [f"{counter[o]} {o}" for o in ("passed", "failed", "skipped") if counter[o]]
    return ", ".join(parts) or "-"
