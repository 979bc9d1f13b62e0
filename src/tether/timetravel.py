"""Time travel: every event in words, the state around any step, diffs, and replays.

History is the event log itself; the state before and after any event is a
fold of its prefix (``TaskLog.state_at``), so nothing here stores anything new.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, overload

import jsonpatch
import orjson

from tether.errors import InvalidInputError, NonDeterminismError
from tether.events import (
    DEFAULT_UPCASTERS,
    EVENT_TYPES,
    CallAttemptFailed,
    CallCompleted,
    CallFailed,
    CallInDoubt,
    CallStarted,
    CancelRequested,
    DataMigrated,
    DataUpdated,
    DecisionMade,
    Event,
    FailureRecorded,
    InputReceived,
    InputRejected,
    InputRequested,
    InputTimedOut,
    ObservationRecorded,
    OutputSet,
    PatchMarked,
    PhaseChanged,
    PlanSet,
    Recorded,
    RetryRequested,
    SessionRead,
    SessionWritten,
    SleepScheduled,
    StatusChanged,
    StepCompleted,
    StepFailed,
    StepStarted,
    TaskArchived,
    TaskCreated,
    TaskForked,
)
from tether.log import TaskLog
from tether.log.encoding import decode_row
from tether.model import TaskState
from tether.store.base import EventRow

__all__ = [
    "HistoryCursor",
    "HistoryEntry",
    "ReplayReport",
    "StateDiff",
    "Steps",
    "describe",
    "diff_states",
    "history_of",
    "path_label",
    "session_span",
    "step_bounds",
    "step_ref",
]


def _short(value: Any, limit: int = 60) -> str:
    text = value if isinstance(value, str) else orjson.dumps(value).decode()
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _by(actor: str | None) -> str:
    """`` by ACTOR`` for the write actions that say who made them (fork, rewind, answer, cancel, retry)."""
    return f" by {actor}" if actor else ""


def _call_started(e: CallStarted) -> str:
    what = "compensation" if e.kind == "compensation" else "call"
    return f"{what} #{e.n} {e.tool}({_short(e.args, 40)}) attempt {e.attempt} started"


def _call_completed(e: CallCompleted) -> str:
    """A readonly call has no started event: its completion carries its arguments, shown here."""
    what = "compensation" if e.kind == "compensation" else "call"
    args = f"({_short(e.args, 40)})" if e.args is not None else ""
    head = f"{what} #{e.n} {e.tool}{args}" if e.tool else f"call #{e.n}"
    return f"{head} returned {_short(e.result, 50)} in {e.duration:.3f}s"


def _attempt_failed(e: CallAttemptFailed) -> str:
    then = f", retry in {e.backoff:.2f}s" if e.backoff is not None else ""
    return f"call #{e.n} attempt {e.attempt} failed: {e.error_type}: {e.message}{then}"


def _retry_requested(e: RetryRequested) -> str:
    again = f"; call #{', #'.join(map(str, e.calls))} runs again" if e.calls else ""
    return f"retried{_by(e.actor)} after {e.failure_type}: {e.failure_message}{again}"


def _session_written(e: SessionWritten) -> str:
    """Messages counted as people count them (``added 2 messages``), with the session's own seqs,
    by which its messages are addressed (``session.messages(since=…)``, ``message #5 removed``)."""
    if e.last < e.first:
        return f"conversation {e.session_id}: nothing to compact"
    span = f"#{e.first}" if e.first == e.last else f"#{e.first}–#{e.last}"
    count = len(e.roles) or e.last - e.first + 1
    if e.roles == ["summary"]:
        return f"conversation {e.session_id}: compacted (the summary is the session's {span})"
    what = f"{count} message{'s' if count != 1 else ''}" + (f" ({', '.join(e.roles)})" if e.roles else "")
    return f"conversation {e.session_id}: added {what}, the session's {span}"


def _session_read(e: SessionRead) -> str:
    if e.upto <= 1:  # nothing after the session's opening
        return f"conversation {e.session_id}: read it empty"
    return f"conversation {e.session_id}: read it up to the session's #{e.upto}"


def session_span(state: TaskState) -> str:
    """How far a task has read or written its conversation, in the words history uses."""
    return f"up to the session's #{state.session_version}" if state.session_version > 1 else "nothing read yet"


_NUMBERED = {"calls": "call #", "plan": "step ", "decisions": "decision ", "attempts": "attempt "}


def path_label(path: str) -> str:
    """A JSON patch path as history and ``show`` number things (1-based): ``/calls/7/result`` is
    ``call #8 result``, ``/plan/1/status`` ``step 2 status``; ``""`` for a path with no such part.
    A patch's paths stay RFC 6902's (0-based list indices); this is the label beside them."""
    parts = path.strip("/").split("/")
    words: list[str] = []
    for i, part in enumerate(parts):
        if part.isdigit() and i and parts[i - 1] in _NUMBERED:
            words[-1] = f"{_NUMBERED[parts[i - 1]]}{int(part) + 1}"
        else:
            words.append(part.replace("~1", "/").replace("~0", "~"))
    return " ".join(words) if len(words) < len(parts) else ""


# One line per event type: a table, not a chain of ``isinstance`` tests, since a history
# describes every event of a task (3,000 for a task of 1,000 steps).
_SUMMARIES: dict[type[Event], Callable[[Any], str]] = {
    TaskCreated: lambda e: f"created {e.type} with {_short(e.inputs)}",
    TaskForked: lambda e: f"forked from {e.parent_task_id} at event {e.at}{_by(e.actor)}",
    TaskArchived: lambda e: f"set aside by a rewind{_by(e.actor)}; {e.successor} took its place",
    StatusChanged: lambda e: f"status → {e.status}" + (f" ({e.reason})" if e.reason else ""),
    PlanSet: lambda e: f"plan: {', '.join(e.steps)}",
    StepStarted: lambda e: f"step {e.name!r} started",
    StepCompleted: lambda e: f"step {e.name!r} completed",
    StepFailed: lambda e: f"step {e.name!r} failed: {e.error}",
    CallStarted: _call_started,
    CallCompleted: _call_completed,
    CallAttemptFailed: _attempt_failed,
    CallInDoubt: lambda e: f"call #{e.n} {e.tool}(): its outcome is unknown; waiting for a person to settle it",
    CallFailed: lambda e: f"call #{e.n} gave up ({e.reason})",
    DecisionMade: lambda e: f"decided {e.name}: {_short(e.choice, 40)} — {e.rationale}",
    ObservationRecorded: lambda e: (
        f"observed {e.key} = {_short(e.value, 50)}" + (f" (from {e.source})" if e.source else "")
    ),
    DataUpdated: lambda e: f"data: {_short(e.fields)}",
    DataMigrated: lambda e: f"data migrated from version {e.from_version} to {e.to_version}",
    InputRequested: lambda e: f"waiting for {e.key!r}" + (f": {e.prompt}" if e.prompt else ""),
    InputReceived: lambda e: f"received {e.key!r} = {_short(e.value, 50)}{_by(e.actor)}",
    InputRejected: lambda e: f"answer to {e.key!r} discarded: {e.reason}",
    PatchMarked: lambda e: f"took the new path of patch {e.name!r}",
    InputTimedOut: lambda e: f"no answer for {e.key!r} in time",
    # In UTC with its offset, as every time tether shows: a summary is read through the API too,
    # by someone whose zone is not the server's.
    SleepScheduled: lambda e: f"sleep until {datetime.fromtimestamp(e.until, UTC).isoformat(' ', 'seconds')}",
    CancelRequested: lambda e: f"cancellation requested{_by(e.actor)}: {e.reason}",
    PhaseChanged: lambda e: f"phase → {e.phase}",
    OutputSet: lambda e: f"output {_short(e.output)}",
    FailureRecorded: lambda e: f"failed: {e.exception_type}: {e.message}" + (f" in {e.tool}" if e.tool else ""),
    RetryRequested: _retry_requested,
    SessionWritten: _session_written,
    SessionRead: _session_read,
}


def _summary_of(cls: type[Event]) -> Callable[[Any], str]:
    """The summary of ``cls``'s events: its own here, a base class's here (a subclass of an event
    reads as it), or what the class says of its events (:meth:`Event.describe`: an integration's
    event types, a session's, a user document's, yours; by default the type's name)."""
    found = next((_SUMMARIES[base] for base in cls.__mro__ if base in _SUMMARIES), None)
    summary = found or cls.describe
    _SUMMARIES[cls] = summary
    return summary


def describe(event: Event) -> str:
    """One line, for people, of what an event says."""
    summary = _SUMMARIES.get(type(event))
    return (summary or _summary_of(type(event)))(event)


@dataclass(frozen=True)
class HistoryEntry:
    """One event of a task's history, in words, with the step it belongs to.

    An entry listed by :meth:`~tether.App.history` makes its ``at``, ``summary`` and ``event``
    from its stored row when one of them is first read, and keeps them: a history lists every
    event of a task, and a reader shows a page of it, or only what came after the last it saw.
    """

    seq: int
    at: datetime
    type: str
    summary: str
    step: str | None
    """The plan step this event happened in (``None`` outside any step)."""
    boundary: str | None
    """``"before step N"`` on a step's first event, ``"after step N"`` on its last."""
    event: Event = field(repr=False, compare=False)


class _Made:
    """A field of a listed :class:`HistoryEntry` made from its row when first read, then kept in
    the entry's ``__dict__`` (which any later read finds first, as for an entry built whole)."""

    def __init__(self, name: str, make: Callable[[Any, EventRow], Any]) -> None:
        self.name = name
        self.make = make

    def __get__(self, entry: HistoryEntry | None, owner: type | None = None) -> Any:
        if entry is None:
            return self
        made = entry.__dict__
        row = made.get("_row")
        if row is None:  # an entry never made (object.__new__ alone): it has no such field
            raise AttributeError(f"'HistoryEntry' object has no attribute {self.name!r}")
        value = made[self.name] = self.make(entry, row)
        return value


def _at(entry: HistoryEntry, row: EventRow) -> datetime:
    return datetime.fromtimestamp(row[3], UTC)


def _event(entry: HistoryEntry, row: EventRow) -> Event:
    """The row's event, built from its JSON as it stands (the row is in its type's current shape, and
    the log reads such rows as they stand: ``decode_rows``'s first try, inlined here, so that reading
    every summary of a long history pays no extra call per entry), or, should its class refuse it, decoded as the
    log decodes it, which names what is wrong."""
    try:
        return EVENT_TYPES[row[1]](**orjson.loads(row[4]))
    except (orjson.JSONDecodeError, TypeError):
        return decode_row(row, DEFAULT_UPCASTERS).event


def _summary(entry: HistoryEntry, row: EventRow) -> str:
    return describe(entry.event)


# Set after the dataclass is made: as class attributes in its body they would be the fields' defaults.
HistoryEntry.at = _Made("at", _at)  # type: ignore[assignment]
HistoryEntry.event = _Made("event", _event)  # type: ignore[assignment]
HistoryEntry.summary = _Made("summary", _summary)  # type: ignore[assignment]
# Named, though instances keep their ``__dict__`` (the only slot there is): orjson serializes a
# dataclass whose type names no ``__slots__`` from its instance ``__dict__``, which holds only the
# fields read so far, and one that names them field by field, each read, so made (as eager ones are).
HistoryEntry.__slots__ = ("__dict__",)  # type: ignore[attr-defined]

_STEP_MARKS = frozenset({"StepStarted", "StepCompleted", "StepFailed"})


@dataclass
class Steps:
    """Where a history's reading stands in its steps: how many have started, and the one open."""

    started: int = 0
    open: str | None = None


def history_of(
    rows: Sequence[EventRow],
    decode_all: Callable[[Iterable[EventRow]], list[Recorded]],
    *,
    lazy: bool = True,
    steps: Steps | None = None,
) -> list[HistoryEntry]:
    """Every event of ``rows`` as a :class:`HistoryEntry`, in order, with the steps they fell in:
    counted from the task's start, or on from ``steps`` (the rows go on from those it was left at),
    which is left where the rows end.

    ``decode_all`` is the log's. An entry is made from its row's seq and type alone, as long as
    the row is stored in its type's current shape and ``lazy`` holds (the log reads rows as
    stored): its time, summary and event are made when first read. Only a step's first event is
    decoded here, for the step's name; any other row (an older shape, to migrate) is decoded
    here too, so its type is the one it migrates to. Each entry is made without the frozen
    dataclass's ``__init__``; it compares, hashes and refuses changes as one made by
    ``HistoryEntry(...)``.
    """
    entries: list[HistoryEntry] = []
    append = entries.append
    new = object.__new__
    set_dict = object.__setattr__
    shapes = {name: cls.version for name, cls in EVENT_TYPES.items()} if lazy else {}
    at = steps or Steps()
    current, ordinal = at.open, at.started
    for row in rows:
        type_name = row[1]
        event: Event | None = None
        if shapes.get(type_name) != row[2]:  # an older shape, an unknown type, or not lazy
            event = decode_all((row,))[0].event
            type_name = event.event_type
        boundary = None
        step = current
        if type_name in _STEP_MARKS:
            if type_name == "StepStarted":
                ordinal += 1
                step, event = _step_started(row, event, decode_all)
                current = step
                boundary = f"before step {ordinal}"
            else:
                boundary = f"after step {ordinal}"
                current = None
        fields = {
            "seq": row[0],
            "type": type_name,
            "step": step,
            "boundary": boundary,
            "_row": row,
        }  # five keys: a sixth would double the dict's table
        if event is not None:
            fields["event"] = event
        entry = new(HistoryEntry)
        set_dict(entry, "__dict__", fields)
        append(entry)
    at.open, at.started = current, ordinal
    return entries


class HistoryCursor:
    """A task's history read on from where the last read stopped, for a reader that follows a task
    as it runs (a live view, ``tether logs --follow``). The first read lists the whole history and
    returns the entries after ``after``; each later one reads only the rows from the last one read
    on, and carries the step they fall in over from them, so following a long task costs its new
    events, not its history again. Each read takes the task log to read from (one belongs to one thread).

    The last row read is read again each time, to make sure the history it belongs to is still
    the task's: a rewind, or a task deleted and made again under its id, replaces the history
    from some event on. Then the read starts over: ``replaced`` is set, and every entry of the new
    history is returned, the first one first."""

    def __init__(self, task_id: str, *, after: int = 0) -> None:
        self.task_id = task_id
        self.after = after
        """The seq of the last entry returned (or the ``after`` given, until one is)."""
        self.replaced = False
        """Whether the last read found the history replaced, and so started over."""
        self._last: tuple[int, str, float, str | bytes] | None = None  # the last row read: seq, type, time, JSON
        self._steps = Steps()

    def read(self, log: TaskLog) -> list[HistoryEntry]:
        """The entries after the last one returned: none when nothing new happened."""
        self.replaced = False
        rows = self._new_rows(log)
        if rows is None:
            self.replaced = True
            self.after, self._steps = 0, Steps()
            rows = log.store.read_events(log.tenant, self.task_id)
        entries = history_of(rows, log.decode_all, lazy=log.reads_as_stored, steps=self._steps)
        if rows:
            last = rows[-1]
            self._last = (last[0], last[1], last[3], last[4])
        if entries and entries[0].seq <= self.after:
            entries = [entry for entry in entries if entry.seq > self.after]
        if entries:
            self.after = entries[-1].seq
        return entries

    def _new_rows(self, log: TaskLog) -> Sequence[EventRow] | None:
        """The rows after the last one read (all, on the first read); ``None`` if that row is no
        longer the task's."""
        if self._last is None:
            return log.store.read_events(log.tenant, self.task_id)
        seq = self._last[0]
        rows = log.store.read_events(log.tenant, self.task_id, after=seq - 1)
        if not rows or (rows[0][0], rows[0][1], rows[0][3], rows[0][4]) != self._last:
            return None
        return rows[1:]


def _step_started(
    row: EventRow, event: Event | None, decode_all: Callable[[Iterable[EventRow]], list[Recorded]]
) -> tuple[str, Event | None]:
    """The name of the step ``row`` starts, read from its JSON alone while its event is not made,
    and its event if made (a row that is not valid JSON, or has no name, is decoded, which names
    what is wrong with it)."""
    if event is None:
        try:
            data = orjson.loads(row[4])
        except orjson.JSONDecodeError:
            data = None
        name = data.get("name") if isinstance(data, dict) else None
        if isinstance(name, str):
            return name, None
        event = decode_all((row,))[0].event
    return str(event.name), event  # type: ignore[attr-defined]


def step_bounds(records: list[Recorded], step: int | str) -> tuple[int, int | None]:
    """``(seq of the step's StepStarted, seq of its StepCompleted/StepFailed or None)``.

    ``step`` is the step's 1-based ordinal in the order the task ran them, or its name
    (the first step of that name).
    """
    ordinal = 0
    start: int | None = None
    name: str | None = None
    for rec in records:
        ev = rec.event
        if isinstance(ev, StepStarted) and start is None:
            ordinal += 1
            if step == ordinal or step == ev.name:
                start, name = rec.seq, ev.name
        elif isinstance(ev, StepCompleted | StepFailed) and start is not None and ev.name == name:
            return start, rec.seq
    if start is None:
        raise InvalidInputError(f"the task has no step {step!r} (it ran {ordinal} steps)")
    return start, None


@dataclass(frozen=True)
class StateDiff:
    """An RFC 6902 JSON patch from one state to another, and a readable rendering of it."""

    a: str
    b: str
    patch: list[dict[str, Any]]

    def render(self) -> str:
        if not self.patch:
            return f"{self.a} and {self.b} are the same"
        lines = [f"{self.a} → {self.b}"]
        for op in self.patch:
            label = path_label(op["path"])
            path = op["path"] + (f" ({label})" if label else "")
            if op["op"] == "add":
                lines.append(f"  + {path}: {_short(op['value'], 80)}")
            elif op["op"] == "remove":
                lines.append(f"  - {path}")
            elif op["op"] == "replace":
                lines.append(f"  ~ {path}: {_short(op['value'], 80)}")
            else:
                lines.append(f"  {op['op']} {op.get('from', '')} → {path}")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.render()


def _as_document(state: TaskState) -> Any:
    return orjson.loads(state.model_dump_json())


def diff_states(a: TaskState, b: TaskState, *, a_label: str, b_label: str) -> StateDiff:
    patch = jsonpatch.make_patch(_as_document(a), _as_document(b))
    return StateDiff(a_label, b_label, list(patch))


@dataclass(frozen=True)
class ReplayReport:
    """What ``app.replay`` found: whether the current code replays the recorded log."""

    task_id: str
    clean: bool
    replayed: int
    """How many recorded events the replay walked through."""
    recorded: int
    outcome: str
    divergence: NonDeterminismError | None = None

    def __str__(self) -> str:
        if self.clean:
            return f"{self.task_id}: replays cleanly ({self.replayed} of {self.recorded} events; {self.outcome})"
        return f"{self.task_id}: diverges — {self.outcome}"


@overload
def step_ref(text: str) -> int | str: ...
@overload
def step_ref(text: None) -> None: ...
def step_ref(text: str | None) -> int | str | None:
    """A step as people type it: its 1-based number (all digits) or its name."""
    if text is None:
        return None
    return int(text) if text.isdigit() else text
