"""tether: durable state for AI agents.

The public API lives here and only here; everything else is an implementation module.
"""

from __future__ import annotations

from tether import events
from tether.errors import (
    ConfigurationError,
    ConflictError,
    InvalidInputError,
    InvalidTransition,
    LeaseLostError,
    NonDeterminismError,
    NotSerializableError,
    OutcomeUnknownError,
    SchemaVersionError,
    SequenceError,
    TaskDefinitionError,
    TaskFailedError,
    TaskNotFoundError,
    TetherError,
    UnknownEventTypeError,
    ValueTooLargeError,
)
from tether.log import SnapshotPolicy, TaskLog
from tether.machine import Phases, Status
from tether.model import Attempt, Decision, Failure, Observation, ParentRef, Step, TaskState, ToolCall, Waiting
from tether.store import Store, TaskRow, open_store

__version__ = "0.1.0"

__all__ = [
    "Attempt",
    "ConfigurationError",
    "ConflictError",
    "Decision",
    "Failure",
    "InvalidInputError",
    "InvalidTransition",
    "LeaseLostError",
    "NonDeterminismError",
    "NotSerializableError",
    "Observation",
    "OutcomeUnknownError",
    "ParentRef",
    "Phases",
    "SchemaVersionError",
    "SequenceError",
    "SnapshotPolicy",
    "Status",
    "Step",
    "Store",
    "TaskDefinitionError",
    "TaskFailedError",
    "TaskLog",
    "TaskNotFoundError",
    "TaskRow",
    "TaskState",
    "TetherError",
    "ToolCall",
    "UnknownEventTypeError",
    "ValueTooLargeError",
    "Waiting",
    "__version__",
    "events",
    "open_store",
]
