"""What a backend may or may not be able to do, beyond what every backend must.

Every check of the kit holds on every backend, except those marked
``@pytest.mark.tether_requires(name)``: those prove one optional capability, and on a backend
that lacks it they are skipped with the reason written here.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["CAPABILITIES", "Capability"]


@dataclass(frozen=True, slots=True)
class Capability:
    """An optional capability: its name, what a backend that has it does, and what one that lacks it
    does instead (the text of the skip)."""

    name: str
    means: str
    lacking: str


CAPABILITIES: dict[str, Capability] = {
    capability.name: capability
    for capability in (
        Capability(
            "cross_process",
            "another open of the URL, in this process or another, sees the same database",
            "keeps its data inside one store object: another open of the URL, or another process, sees none of it",
        ),
        Capability(
            "durable",
            "what was committed outlives the process that wrote it (killed with SIGKILL, or restarted)",
            "does not outlive the process that wrote it",
        ),
        Capability(
            "push",
            "wait_for_change returns as soon as the same store object commits (LISTEN/NOTIFY-style wake-ups)",
            "wakes a waiting reader on other connections' commits only, or when its wait runs out",
        ),
        Capability(
            "dump",
            "the kit can read everything the backend holds, to prove that an operation wrote nothing",
            "gives the kit no dump of what it holds (Backend.dump), so a check that nothing was written cannot run",
        ),
    )
}
