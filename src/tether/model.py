"""Typed records of task state (pydantic v2).

:class:`TaskState` is what :func:`tether.events.fold` builds from a task's event
log. It is never written to directly: every change is an event. All records
round-trip through JSON without loss (``TaskState.model_validate_json(
state.model_dump_json()) == state``).
"""

from __future__ import annotations

import operator
import re
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime
from typing import Any, Literal, overload

from pydantic import BaseModel, ConfigDict, GetCoreSchemaHandler, computed_field
from pydantic_core import core_schema

from tether.machine import Status

__all__ = [
    "Attempt",
    "CallList",
    "Decision",
    "Failure",
    "Observation",
    "ParentRef",
    "Step",
    "TaskState",
    "ToolCall",
    "Waiting",
]

STATE_SCHEMA_VERSION = 2
"""Version of the :class:`TaskState` shape. Snapshots of another version are rebuilt from events."""


class _Record(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


StepStatus = Literal["pending", "running", "completed", "failed"]


class Step(_Record):
    """One step of the plan."""

    name: str
    status: StepStatus = "pending"
    started_at: datetime | None = None
    finished_at: datetime | None = None
    error: str | None = None
    messages: tuple[int, ...] = ()
    """Seqs of the conversation events (messages, summaries) the task added during this step."""


class Attempt(_Record):
    """One try of a tool call: when, how long, and how it ended."""

    number: int
    started_at: datetime
    finished_at: datetime | None = None
    duration: float | None = None
    error_type: str | None = None
    message: str | None = None
    traceback: str | None = None
    backoff: float | None = None
    """Seconds waited before the next attempt, when this one failed and another followed."""


CallStatus = Literal["intended", "completed", "failed"]
CallKind = Literal["call", "compensation", "fetch"]


class ToolCall(_Record):
    """A recorded call: its idempotency key, the arguments and the verbatim result."""

    n: int
    """Ordinal of the call in the task (1-based); part of the key."""
    key: str
    tool: str
    args: dict[str, Any]
    kind: CallKind = "call"
    readonly: bool = False
    status: CallStatus = "intended"
    result: Any = None
    attempts: tuple[Attempt, ...] = ()
    started_at: datetime
    finished_at: datetime | None = None
    compensates: int | None = None
    """For a compensation: the ordinal of the call it undoes."""
    retried_after: int = 0
    """Attempts up to this number came before a retry of the task (``app.retry``): they do not
    count against the retry policy's attempts."""


CallReader = Callable[[Sequence[tuple[int, Sequence[int]]]], list["ToolCall"]]
"""Reads calls' records from their events: given ``(ordinal, seqs of the events that made it)``
pairs, the records in the same order (:meth:`tether.TaskLog` builds one for each state it loads)."""

_PAGE = 256
_AHEAD = 32

_Stored = tuple[list[int], bytearray, list[str], "CallReader | None", "list[ToolCall | None] | None"]

_CODE = {"intended": ord("i"), "completed": ord("c"), "failed": ord("f")}
"""A call's status as one byte: the statuses of 100,000 calls are 100,000 bytes, counted and
searched in C."""
_STATUS = {code: status for status, code in _CODE.items()}
_NOT_COMPLETED = re.compile(rb"[^c]")
_LAST_PART = operator.methodcaller("rpartition", ",")
_THIRD = operator.itemgetter(2)


class CallList(Sequence[ToolCall]):
    """A task's calls in ordinal order: a read-only sequence of :class:`ToolCall`.

    A call's record is made by its events (``CallStarted``, ``CallCompleted``, ...), and a
    ``CallList`` knows, for each call, the seqs of the events that made it. A state loaded from
    a snapshot holds only those (the snapshot stores a result once: in its event); a call's
    record is folded from its events, read from the store, when it is first read — by index,
    or by iterating, a page of calls per store read. The ordinals and the statuses are known
    without reading (:meth:`ordinals`, :meth:`completed`, :meth:`index_of`).

    Compares equal to any sequence of the same records (a tuple, a list, another ``CallList``).
    """

    __slots__ = ("_items", "_ns", "_ordered", "_reader", "_seqs", "_status")
    _items: list[ToolCall | None]
    _ns: list[int]
    _status: bytearray
    _seqs: list[str]
    _reader: CallReader | None

    def __init__(
        self,
        calls: Sequence[ToolCall] = (),
        *,
        stored: _Stored | None = None,
        ordered: bool = False,
    ) -> None:
        """``CallList(calls)`` from records in ordinal order (the events that made them unknown);
        ``stored=(ordinals, status codes, seqs, reader, records)`` (the codes and seqs as
        :meth:`status_codes` and :meth:`event_seqs` give them): the lists as they are, without a
        copy; a record not read yet is ``None`` (``records=None``: none is), read by ``reader``.
        ``ordered``: the seqs, call after call, only ever grow (see :meth:`in_order`)."""
        self._ordered = ordered and stored is not None
        if stored is not None:
            self._ns, self._status, self._seqs, self._reader, items = stored
            self._items = [None] * len(self._ns) if items is None else items
            return
        self._items = list(calls)
        self._ns = [call.n for call in calls]
        self._status = bytearray(_CODE[call.status] for call in calls)
        self._seqs = [""] * len(self._ns)
        self._reader = None
        if any(a >= b for a, b in zip(self._ns, self._ns[1:], strict=False)):
            raise ValueError(f"calls must be in increasing ordinal order, got {self._ns}")

    def draft(self) -> CallDraft:
        """A copy the fold changes (:class:`tether.events._draft._Draft`); this list is untouched."""
        copies = (list(self._ns), bytearray(self._status), list(self._seqs), self._reader, list(self._items))
        return CallDraft(stored=copies, ordered=self._ordered or not self._ns)

    def in_order(self) -> bool:
        """Whether every call's events come after all of the calls before it, as when a task makes
        one call at a time (not parallel calls, not a call retried after others): then the calls as
        they stood at any seq are a prefix of these (:meth:`upto` finds it by bisection)."""
        return self._ordered

    def ordinals(self) -> list[int]:
        """The calls' ordinals, in order (a copy)."""
        return list(self._ns)

    def statuses(self) -> list[str]:
        """The calls' statuses, in order."""
        return [_STATUS[code] for code in self._status]

    def status_codes(self) -> bytes:
        """The calls' statuses, in order, one byte each: ``i`` intended, ``c`` completed, ``f`` failed."""
        return bytes(self._status)

    def event_seqs(self) -> list[str]:
        """For each call, in order, the seqs of the events that made its record, comma-separated
        (``"12,15"``; empty for a record that came from elsewhere than the fold). Strings, not lists:
        a snapshot of 100,000 calls parses into 100,000 strings, which the garbage collector does
        not walk, where 100,000 lists would cost it more than the parse."""
        return list(self._seqs)

    def open_ordinals(self) -> set[int]:
        """The ordinals of the calls not completed (no record is read)."""
        ns = self._ns
        return {ns[found.start()] for found in _NOT_COMPLETED.finditer(self._status)}

    def completed(self) -> int:
        """How many calls are completed (no record is read)."""
        return self._status.count(b"c")

    def index_of(self, n: int) -> int | None:
        """Where call ``n`` sits, or ``None`` (see :func:`call_index`); no record is read."""
        ns = self._ns
        if 0 < n <= len(ns) and ns[n - 1] == n:
            return n - 1
        i = bisect_left(ns, n)
        return i if i < len(ns) and ns[i] == n else None

    def upto(self, seq: int) -> CallList:
        """The calls as they stood right after event ``seq``: those opened by then, each made by its
        events up to ``seq`` only. A call whose events run past ``seq`` (open then, or retried since)
        is read now, folded from its earlier events; the others keep their records, read or not."""
        all_seqs = self._seqs
        if self._ordered:
            return self._prefix_upto(seq)
        lasts = map(int, map(_THIRD, map(_LAST_PART, all_seqs)))  # in C: no Python frame per call
        late = [i for i, last in enumerate(lasts) if last > seq]  # calls with an event after ``seq``
        if not late:
            return self
        # The late calls in one block up to the last call were (nearly all) opened after ``seq``: of
        # those only a call of several events can have begun by then, so only those are looked at.
        tail = len(late) - 1
        while tail and late[tail - 1] == late[tail] - 1:
            tail -= 1
        first_of_tail = late[tail]
        late = late[:tail] + [i for i in range(first_of_tail, len(all_seqs)) if "," in all_seqs[i]]
        ns: list[int] = []
        codes = bytearray()
        seqs: list[str] = []
        items: list[ToolCall | None] = []

        def whole(low: int, high: int) -> None:  # calls between two late ones: in slices, not one by one
            ns.extend(self._ns[low:high])
            codes.extend(self._status[low:high])
            seqs.extend(all_seqs[low:high])
            items.extend(self._items[low:high])

        straddling: list[tuple[int, int, list[int]]] = []  # (where, ordinal, its seqs up to ``seq``)
        done = 0
        for i in late:
            if done < min(i, first_of_tail):
                whole(done, min(i, first_of_tail))
            done = i + 1
            before = [part for part in map(int, all_seqs[i].split(",")) if part <= seq]
            if before:
                straddling.append((len(ns), self._ns[i], before))
                ns.append(self._ns[i])
                codes.append(self._status[i])
                seqs.append(",".join(map(str, before)))
                items.append(None)
        if done < first_of_tail:
            whole(done, first_of_tail)
        if straddling:
            assert self._reader is not None, "a CallList without a reader holds no event seqs"
            for (j, _, _), record in zip(straddling, self._reader([(n, s) for _, n, s in straddling]), strict=True):
                items[j] = record
                codes[j] = _CODE[record.status]
        return CallList(stored=(ns, codes, seqs, self._reader, items))

    def _prefix_upto(self, seq: int) -> CallList:
        """:meth:`upto` for calls :meth:`in_order`: those opened by ``seq`` are a prefix, found by
        bisection on their first seqs, and only the last of them can have events after ``seq``."""
        seqs = self._seqs
        opened = bisect_right(range(len(seqs)), seq, key=lambda i: int(seqs[i].partition(",")[0]))
        if opened == len(seqs) and int(seqs[-1].rpartition(",")[2]) <= seq:
            return self
        items = self._items[:opened]
        codes = self._status[:opened]
        made = seqs[:opened]
        if opened and int(made[-1].rpartition(",")[2]) > seq:
            before = [part for part in map(int, made[-1].split(",")) if part <= seq]
            assert self._reader is not None, "a CallList without a reader holds no event seqs"
            record = self._reader([(self._ns[opened - 1], before)])[0]
            items[-1], codes[-1], made[-1] = record, _CODE[record.status], ",".join(map(str, before))
        return CallList(stored=(self._ns[:opened], codes, made, self._reader, items), ordered=True)

    def _read(self, i: int) -> ToolCall:
        """Call ``i``'s record; when it is not read yet, the few unread after it come along (a replay
        reads calls in order)."""
        item = self._items[i]
        if item is None:
            self._load(i, min(len(self._ns), i + _AHEAD))
            item = self._items[i]
            assert item is not None
        return item

    def _load(self, low: int, high: int) -> None:
        """Read the records of calls ``low..high-1`` that are not read yet, in one read."""
        want = [j for j in range(low, high) if self._items[j] is None]
        if not want:
            return
        reader = self._reader
        assert reader is not None, "a CallList without a reader holds every record"
        wanted = [(self._ns[j], [int(seq) for seq in self._seqs[j].split(",")]) for j in want]
        for j, record in zip(want, reader(wanted), strict=True):
            self._items[j] = record  # the same record for every reader after the first

    def __len__(self) -> int:
        return len(self._ns)

    @overload
    def __getitem__(self, i: int) -> ToolCall: ...
    @overload
    def __getitem__(self, i: slice) -> tuple[ToolCall, ...]: ...
    def __getitem__(self, i: int | slice) -> ToolCall | tuple[ToolCall, ...]:
        if isinstance(i, slice):
            indices = range(*i.indices(len(self._ns)))
            if indices.step == 1 and indices:
                self._load(indices[0], indices[-1] + 1)
            return tuple(self._read(j) for j in indices)
        if i < 0:
            i += len(self._ns)
        if not 0 <= i < len(self._ns):
            raise IndexError("call index out of range")
        return self._read(i)

    def __iter__(self) -> Iterator[ToolCall]:
        count = len(self._ns)
        for i in range(count):
            if self._items[i] is None:
                self._load(i, min(count, i + _PAGE))
            yield self._read(i)

    def __reversed__(self) -> Iterator[ToolCall]:
        for i in range(len(self._ns) - 1, -1, -1):
            if self._items[i] is None:
                self._load(max(0, i - _PAGE + 1), i + 1)
            yield self._read(i)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, CallList):
            if other is self:
                return True
            if self._ns != other.ordinals() or self._status != other.status_codes():
                return False
        elif not isinstance(other, tuple | list):
            return NotImplemented
        elif len(other) != len(self._ns):
            return False
        return all(a == b for a, b in zip(self, other, strict=True))

    def __hash__(self) -> int:
        return hash(tuple(self._ns))

    def __repr__(self) -> str:
        return f"CallList({list(self)!r})"

    def __deepcopy__(self, memo: dict[int, Any]) -> CallList:
        return self  # immutable to its readers: the fold changes only drafts

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: GetCoreSchemaHandler) -> core_schema.CoreSchema:
        items = handler.generate_schema(tuple[ToolCall, ...])
        from_items = core_schema.no_info_after_validator_function(cls, items)
        return core_schema.json_or_python_schema(
            json_schema=from_items,
            python_schema=core_schema.union_schema([core_schema.is_instance_schema(cls), from_items]),
            serialization=core_schema.plain_serializer_function_ser_schema(tuple, return_schema=items),
        )


