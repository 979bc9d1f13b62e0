"""tether: durable state for AI agents.

The public API lives here and only here; everything else is an implementation module.
"""

from __future__ import annotations

from tether import events
from tether.cache import cached
from tether.conversation import (
    EstimateCounter,
    Message,
    Session,
    SessionInfo,
    Summary,
    TokenCounter,
    ToolCallRequest,
    Window,
    extractive_summarizer,
)
from tether.errors import (
    ConfigurationError,
    ConflictError,
    InputTimeout,
    InvalidInputError,
    InvalidTransition,
    LeaseLostError,
    NonDeterminismError,
    NotSerializableError,
    OutcomeUnknownError,
    RunInterrupted,
    SchemaVersionError,
    SequenceError,
    StoreCorruptError,
    StoreFullError,
    StoreUnavailableError,
    TaskBusyError,
    TaskDefinitionError,
    TaskFailedError,
    TaskNotFinishedError,
    TaskNotFoundError,
    TetherError,
    ToolError,
    UnknownEventTypeError,
    ValueTooLargeError,
)
from tether.log import SnapshotPolicy, TaskLog
from tether.model import (
    Attempt,
    CallList,
    Decision,
    Failure,
    Observation,
    ParentRef,
    Step,
    TaskState,
    ToolCall,
    Waiting,
)
from tether.model.status import Phases, Status
from tether.runtime.app import App, CheckReport, PendingInput, TaskHandle, TaskSummary
from tether.runtime.context import AsyncTaskContext, CallInfo, TaskContext, current_call
from tether.runtime.ledger import Ledger
from tether.runtime.retry import Retry
from tether.store import Store, TaskRow, open_store
from tether.timetravel import HistoryEntry, ReplayReport, StateDiff
from tether.userstate import UserChange, UserState

__version__ = "0.1.0"  # the one place the version is written (pyproject.toml reads it)

__all__ = [
    "App",
    "AsyncTaskContext",
    "Attempt",
    "CallInfo",
    "CallList",
    "CheckReport",
    "ConfigurationError",
    "ConflictError",
    "Decision",
    "EstimateCounter",
    "Failure",
    "HistoryEntry",
    "InputTimeout",
    "InvalidInputError",
    "InvalidTransition",
    "LeaseLostError",
    "Ledger",
    "Message",
    "NonDeterminismError",
    "NotSerializableError",
    "Observation",
    "OutcomeUnknownError",
    "ParentRef",
    "PendingInput",
    "Phases",
    "ReplayReport",
    "Retry",
    "RunInterrupted",
    "SchemaVersionError",
    "SequenceError",
    "Session",
    "SessionInfo",
    "SnapshotPolicy",
    "StateDiff",
    "Status",
    "Step",
    "Store",
    "StoreCorruptError",
    "StoreFullError",
    "StoreUnavailableError",
    "Summary",
    "TaskBusyError",
    "TaskContext",
    "TaskDefinitionError",
    "TaskFailedError",
    "TaskHandle",
    "TaskLog",
    "TaskNotFinishedError",
    "TaskNotFoundError",
    "TaskRow",
    "TaskState",
    "TaskSummary",
    "TetherError",
    "TokenCounter",
    "ToolCall",
    "ToolCallRequest",
    "ToolError",
    "UnknownEventTypeError",
    "UserChange",
    "UserState",
    "ValueTooLargeError",
    "Waiting",
    "Window",
    "__version__",
    "cached",
    "current_call",
    "events",
    "extractive_summarizer",
    "open_store",
]
