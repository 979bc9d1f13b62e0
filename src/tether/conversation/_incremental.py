"""A session read from its newest end: what an append and a window need, at a cost that does not
grow with the conversation.

The full :class:`~tether.conversation.messages.SessionView` holds every message after the
summary: a session of 100,000 messages and no summary would cost 100,000 messages to open, and
every append would copy them. :class:`IncrementalView` keeps instead

* the *outline*: the session's id and user, its system messages, the newest summary, whether it is
  closed, where its recent messages begin (``boundary``: they have larger seqs), how many there
  are and which of them were removed. It is small, folded event by event, and cached as a
  snapshot every ``every`` events through the log's snapshot mechanism (checksummed,
  schema-versioned, a fork falling back to its parent's);
* the *tail*: the newest recent messages, as many as windows have asked for, read backwards from
  the store a page at a time when a window reaches further.

Opening costs one snapshot and the events after it, an append folds what it added, and a window
reads as far back as it reaches. The rules are :func:`~tether.conversation.messages.fold_view`'s,
event for event; the conformance suite checks that the two agree.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import orjson

from tether.conversation.messages import (
    Message,
    MessageAdded,
    MessageRemoved,
    MessagesCleared,
    SessionClosed,
    SessionOpened,
    SessionView,
    Summary,
    SummaryAdded,
    SummaryWithdrawn,
    added_role,
    fold_history,
    message_from_event,
    summary_from_event,
)
from tether.conversation.window import TokenCounter, Window, message_tokens, window_over
from tether.errors import TaskNotFoundError
from tether.events import Recorded
from tether.log.streams import Stream
from tether.store import SnapshotRow

__all__ = ["VIEW_SCHEMA", "IncrementalView", "Outline"]

VIEW_SCHEMA = 3
"""The schema of a session's snapshot: 2 was the whole view, 3 is the :class:`Outline`."""

_TAIL_CAP = 2048  # messages kept in memory past which the oldest half of the tail is let go
_FIRST_PAGE = 64  # events read backwards when a window reaches past the tail (then 4x each time)


@dataclass
class Outline:
    """The part of a session's view that does not grow with its messages."""

    session_id: str = ""
    user_id: str | None = None
    system: list[Message] = field(default_factory=list)
    summary: Summary | None = None
    closed: bool = False
    version: int = 0
    boundary: int = 0
    """Recent messages (the ones after the summary, or after a clear) have seqs above this."""
    count: int = 0
    """How many recent messages there are."""
    removed: set[int] = field(default_factory=set)
    """Seqs above ``boundary`` that are not recent messages (removed, or never were)."""

    def to_json(self) -> str:
        return orjson.dumps(
            {
                "session_id": self.session_id,
                "user_id": self.user_id,
                "system": [m.model_dump(mode="json") for m in self.system],
                "summary": self.summary.model_dump(mode="json") if self.summary else None,
                "closed": self.closed,
                "version": self.version,
                "boundary": self.boundary,
                "count": self.count,
                "removed": sorted(self.removed),
            }
        ).decode()

    @classmethod
    def from_snapshot(cls, snap: SnapshotRow) -> Outline:
        """Read a snapshot (this schema, or the whole view of schema 2); ``ValueError`` if it cannot."""
        if snap.schema == 2:
            return cls.from_view(SessionView.model_validate_json(snap.data))
        if snap.schema != VIEW_SCHEMA:
            raise ValueError(f"has session view schema {snap.schema}, current is {VIEW_SCHEMA}")
        try:
            raw = orjson.loads(snap.data)
            return cls(
                session_id=raw["session_id"],
                user_id=raw["user_id"],
                system=[Message.model_validate(m) for m in raw["system"]],
                summary=Summary.model_validate(raw["summary"]) if raw["summary"] is not None else None,
                closed=bool(raw["closed"]),
                version=int(raw["version"]),
                boundary=int(raw["boundary"]),
                count=int(raw["count"]),
                removed={int(s) for s in raw["removed"]},
            )
        except (orjson.JSONDecodeError, KeyError, TypeError) as exc:
            raise ValueError(f"does not hold a session outline ({exc})") from None

    @classmethod
    def from_view(cls, view: SessionView) -> Outline:
        """The outline of a whole view (what ``ctx.session`` keeps, written at its compactions)."""
        boundary = view.recent[0].seq - 1 if view.recent else view.version
        kept = {m.seq for m in view.recent}
        return cls(
            session_id=view.session_id,
            user_id=view.user_id,
            system=list(view.system),
            summary=view.summary,
            closed=view.closed,
            version=view.version,
            boundary=boundary,
            count=len(view.recent),
            removed={s for s in range(boundary + 1, view.version + 1) if s not in kept},
        )


