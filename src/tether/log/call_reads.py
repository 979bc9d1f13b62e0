"""Reading a loaded state's calls from their events: the reader a snapshot's
:class:`~tether.model.CallList` is given (a call's record is stored once, in its events)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from tether.errors import TetherError
from tether.events import Recorded, fold_calls
from tether.model import TaskState, ToolCall
from tether.model.calls import CallList, CallReader
from tether.store import EventRow, Store

__all__ = ["EventCalls", "call_reader", "calls_from"]

_NO_CALLS = CallList()  # read-only: one for every template

_GAP = 64
"""Seqs this close are read in one range (the events between come along and are dropped)."""


def call_reader(
    store: Store, tenant: str, stream_id: str, decode: Callable[[EventRow], Recorded]
) -> Callable[[TaskState], CallReader]:
    """For a state of stream ``stream_id`` parsed from a snapshot: the reader of its calls.

    The stream is pinned as it is when the state is loaded (its index row's ``created_at``): after
    a rewind or a delete puts another stream under the same id, reading a call of the old state
    raises instead of folding another branch's events into it.
    """

    def for_state(state: TaskState) -> CallReader:
        row = store.get_task(tenant, stream_id)
        created = None if row is None else row.created_at
        return EventCalls(store, tenant, stream_id, decode, state.model_copy(update={"calls": _NO_CALLS}), created)

    return for_state


class EventCalls:
    """A :data:`~tether.model.calls.CallReader`: calls' records folded from their events, read from the
    store, of the stream made at ``created``, onto ``template`` (a state of the task with no calls).
    An object of a few slots, not a closure: a log may keep thousands of states that read their
    calls so (:meth:`~tether.log.memory.Entry.put_away`), and the cycle collector walks every cell
    of every closure it keeps."""

    __slots__ = ("_created", "_decode", "_store", "_stream", "_template", "_tenant")

    def __init__(
        self,
        store: Store,
        tenant: str,
        stream_id: str,
        decode: Callable[[EventRow], Recorded],
        template: TaskState,
        created: float | None,
    ) -> None:
        self._store, self._tenant, self._stream, self._decode = store, tenant, stream_id, decode
        self._template = template  # the state with no calls, which each call is folded onto
        self._created = created

    def __call__(self, wanted: Sequence[tuple[int, Sequence[int]]]) -> list[ToolCall]:
        store, tenant, stream_id = self._store, self._tenant, self._stream
        now = store.get_task(tenant, stream_id)
        if now is None or now.created_at != self._created:
            raise TetherError(
                f"task {stream_id!r} was rewound or deleted since this state was loaded: its calls "
                "are read from the task's events when first asked for, and those are not this "
                "state's any more; load the task again"
            )
        seqs = {seq for _, made in wanted for seq in made}
        found: dict[int, Recorded] = {}
        for low, high in spans(sorted(seqs)):
            for event in store.read_events(tenant, stream_id, after=low - 1, upto=high):
                if event.seq in seqs:
                    found[event.seq] = self._decode(event)
        return _fold_found(self._template, wanted, found)


def calls_from(history: Sequence[Recorded], state: TaskState) -> CallReader:
    """The reader of ``state``'s calls from ``history``, the task's events read already (a run's
    record): no store read. For :meth:`~tether.model.calls.CallList.read_all`."""
    made: list[tuple[TaskState, dict[int, Recorded]]] = []  # made at the first read: most opens read none

    def read(wanted: Sequence[tuple[int, Sequence[int]]]) -> list[ToolCall]:
        if not made:
            made.append((state.model_copy(update={"calls": _NO_CALLS}), {rec.seq: rec for rec in history}))
        [(template, found)] = made
        return _fold_found(template, wanted, found)

    return read


def _fold_found(
    template: TaskState, wanted: Sequence[tuple[int, Sequence[int]]], found: Mapping[int, Recorded]
) -> list[ToolCall]:
    """The calls ``wanted`` (ordinal, the seqs of the events that made it), folded onto ``template``
    from the events ``found`` by seq."""
    missing = {seq for _, made in wanted for seq in made} - found.keys()
    if missing:
        raise TetherError(f"task {template.task_id!r} has no event {min(missing)}, which made one of its calls")
    return fold_calls(template, [(n, [found[seq] for seq in made]) for n, made in wanted])


def spans(seqs: Sequence[int], gap: int = _GAP) -> list[tuple[int, int]]:
    """Sorted seqs as ``(first, last)`` ranges, joining those less than ``gap`` apart."""
    out: list[tuple[int, int]] = []
    for seq in seqs:
        if out:
            first, last = out[-1]
            if seq - last < gap:
                out[-1] = (first, seq)
                continue
        out.append((seq, seq))
    return out
