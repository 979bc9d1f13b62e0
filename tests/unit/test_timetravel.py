"""The one-line summaries of events."""

from __future__ import annotations

from dataclasses import dataclass

from tether.events import OutputSet, PatchMarked
from tether.timetravel import describe


def test_a_subclass_of_an_event_reads_as_its_base_and_a_type_without_a_summary_by_its_name() -> None:
    @dataclass(slots=True)
    class LabelledOutput(OutputSet):
        label: str = ""

    assert describe(LabelledOutput(output=[1, 2], label="x")) == describe(OutputSet(output=[1, 2])) == "output [1,2]"
    assert describe(PatchMarked(name="p")) == "PatchMarked"