class CallDraft(CallList):
    """The fold's working copy of a :class:`CallList` while a batch of events is folded: each
    change names the seq of the event that made it."""

    __slots__ = ()

    def set_call(self, i: int, call: ToolCall, seq: int) -> None:
        if i != len(self._ns) - 1:
            self._ordered = False  # an event of a call after events of calls after it
        self._items[i] = call
        self._status[i] = _CODE[call.status]
        self._seqs[i] = f"{self._seqs[i]},{seq}" if self._seqs[i] else str(seq)

    def open_call(self, call: ToolCall, seq: int) -> None:
        """Add a new call in ordinal order (parallel calls open in the order they finish)."""
        ns = self._ns
        i = len(ns) if not ns or ns[-1] < call.n else bisect_left(ns, call.n)
        if i != len(ns):
            self._ordered = False  # opened before calls opened already
        self._items.insert(i, call)
        ns.insert(i, call.n)
        self._status.insert(i, _CODE[call.status])
        self._seqs.insert(i, str(seq))

    def freeze(self) -> CallList:
        """The calls as an immutable list; this draft is not to be changed afterwards (they share lists)."""
        return CallList(stored=(self._ns, self._status, self._seqs, self._reader, self._items), ordered=self._ordered)


_NO_CALLS = CallList()


