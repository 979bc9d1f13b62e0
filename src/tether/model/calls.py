"""A task's calls as the fold keeps them (:class:`CallList`), with the index that says which events
made each call, and the fold's working copy of it (:class:`CallDraft`).

A list loaded from a snapshot may hold its first calls as a :class:`Prefix`: how many, the last
one's ordinal, which of them are not completed, and how to read them; its index (ordinals,
statuses, seqs) is read and parsed when something first needs it. What a task's head, a fork or
a fold of new calls needs (the count, the calls done, the calls still open, a call after the
prefix) is answered without it, so loading, forking or folding a task of 100,000 calls does not
parse 100,000 calls' index.
"""

from __future__ import annotations

import operator
import re
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple, overload

if TYPE_CHECKING:
    from tether.model.records import ToolCall

__all__ = ["CallDraft", "CallList", "CallReader", "Prefix", "Split", "call_index"]

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
_COMPLETED = ord("c")


class Prefix:
    """The first ``count`` calls of a list, known by a summary until they are read: the ordinal of
    the last of them (``last``, 0 when there are none; it is completed), the ordinals of those not
    completed (``open``), whether the whole list was :meth:`CallList.in_order`, and ``resolve()``,
    which reads them (once; a list of exactly those calls)."""

    __slots__ = ("_calls", "_resolve", "count", "last", "open", "ordered")

    def __init__(
        self, count: int, last: int, open: Sequence[int], ordered: bool, resolve: Callable[[], CallList]
    ) -> None:
        self.count = count
        self.last = last
        self.open = frozenset(open)
        self.ordered = ordered
        self._resolve = resolve
        self._calls: CallList | None = None

    def calls(self) -> CallList:
        made = self._calls
        if made is None:
            made = self._calls = self._resolve()
        return made


class Split(NamedTuple):
    """A list as a snapshot summarises it: its calls but the trailing ones not completed form the
    prefix (``size`` calls in all, the prefix's ``last`` ordinal, its ``open`` ordinals), and the
    trailing ones (``tail``: ordinal, status code, seqs), whose events a later fold goes on with."""

    size: int
    last: int
    open: list[int]
    tail: list[tuple[int, str, str]]
    ordered: bool


