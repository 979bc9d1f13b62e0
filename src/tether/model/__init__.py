"""The model of a task: its status machine, the records its state is made of, the list of its calls,
and :class:`TaskState`, folded from its events. Nothing here reads or writes a store.

The modules import one way: ``status`` and ``records`` stand alone, ``calls`` lists records, and
``task`` holds them all.
"""

from __future__ import annotations

from tether.model.calls import CallList
from tether.model.records import (
    STATE_SCHEMA_VERSION,
    Attempt,
    Decision,
    Failure,
    Observation,
    ParentRef,
    Step,
    ToolCall,
    Waiting,
    describe_position,
    plan_progress,
)
from tether.model.status import Status
from tether.model.task import TaskState

__all__ = [
    "STATE_SCHEMA_VERSION",
    "Attempt",
    "CallList",
    "Decision",
    "Failure",
    "Observation",
    "ParentRef",
    "Status",
    "Step",
    "TaskState",
    "ToolCall",
    "Waiting",
    "describe_position",
    "plan_progress",
]
