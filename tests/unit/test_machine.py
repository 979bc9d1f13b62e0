from __future__ import annotations

import pytest

from tether import InvalidTransition, Phases, Status, TaskDefinitionError
from tether.model.status import TERMINAL, check_status

LEGAL = [
    ("pending", "running"),
    ("running", "awaiting_input"),
    ("awaiting_input", "running"),
    ("running", "sleeping"),
    ("sleeping", "running"),
    ("running", "completed"),
    ("running", "failed"),
    ("running", "cancelled"),
    ("awaiting_input", "cancelled"),
    ("sleeping", "cancelled"),
    ("pending", "cancelled"),
]


@pytest.mark.parametrize(("current", "target"), LEGAL)
def test_legal_moves(current: str, target: str) -> None:
    check_status(Status(current), Status(target))


@pytest.mark.parametrize("terminal", sorted(TERMINAL))
@pytest.mark.parametrize("target", list(Status))
def test_terminal_states_are_final(terminal: Status, target: Status) -> None:
    with pytest.raises(InvalidTransition) as info:
        check_status(terminal, target)
    assert info.value.current == terminal.value and info.value.target == target.value
    assert "terminal" in str(info.value)


@pytest.mark.parametrize(("current", "target"), [("pending", "completed"), ("awaiting_input", "sleeping")])
def test_illegal_moves_name_both_states(current: str, target: str) -> None:
    with pytest.raises(InvalidTransition, match=f"'{current}' to '{target}'"):
        check_status(Status(current), Status(target))


def test_creation_must_start_pending() -> None:
    check_status(None, Status.PENDING)
    with pytest.raises(InvalidTransition):
        check_status(None, Status.RUNNING)


def test_phases() -> None:
    phases = Phases({"planning": ["executing"], "executing": ["review", "done"], "review": ["executing"], "done": []})
    assert phases.initial == "planning"
    phases.check("planning", "executing")
    phases.check("review", "executing")
    with pytest.raises(InvalidTransition, match="'planning' to 'done'"):
        phases.check("planning", "done")
    with pytest.raises(InvalidTransition, match="nowhere"):
        phases.check("done", "nowhere")


def test_phases_declaration_errors() -> None:
    with pytest.raises(TaskDefinitionError, match="'finished'"):
        Phases({"a": ["finished"]})
    with pytest.raises(TaskDefinitionError, match="initial"):
        Phases({"a": []}, initial="b")
