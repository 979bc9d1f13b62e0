"""Reading a loaded state's calls from their events: the reader a snapshot's
:class:`~tether.model.CallList` is given (a call's record is stored once, in its events)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from tether._call_list import CallList, CallReader
from tether.errors import TetherError
from tether.events import Recorded, fold_calls
from tether.model import TaskState, ToolCall
from tether.store import EventRow, Store

__all__ = ["call_reader"]

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
        template = state.model_copy(update={"calls": CallList()})

        def read(wanted: Sequence[tuple[int, Sequence[int]]]) -> list[ToolCall]:
            now = store.get_task(tenant, stream_id)
            if now is None or now.created_at != created:
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
                        found[event.seq] = decode(event)
            missing = seqs - found.keys()
            if missing:
                raise TetherError(f"task {stream_id!r} has no event {min(missing)}, which made one of its calls")
            return fold_calls(template, [(n, [found[seq] for seq in made]) for n, made in wanted])

        return read

    return for_state


def spans(seqs: Sequence[int], gap: int = _GAP) -> list[tuple[int, int]]:
    """Sorted seqs as ``(first, last)`` ranges, joining those less than ``gap`` apart."""
    out: list[tuple[int, int]] = []
    for seq in seqs:
        if out and seq - out[-1][1] < gap:
            out[-1] = (out[-1][0], seq)
        else:
            out.append((seq, seq))
    return out
