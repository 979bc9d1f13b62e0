"""Events — facts about a task, named in the past tense — and the pure fold.

``TaskState = fold(events)``. :func:`apply` is the only place where task state
changes: it takes a state and one recorded event and returns a new state,
leaving its input untouched (unchanged parts are shared, never copied deeply).

An event holds only what changed: one call's result, one observation. Storage
grows with the deltas, never with the size of the state.

The package, by job: ``base`` (the :class:`Event` base, its registry, :class:`Recorded`,
upcasting), the event types of ``task`` (lifecycle), ``calls``, ``knowledge`` (decisions,
observations, data, inputs) and ``session``; the fold's draft (``_draft``), its one rule per event
type (``_rules``) and the fold itself (``_fold``). Import every name from ``tether.events``.

Example:
    >>> from tether.events import Recorded, TaskCreated, PlanSet, fold
    >>> state = fold([
    ...     Recorded(1, 0.0, TaskCreated(type="demo", task_id="t1", tenant="default")),
    ...     Recorded(2, 1.0, PlanSet(steps=["search", "book"])),
    ... ])
    >>> state.position
    'step 1 of 2; none committed'
"""

from __future__ import annotations

from tether.events import adk as adk  # an ADK artifact's events: any reader of a store decodes them
from tether.events import langgraph as langgraph  # a LangGraph thread's events: any reader of a store decodes them
from tether.events._fold import apply, fold, fold_calls
from tether.events._rules import _RULES as _RULES  # the fold's rules: a test checks each has a test
from tether.events.base import DEFAULT_UPCASTERS as DEFAULT_UPCASTERS
from tether.events.base import EVENT_TYPES, Event, Recorded, Upcasters
from tether.events.base import Upcaster as Upcaster
from tether.events.base import define_event as define_event  # other rooms define events of their own with it
from tether.events.base import from_epoch as from_epoch
from tether.events.calls import (
    CALL_EVENTS,
    CallAttemptFailed,
    CallCompleted,
    CallFailed,
    CallInDoubt,
    CallStarted,
    in_doubt_call,
    in_doubt_key,
)
from tether.events.knowledge import (
    DataMigrated,
    DataUpdated,
    DecisionMade,
    InputReceived,
    InputRejected,
    InputRequested,
    InputTimedOut,
    ObservationRecorded,
)
from tether.events.observability import RunTraced, UsageRecorded
from tether.events.session import SessionRead, SessionWritten
from tether.events.task import (
    CancelRequested,
    FailureRecorded,
    OutputSet,
    PatchMarked,
    PhaseChanged,
    PlanSet,
    RetryRequested,
    SleepScheduled,
    StatusChanged,
    StepCompleted,
    StepFailed,
    StepStarted,
    TaskArchived,
    TaskCreated,
    TaskForked,
)

__all__ = [
    "CALL_EVENTS",
    "EVENT_TYPES",
    "CallAttemptFailed",
    "CallCompleted",
    "CallFailed",
    "CallInDoubt",
    "CallStarted",
    "CancelRequested",
    "DataMigrated",
    "DataUpdated",
    "DecisionMade",
    "Event",
    "FailureRecorded",
    "InputReceived",
    "InputRejected",
    "InputRequested",
    "InputTimedOut",
    "ObservationRecorded",
    "OutputSet",
    "PatchMarked",
    "PhaseChanged",
    "PlanSet",
    "Recorded",
    "RetryRequested",
    "RunTraced",
    "SessionRead",
    "SessionWritten",
    "SleepScheduled",
    "StatusChanged",
    "StepCompleted",
    "StepFailed",
    "StepStarted",
    "TaskArchived",
    "TaskCreated",
    "TaskForked",
    "Upcasters",
    "UsageRecorded",
    "apply",
    "fold",
    "fold_calls",
    "in_doubt_call",
    "in_doubt_key",
]