class CallList(Sequence["ToolCall"]):
    """A task's calls in ordinal order: a read-only sequence of :class:`ToolCall`.

    A call's record is made by its events (``CallStarted``, ``CallCompleted``, ...), and a
    ``CallList`` knows, for each call, the seqs of the events that made it. A state loaded from
    a snapshot holds only those (the snapshot stores a result once: in its event); a call's
    record is folded from its events, read from the store, when it is first read — by index,
    or by iterating, a page of calls per store read. The ordinals and the statuses are known
    without reading (:meth:`ordinals`, :meth:`completed`, :meth:`index_of`).

    Compares equal to any sequence of the same records (a tuple, a list, another ``CallList``).

    With a :class:`Prefix`, the list's own lists hold only the calls after it; anything that needs
    the prefix's index reads it (a list of the whole, made once, answers from then on).
    """

    __slots__ = ("_items", "_merged", "_ns", "_ordered", "_prefix", "_reader", "_seqs", "_status")
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
        prefix: Prefix | None = None,
    ) -> None:
        """``CallList(calls)`` from records in ordinal order (the events that made them unknown);
        ``stored=(ordinals, status codes, seqs, reader, records)`` (the codes and seqs as
        :meth:`status_codes` and :meth:`event_seqs` give them): the lists as they are, without a
        copy; a record not read yet is ``None`` (``records=None``: none is), read by ``reader``.
        ``ordered``: the seqs, call after call, only ever grow (see :meth:`in_order`). ``prefix``:
        the calls before those ``stored`` (whose ordinals are all above ``prefix.last``)."""
        self._ordered = ordered and stored is not None
        self._prefix = prefix
        self._merged: CallList | None = None
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
        """A copy the fold changes (:class:`tether.events._draft._Draft`); this list is untouched
        (a prefix is shared, not read)."""
        copies = (list(self._ns), bytearray(self._status), list(self._seqs), self._reader, list(self._items))
        if self._prefix is not None:
            return CallDraft(stored=copies, ordered=self._ordered, prefix=self._prefix)
        return CallDraft(stored=copies, ordered=self._ordered or not self._ns)

    def whole(self) -> CallList:
        """This list with its prefix read: itself when it has none, else a list of the whole (made
        once; two threads may each make one, alike)."""
        prefix = self._prefix
        if prefix is None:
            return self
        merged = self._merged
        if merged is None:
            merged = CallList(stored=_joined(prefix.calls(), self), ordered=self._ordered and prefix.calls().in_order())
            self._merged = merged
        return merged

    def split(self) -> Split:
        """The list as a snapshot summarises it (:class:`Split`), without reading a prefix."""
        prefix = self._prefix
        ns, codes, seqs = self._ns, self._status, self._seqs
        cut = len(ns)
        while cut and codes[cut - 1] != _COMPLETED:
            cut -= 1
        opened = [] if prefix is None else sorted(prefix.open)
        opened += [ns[found.start()] for found in _NOT_COMPLETED.finditer(codes, 0, cut)]
        last = ns[cut - 1] if cut else (0 if prefix is None else prefix.last)
        tail = [(ns[i], chr(codes[i]), seqs[i]) for i in range(cut, len(ns))]
        return Split(len(self), last, opened, tail, self.in_order())

    def first(self, count: int) -> CallList:
        """The first ``count`` calls (read)."""
        if self._prefix is not None:
            return self.whole().first(count)
        if count == len(self._ns):
            return self
        stored = (self._ns[:count], self._status[:count], self._seqs[:count], self._reader, self._items[:count])
        return CallList(stored=stored, ordered=self._ordered)

    def unread(self, reader: CallReader) -> CallList | None:
        """The same calls with no record read: each is read by ``reader`` when first asked for, as a
        list loaded from a snapshot reads its calls (a prefix is kept as it is). ``None`` when some
        call's events are not known (a list made from records), or none of its records is held."""
        if "" in self._seqs or all(item is None for item in self._items):
            return None
        stored = (self._ns, self._status, self._seqs, reader, None)
        return CallList(stored=stored, ordered=self._ordered, prefix=self._prefix)

    def in_order(self) -> bool:
        """Whether every call's events come after all of the calls before it, as when a task makes
        one call at a time (not parallel calls, not a call retried after others): then the calls as
        they stood at any seq are a prefix of these (:meth:`upto` finds it by bisection)."""
        prefix = self._prefix
        return self._ordered and (prefix is None or prefix.ordered)

    def parts(self) -> _Stored:
        """This list's own lists (ordinals, status codes, seqs, reader, records), not copies: the calls
        after its prefix, when it has one."""
        return self._ns, self._status, self._seqs, self._reader, self._items

    def ordinals(self) -> list[int]:
        """The calls' ordinals, in order (a copy)."""
        if self._prefix is not None:
            return self.whole().ordinals()
        return list(self._ns)

    def statuses(self) -> list[str]:
        """The calls' statuses, in order."""
        if self._prefix is not None:
            return self.whole().statuses()
        return [_STATUS[code] for code in self._status]

    def status_codes(self) -> bytes:
        """The calls' statuses, in order, one byte each: ``i`` intended, ``c`` completed, ``f`` failed."""
        if self._prefix is not None:
            return self.whole().status_codes()
        return bytes(self._status)

    def event_seqs(self) -> list[str]:
        """For each call, in order, the seqs of the events that made its record, comma-separated
        (``"12,15"``; empty for a record that came from elsewhere than the fold). Strings, not lists:
        a snapshot of 100,000 calls parses into 100,000 strings, which the garbage collector does
        not walk, where 100,000 lists would cost it more than the parse."""
        if self._prefix is not None:
            return self.whole().event_seqs()
        return list(self._seqs)

    def open_ordinals(self) -> set[int]:
        """The ordinals of the calls not completed (no record is read, nor a prefix)."""
        ns = self._ns
        opened = {ns[found.start()] for found in _NOT_COMPLETED.finditer(self._status)}
        return opened if self._prefix is None else opened.union(self._prefix.open)

    def completed(self) -> int:
        """How many calls are completed (no record is read, nor a prefix)."""
        prefix = self._prefix
        done = self._status.count(b"c")
        return done if prefix is None else done + prefix.count - len(prefix.open)

    def last(self) -> int:
        """The highest ordinal in the list (0: none), without reading a prefix (its calls not completed
        come before its last one)."""
        if self._ns:
            return self._ns[-1]
        prefix = self._prefix
        return 0 if prefix is None else prefix.last

    def has(self, n: int) -> bool:
        """Whether call ``n`` is in the list; a prefix is not read for a call after it, nor for one
        of its calls not completed (a parallel call finishing, an attempt retried)."""
        prefix = self._prefix
        if prefix is not None and n in prefix.open:
            return True
        return self.index_of(n) is not None

    def index_of(self, n: int) -> int | None:
        """Where call ``n`` sits, or ``None`` (see :func:`call_index`); no record is read, nor a
        prefix for a call after it."""
        prefix = self._prefix
        if prefix is not None:
            if n <= prefix.last:
                return self.whole().index_of(n)
            i = bisect_left(self._ns, n)
            return prefix.count + i if i < len(self._ns) and self._ns[i] == n else None
        ns = self._ns
        if 0 < n <= len(ns) and ns[n - 1] == n:
            return n - 1
        i = bisect_left(ns, n)
        return i if i < len(ns) and ns[i] == n else None

    def upto(self, seq: int) -> CallList:
        """The calls as they stood right after event ``seq``: those opened by then, each made by its
        events up to ``seq`` only. A call whose events run past ``seq`` (open then, or retried since)
        is read now, folded from its earlier events; the others keep their records, read or not."""
        if self._prefix is not None:
            return self.whole().upto(seq)
        all_seqs = self._seqs
        if self._ordered:
            return self._prefix_upto(seq)
        lasts = map(int, map(_THIRD, map(_LAST_PART, all_seqs)))  # in C: no Python frame per call
        late = [i for i, last in enumerate(lasts) if last > seq]  # calls with an event after ``seq``
        if not late:
            return self
        # The late calls in one block up to the last call were (nearly all) opened after ``seq``: of
        # those only a call of several events can have begun by then, so only those are looked at.
        # Without such a block (a call after the late ones was made by then) each is looked at.
        first_of_tail = len(all_seqs)
        if late[-1] == len(all_seqs) - 1:
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

    def read_all(self, reader: CallReader | None = None) -> None:
        """Read every record not read yet, by ``reader`` (the list's own if ``None``: one that has the
        events at hand spares the store a read), the prefix's and a whole list made of it too."""
        if self._prefix is not None:
            self._prefix.calls().read_all(reader)
            if self._merged is not None:
                self._merged.read_all(reader)
        self._load(0, len(self._ns), reader)

    def _load(self, low: int, high: int, reader: CallReader | None = None) -> None:
        """Read the records of calls ``low..high-1`` that are not read yet, in one read (by ``reader``,
        else the list's own)."""
        want = [j for j in range(low, high) if self._items[j] is None]
        if not want:
            return
        reader = reader or self._reader
        assert reader is not None, "a CallList without a reader holds every record"
        wanted = [(self._ns[j], [int(seq) for seq in self._seqs[j].split(",")]) for j in want]
        for j, record in zip(want, reader(wanted), strict=True):
            self._items[j] = record  # the same record for every reader after the first

    def __len__(self) -> int:
        prefix = self._prefix
        return len(self._ns) if prefix is None else prefix.count + len(self._ns)

    @overload
    def __getitem__(self, i: int) -> ToolCall: ...
    @overload
    def __getitem__(self, i: slice) -> tuple[ToolCall, ...]: ...
    def __getitem__(self, i: int | slice) -> ToolCall | tuple[ToolCall, ...]:
        prefix = self._prefix
        if prefix is not None:  # a call after the prefix is read without it
            if isinstance(i, int) and prefix.count <= (i if i >= 0 else i + len(self)) < len(self):
                return self._read((i if i >= 0 else i + len(self)) - prefix.count)
            return self.whole()[i]
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
        if self._prefix is not None:
            yield from self.whole()
            return
        count = len(self._ns)
        for i in range(count):
            if self._items[i] is None:
                self._load(i, min(count, i + _PAGE))
            yield self._read(i)

    def __reversed__(self) -> Iterator[ToolCall]:
        if self._prefix is not None:
            yield from reversed(self.whole())
            return
        for i in range(len(self._ns) - 1, -1, -1):
            if self._items[i] is None:
                self._load(max(0, i - _PAGE + 1), i + 1)
            yield self._read(i)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, CallList):
            if other is self:
                return True
            if len(self) != len(other) or self.ordinals() != other.ordinals():
                return False
            if self.status_codes() != other.status_codes():
                return False
        elif not isinstance(other, tuple | list):
            return NotImplemented
        elif len(other) != len(self):
            return False
        return all(a == b for a, b in zip(self, other, strict=True))

    def __hash__(self) -> int:
        return hash(tuple(self.ordinals()))

    def __repr__(self) -> str:
        return f"CallList({list(self)!r})"

    def __deepcopy__(self, memo: dict[int, Any]) -> CallList:
        return self  # immutable to its readers: the fold changes only drafts


