"""The task status machine and user-declared phase machines.

Every status change goes through :func:`check_status`; every phase change through
:meth:`Phases.check`. Both raise :class:`~tether.errors.InvalidTransition` naming
the two states, before anything is written.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from enum import Enum

from tether.errors import InvalidTransition, TaskDefinitionError

__all__ = ["TERMINAL", "Phases", "Status", "check_status"]


class Status(str, Enum):  # noqa: UP042 - str mixin keeps == "running" working
    """Where a task is in its life. The values are what is stored."""

    PENDING = "pending"
    RUNNING = "running"
    AWAITING_INPUT = "awaiting_input"
    SLEEPING = "sleeping"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"

    def __str__(self) -> str:
        return self.value


TERMINAL = frozenset({Status.COMPLETED, Status.FAILED, Status.CANCELLED})

# pending → running → (awaiting_input → running)* → completed | failed | cancelled
# running → sleeping → running; running → pending releases a task to the queue
# (graceful shutdown); a task may be cancelled from any state that is not terminal.
_ALLOWED: dict[Status, frozenset[Status]] = {
    Status.PENDING: frozenset({Status.RUNNING, Status.CANCELLED}),
    Status.RUNNING: frozenset(
        {
            Status.AWAITING_INPUT,
            Status.SLEEPING,
            Status.PENDING,
            Status.COMPLETED,
            Status.FAILED,
            Status.CANCELLED,
        }
    ),
    Status.AWAITING_INPUT: frozenset({Status.RUNNING, Status.CANCELLED}),
    Status.SLEEPING: frozenset({Status.RUNNING, Status.CANCELLED}),
    Status.COMPLETED: frozenset(),
    Status.FAILED: frozenset(),
    Status.CANCELLED: frozenset(),
}


def check_status(current: Status | None, target: Status) -> None:
    """Raise :class:`InvalidTransition` unless ``current → target`` is allowed.

    ``current`` is ``None`` only for a task being created, which must start ``pending``.
    """
    if current is None:
        if target is not Status.PENDING:
            raise InvalidTransition("status", None, target.value, [Status.PENDING.value])
        return
    if target not in _ALLOWED[current]:
        allowed = sorted(s.value for s in _ALLOWED[current])
        raise InvalidTransition("status", current.value, target.value, allowed)


class Phases:
    """A user-declared phase machine: each phase names the phases it may move to.

    Example:
        >>> phases = Phases({"planning": ["executing"], "executing": ["done"], "done": []},
        ...                 initial="planning")
        >>> phases.check("planning", "executing")
        >>> phases.check("planning", "done")
        Traceback (most recent call last):
        ...
        tether.errors.InvalidTransition: phase cannot move from 'planning' to 'done'; allowed from 'planning': executing
    """

    def __init__(self, transitions: Mapping[str, Iterable[str]], *, initial: str | None = None) -> None:
        graph = {phase: tuple(targets) for phase, targets in transitions.items()}
        for phase, targets in graph.items():
            for target in targets:
                if target not in graph:
                    graph_names = ", ".join(sorted(graph))
                    raise TaskDefinitionError(
                        f"phase {phase!r} leads to {target!r}, which is not a declared phase "
                        f"(declared: {graph_names}); add it as a key, with [] if it is final"
                    )
        if not graph:
            raise TaskDefinitionError("Phases needs at least one phase")
        start = initial if initial is not None else next(iter(graph))
        if start not in graph:
            raise TaskDefinitionError(f"initial phase {start!r} is not one of {sorted(graph)}")
        self.transitions = graph
        self.initial = start

    def check(self, current: str | None, target: str) -> None:
        if target not in self.transitions:
            raise InvalidTransition("phase", current, target, sorted(self.transitions))
        if current is None:
            if target != self.initial:
                raise InvalidTransition("phase", None, target, [self.initial])
            return
        allowed = self.transitions.get(current, ())
        if target not in allowed:
            raise InvalidTransition("phase", current, target, sorted(allowed))

    def to_dict(self) -> dict[str, list[str]]:
        return {phase: list(targets) for phase, targets in self.transitions.items()}

    def __repr__(self) -> str:
        return f"Phases({self.to_dict()!r}, initial={self.initial!r})"