class IncrementalView:
    """The outline and tail of one session's stream, kept up to date by folding new events.

    ``every``: an outline snapshot is written once that many events have been folded since the last.
    """

    def __init__(self, stream: Stream, every: int) -> None:
        self._stream = stream
        self._every = every
        self.outline = Outline()
        self.tail: list[Message] = []
        self.tail_from = 0
        """The tail holds every recent message with a larger seq than this."""
        self._snap_seq = 0
        self._costs: dict[int, int] = {}  # tokens of tail messages by seq, by ``_costs_counter``
        self._costs_counter: TokenCounter | None = None

    # ------------------------------------------------------------------ loading
    def load(self) -> bool:
        """Read the newest outline snapshot and the events after it; ``False`` if the stream does not exist."""
        try:
            snap, outline, records = self._stream.log.latest(self._stream.id, Outline.from_snapshot)
        except TaskNotFoundError:
            return False
        if outline is None and not records:
            return False
        self.outline = outline or Outline()
        self.tail = []
        self.tail_from = self.outline.version
        self._snap_seq = snap.seq if snap else 0
        self.fold(records)
        self.maybe_snapshot()
        return True

    def refresh(self) -> None:
        """Fold what other writers appended since."""
        newer = self._stream.read(after=self.outline.version)
        if newer:
            self.fold(newer)

    # ------------------------------------------------------------------ the fold
    def fold(self, records: Sequence[Recorded]) -> list[Message]:
        """Fold events that follow the outline, in order; return the messages they added."""
        if any(isinstance(r.event, SummaryWithdrawn) for r in records):
            # A compaction undone: the messages it covered come back, which only a fold of the
            # whole stream knows (the outline let them go). Rare: the price is one full read.
            return self._rebuild(records)
        outline, added = self.outline, []
        for rec in records:
            ev = rec.event
            outline.version = rec.seq
            if isinstance(ev, MessageAdded):
                message = message_from_event(rec, ev)
                added.append(message)
                if message.role == "system":
                    outline.system.append(message)
                else:
                    outline.count += 1
                    self.tail.append(message)
            elif isinstance(ev, MessageRemoved):
                self._remove(ev.seq)
            elif isinstance(ev, MessagesCleared):
                outline.system, outline.summary, outline.count, outline.removed = [], None, 0, set()
                outline.boundary = self.tail_from = rec.seq
                self.tail = []
            elif isinstance(ev, SummaryAdded):
                outline.summary = summary_from_event(rec, ev)
                if ev.covers_to > outline.boundary:
                    self._move_boundary(ev.covers_to)
            elif isinstance(ev, SessionOpened):
                outline.session_id, outline.user_id = ev.session_id, ev.user_id
            elif isinstance(ev, SessionClosed):
                outline.closed = True
        if len(self.tail) > _TAIL_CAP:
            let_go = len(self.tail) - _TAIL_CAP // 2
            self.tail_from = self.tail[let_go - 1].seq
            del self.tail[:let_go]
        return added

    def _rebuild(self, records: Sequence[Recorded]) -> list[Message]:
        everything = self._stream.read(upto=records[-1].seq)
        view = fold_history(everything)
        self.outline = Outline.from_view(view)
        self.tail = list(view.recent)
        self.tail_from = self.outline.boundary
        self._costs.clear()
        first = records[0].seq
        return [m for m in (*view.system, *view.recent) if m.seq >= first]

    def _remove(self, seq: int) -> None:
        outline = self.outline
        for i, m in enumerate(outline.system):
            if m.seq == seq:
                del outline.system[i]
                return
        if seq <= outline.boundary or seq in outline.removed:
            return
        outline.removed.add(seq)
        outline.count -= 1
        if seq > self.tail_from:
            for i in range(len(self.tail) - 1, -1, -1):
                if self.tail[i].seq == seq:
                    del self.tail[i]
                    break

    def _move_boundary(self, boundary: int) -> None:
        """A summary covers everything up to ``boundary``: the recent messages start after it."""
        outline = self.outline
        if self.tail_from >= boundary:
            # Some recent messages before the tail stay recent: count them in the store.
            outline.count = len(self.tail) + self._count_recent(boundary, self.tail_from)
        else:
            self.tail = [m for m in self.tail if m.seq > boundary]
            self.tail_from = boundary
            outline.count = len(self.tail)
        outline.boundary = boundary
        outline.removed = {s for s in outline.removed if s > boundary}

    def _count_recent(self, after: int, upto: int) -> int:
        if upto <= after:
            return 0
        removed = self.outline.removed
        return sum(
            1
            for rec in self._stream.read(after=after, upto=upto)
            if isinstance(rec.event, MessageAdded) and rec.seq not in removed and added_role(rec.event) != "system"
        )

    # ------------------------------------------------------------------ reading backwards
    @property
    def complete(self) -> bool:
        """Whether the tail holds every recent message."""
        return self.tail_from <= self.outline.boundary

    def extend(self, events: int) -> None:
        """Read up to ``events`` more events backwards from the tail's start and keep their messages."""
        outline = self.outline
        low = max(outline.boundary, self.tail_from - events)
        made = (
            message_from_event(rec, rec.event)
            for rec in self._stream.read(after=low, upto=self.tail_from)
            if isinstance(rec.event, MessageAdded) and rec.seq not in outline.removed
        )
        older = [m for m in made if m.role != "system"]
        self.tail[:0] = older
        self.tail_from = low

    def recent(self) -> tuple[Message, ...]:
        """Every recent message (reads the rest of them if the tail does not hold them yet)."""
        page = _FIRST_PAGE
        while not self.complete:
            self.extend(page)
            page *= 4
        return tuple(self.tail)

    def view(self) -> SessionView:
        outline = self.outline
        return SessionView.model_construct(
            session_id=outline.session_id,
            user_id=outline.user_id,
            system=tuple(outline.system),
            summary=outline.summary,
            recent=self.recent(),
            closed=outline.closed,
            version=outline.version,
        )

    def _token_costs(self, counter: TokenCounter) -> dict[int, int]:
        """Token counts of messages by seq, by ``counter``, kept between windows."""
        if counter is not self._costs_counter or len(self._costs) > 2 * _TAIL_CAP:
            self._costs, self._costs_counter = {}, counter
        return self._costs

    def recent_tokens(self, counter: TokenCounter) -> int:
        """The weight of every recent message (what automatic compaction compares with its limit)."""
        costs = self._token_costs(counter)
        total = 0
        for m in self.recent():
            tokens = costs.get(m.seq)
            if tokens is None:
                tokens = costs[m.seq] = message_tokens(m, counter)
            total += tokens
        return total

    def window(self, max_tokens: int, keep_last: int, counter: TokenCounter) -> Window:
        """The window (see :func:`~tether.conversation.window.build_window`), reading back only as far as it reaches."""
        self._token_costs(counter)
        outline = self.outline
        while True:
            window = window_over(
                outline.system, outline.summary, self.tail, complete=self.complete, total=outline.count,
                max_tokens=max_tokens, keep_last=keep_last, counter=counter, costs=self._costs,
            )
            if window is not None:
                return window
            self.extend(max(_FIRST_PAGE, outline.version - self.tail_from))  # doubling what was read

    def last(self) -> Message | None:
        """The newest message still in the session (system or not)."""
        page = _FIRST_PAGE
        while not self.tail and not self.complete:
            self.extend(page)
            page *= 4
        candidates = [m for m in (self.outline.system[-1:] + self.tail[-1:])]
        return max(candidates, key=lambda m: m.seq) if candidates else None

    # ------------------------------------------------------------------ snapshots
    def maybe_snapshot(self) -> None:
        if self.outline.version - self._snap_seq >= self._every:
            self.snapshot()

    def snapshot(self) -> None:
        """Cache the outline at its version, in place of the one before (it does not grow with history)."""
        version = self.outline.version
        if version == self._snap_seq:
            return
        self._stream.log.put_stream_snapshot(
            self._stream.id, version, VIEW_SCHEMA, self.outline.to_json(), replaces=self._snap_seq or None
        )
        self._snap_seq = version