def _ordinal(call: ToolCall) -> int:
    return call.n


def call_index(calls: Sequence[ToolCall], n: int) -> int | None:
    """Where call ``n`` sits in ``calls`` (kept in ordinal order), or ``None``.

    Calls are issued in program order but may be opened out of order (parallel calls
    finish in any order; an ordinal issued and never started leaves a gap), so the
    position is ``n - 1`` in the common case and found by bisection otherwise. A
    :class:`CallList` answers from its ordinals, reading no call.
    """
    if isinstance(calls, CallList):
        return calls.index_of(n)
    if 0 < n <= len(calls) and calls[n - 1].n == n:
        return n - 1
    i = bisect_left(calls, n, key=_ordinal)
    return i if i < len(calls) and calls[i].n == n else None


def plan_progress(plan: Sequence[Step]) -> tuple[int, int]:
    """A plan's steps, and how many of them from the first are completed."""
    committed = 0
    for step in plan:
        if step.status != "completed":
            break
        committed += 1
    return len(plan), committed


def describe_position(steps: int, committed: int, calls_done: int) -> str:
    """:attr:`TaskState.position` from a plan's progress (:func:`plan_progress`) and, without a plan,
    the committed calls: the one wording, for a folded state and an index row alike."""
    if not steps:
        return f"no plan; {calls_done} call{'s' if calls_done != 1 else ''} committed"
    if committed == steps:
        return f"all {steps} steps committed"
    if committed == 0:
        return f"step 1 of {steps}; none committed"
    span = "1" if committed == 1 else f"1–{committed}"
    return f"step {committed + 1} of {steps}; {span} committed"