class CallDraft(CallList):
    """The fold's working copy of a :class:`CallList` while a batch of events is folded: each
    change names the seq of the event that made it."""

    __slots__ = ()

    def whole(self) -> CallList:
        """Read the prefix into this draft's own lists (it is changed next)."""
        prefix = self._prefix
        if prefix is not None:
            calls = prefix.calls()
            self._ns, self._status, self._seqs, self._reader, items = _joined(calls, self)
            self._items = items if items is not None else [None] * len(self._ns)
            self._ordered = self._ordered and calls.in_order()
            self._prefix = None
        return self

    def set_call(self, i: int, call: ToolCall, seq: int) -> None:
        prefix = self._prefix
        if prefix is not None:
            if i < prefix.count:
                self.whole()
            else:
                i -= prefix.count
        if i != len(self._ns) - 1:
            self._ordered = False  # an event of a call after events of calls after it
        self._items[i] = call
        self._status[i] = _CODE[call.status]
        self._seqs[i] = f"{self._seqs[i]},{seq}" if self._seqs[i] else str(seq)

    def open_call(self, call: ToolCall, seq: int) -> None:
        """Add a new call in ordinal order (parallel calls open in the order they finish)."""
        if self._prefix is not None and call.n <= self._prefix.last:
            self.whole()
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
        stored = (self._ns, self._status, self._seqs, self._reader, self._items)
        return CallList(stored=stored, ordered=self._ordered, prefix=self._prefix)


def _joined(first: CallList, then: CallList) -> _Stored:
    """The lists of ``first`` (a list with no prefix) followed by ``then``'s own."""
    ns, codes, seqs, reader, items = first.whole().parts()
    more_ns, more_codes, more_seqs, more_reader, more_items = then.parts()
    return (
        ns + more_ns,
        codes + more_codes,
        seqs + more_seqs,
        more_reader if more_reader is not None else reader,
        (items or []) + (more_items or []),
    )


NO_CALLS = CallList()


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
