"""The one-line summaries of events."""

from __future__ import annotations

from dataclasses import dataclass

from tether.events import Event, OutputSet, PatchMarked
from tether.timetravel import describe


def test_a_subclass_of_an_event_reads_as_its_base_and_a_type_without_a_summary_by_its_name() -> None:
    @dataclass(slots=True)
    class LabelledOutput(OutputSet):
        label: str = ""

    assert describe(LabelledOutput(output=[1, 2], label="x")) == describe(OutputSet(output=[1, 2])) == "output [1,2]"
    assert describe(PatchMarked(name="p")) == "took the new path of patch 'p'"


def test_an_event_type_defined_elsewhere_says_its_own_line_or_is_read_by_its_name() -> None:
    """An integration's event types, a session's, a user document's or yours: ``Event.describe``."""

    @dataclass(slots=True)
    class Plain(Event):
        n: int = 0

    @dataclass(slots=True)
    class Spoken(Event):
        n: int = 0

        def describe(self) -> str:
            return f"spoke {self.n}"

    Plain.event_type, Spoken.event_type = "Plain", "Spoken"
    assert describe(Plain(n=1)) == "Plain"
    assert describe(Spoken(n=2)) == "spoke 2"