class Decision(_Record):
    name: str
    choice: Any
    rationale: str
    alternatives: list[Any] | None = None
    at: datetime


class Observation(_Record):
    key: str
    value: Any
    source: str | None = None
    as_of: datetime | None = None
    recorded_at: datetime


class Waiting(_Record):
    """What input a task is waiting for."""

    key: str
    prompt: str | None = None
    input_schema: dict[str, Any] | None = None
    timeout_at: datetime | None = None
    requested_at: datetime


class Failure(_Record):
    """Why a task failed, with everything needed to diagnose it without re-running."""

    at: datetime
    step: str | None = None
    tool: str | None = None
    call_key: str | None = None
    input: Any = None
    output: Any = None
    exception_type: str
    message: str
    traceback: str | None = None


class ParentRef(_Record):
    """Where a fork came from: the parent task and the last parent event it shares."""

    task_id: str
    seq: int


class TaskState(_Record):
    """Everything tether knows about one task, folded from its events.

    Example:
        >>> import tether
        >>> log = tether.TaskLog(tether.open_store("memory://"))
        >>> state = log.create(type="book_trip", inputs={"goal": "NYC"})
        >>> state.status, state.version
        (<Status.PENDING: 'pending'>, 1)
    """

    # ``position`` is computed; ignore it when reading a dump back.
    model_config = ConfigDict(frozen=True, extra="ignore")

    task_id: str
    tenant: str
    user_id: str | None = None
    session_id: str | None = None
    session_version: int = 0
    """The last version of its conversation the task read or wrote (``ctx.session``)."""
    type: str
    status: Status = Status.PENDING
    phase: str | None = None
    phases: dict[str, list[str]] | None = None
    inputs: dict[str, Any] = {}
    plan: tuple[Step, ...] = ()
    calls: CallList = _NO_CALLS
    """The calls in ordinal order (a :class:`CallList`: each record is validated when first read)."""
    decisions: tuple[Decision, ...] = ()
    observations: dict[str, Observation] = {}
    data: dict[str, Any] = {}
    data_version: int | None = None
    waiting: Waiting | None = None
    received: dict[str, Any] = {}
    """Inputs sent to the task (``send_input``) by key, including ones not yet asked for."""
    wake_at: datetime | None = None
    """When a sleeping task wakes, or a waiting one times out."""
    cancel_reason: str | None = None
    """Set once cancellation was asked for; the task ends ``cancelled`` when it is carried out."""
    failure: Failure | None = None
    output: Any = None
    parent: ParentRef | None = None
    superseded_by: str | None = None
    """Set on a branch a rewind set aside: the task that took its place."""
    version: int = 0
    created_at: datetime
    updated_at: datetime

    @computed_field  # type: ignore[prop-decorator]
    @property
    def position(self) -> str:
        """A one-line answer to "where are we?", e.g. ``step 6 of 9; 1–5 committed``."""
        done = 0 if self.plan else self.calls.completed()
        return describe_position(*plan_progress(self.plan), done)

    def call(self, n: int) -> ToolCall | None:
        """The call with ordinal ``n`` (1-based), if recorded."""
        i = call_index(self.calls, n)
        return None if i is None else self.calls[i]
