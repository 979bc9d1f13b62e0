"""tether as a LangGraph checkpointer: ``TetherSaver``.

Every thread is one tether stream (type ``tether.langgraph``, id ``langgraph:{thread_id}``) in the
same database, tenant and transaction rules as tasks. A checkpoint is one event holding only the
channels whose version changed; a list that grew by appending (``add_messages``) stores only its
new items, so a chat stores each message once instead of the whole conversation per step.

Concurrency: every write is one optimistic append at the version this process last read. When
another process got there first, the append writes nothing (``ConflictError`` inside); the saver
reads what the other wrote, builds the event again against it (an item the other stored may now be
referred to) and appends again. Nothing is lost and no checkpoint is ever half written. After
``_RETRIES`` refusals in a row it gives up with ``ConflictError``.

Threads: LangGraph calls a saver from many threads at once (its task pools, a background executor
per run and per subgraph). All of a saver's work runs on one worker thread of its own, in the
order it is asked for; the async methods await that thread. So the saver needs no lock, and holds
one store connection however many threads call it.

Requires ``pip install 'tether[langgraph]'``.
"""

from __future__ import annotations

import asyncio
import builtins
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

try:
    from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
    from langchain_core.runnables import RunnableConfig
    from langgraph.checkpoint.base import (
        WRITES_IDX_MAP,
        BaseCheckpointSaver,
        ChannelVersions,
        Checkpoint,
        CheckpointMetadata,
        CheckpointTuple,
        DeltaChannelHistory,
        PendingWrite,
        get_checkpoint_id,
        get_checkpoint_metadata,
    )
    from langgraph.checkpoint.serde.base import SerializerProtocol
    from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
    from langgraph.types import Send

    from tether.integrations._versions import check_tested

    check_tested("langgraph", "tether.integrations.langgraph")
    check_tested("langgraph-checkpoint", "tether.integrations.langgraph")
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        f"tether.integrations.langgraph needs LangGraph ({exc}); install it with: pip install 'tether[langgraph]'"
    ) from None

from tether.errors import ConflictError, InvalidInputError, TaskNotFoundError
from tether.events import Event, Recorded
from tether.integrations._gc import no_cycle_collection
from tether.integrations._langgraph_compact import SNAPSHOT_SCHEMA, restated, snapshot_data, view_of_snapshot
from tether.integrations._langgraph_index import (
    Listing,
    append_with_head,
    create_with_head,
    newest_after,
    newest_in,
)
from tether.integrations._langgraph_log import (
    THREAD_TYPE,
    CheckpointSaved,
    CheckpointsDeleted,
    NeedsHistory,
    Saved,
    ThreadCompacted,
    ThreadView,
    WritesSaved,
    decode_json,
    encode_json,
    list_threads,
    register_plain_msgpack,
    register_send,
    stream_id,
    thread_of,
)
from tether.integrations._langgraph_store import TetherStore
from tether.integrations._langgraph_tools import TetherToolNode, tool_key
from tether.integrations._langgraph_worker import Worker, raw, serialized
from tether.log import TaskLog
from tether.log.conflicts import retry_on_conflict
from tether.log.streams import Stream
from tether.store import SnapshotRow, TaskFilter, TaskRow

__all__ = ["THREAD_TYPE", "TetherSaver", "TetherStore", "TetherToolNode", "tool_key"]

_RETRIES = 100
register_send(Send)
# What a thread's channels hold most: messages of each kind, with tool calls, and plain values.
_SAMPLES = [
    HumanMessage("Fly me to Lisbon.", id="h1"),
    AIMessage("", id="a1", tool_calls=[{"name": "search", "args": {"q": "LIS"}, "id": "c1"}]),
    ToolMessage("BA117", tool_call_id="c1", id="t1"),
    {"n": 1, "at": "2026-12-03"},
]
register_plain_msgpack(JsonPlusSerializer, _SAMPLES)
_BATCH = 64  # checkpoints a list() builds per hand-over to the worker thread
_ALL = 1_000_000_000


class _Thread:
    """A thread this process has read: its stream, its folded view, and which stream that was."""

    __slots__ = ("created_at", "snapped", "stream", "view")

    def __init__(self, stream: Stream) -> None:
        self.stream = stream
        self.view = ThreadView()
        self.created_at: float | None = None
        self.snapped = 0  # the seq of the thread's newest snapshot this process knows of (0: none)


class TetherSaver(BaseCheckpointSaver[int]):
    """A LangGraph checkpointer that keeps threads in a tether database.

    Args:
        target: a store URL (``sqlite:///tether.db``, ``postgresql://…``), a
            :class:`~tether.TaskLog`, or a :class:`~tether.App` (its log is used).
            ``None`` opens tether's default database.
        tenant: with a URL, the tenant every read and write is scoped to (a log or
            app brings its own).
        serde: LangGraph's serializer for channel values and writes (its default
            ``JsonPlusSerializer`` when not given).
        cache_size: how many threads this saver keeps folded in memory (least recently
            used go first; a thread read again is read from the store again).
        snapshot_every: after how many events of a thread the saver that wrote them stores a
            snapshot of its newest state (replacing the one before), so a process that has not
            read the thread reads that snapshot and at most this many events.

    Example:
        >>> from typing import Annotated, TypedDict
        >>> from langgraph.graph import StateGraph, START
        >>> from langgraph.graph.message import add_messages
        >>> from tether.integrations.langgraph import TetherSaver
        >>> class Chat(TypedDict):
        ...     messages: Annotated[list, add_messages]
        >>> def reply(state: Chat) -> dict:
        ...     return {"messages": [("ai", f"you said {state['messages'][-1].content}")]}
        >>> builder = StateGraph(Chat)
        >>> _ = builder.add_node("reply", reply).add_edge(START, "reply")
        >>> graph = builder.compile(checkpointer=TetherSaver("memory://"))
        >>> config = {"configurable": {"thread_id": "t1"}}
        >>> _ = graph.invoke({"messages": [("user", "hi")]}, config)
        >>> [m.content for m in graph.get_state(config).values["messages"]]
        ['hi', 'you said hi']
    """

    def __init__(
        self,
        target: str | TaskLog | Any | None = None,
        *,
        tenant: str = "default",
        serde: SerializerProtocol | None = None,
        cache_size: int = 256,
        snapshot_every: int = 64,
    ) -> None:
        super().__init__(serde=serde)
        if type(snapshot_every) is not int or snapshot_every < 1:
            raise InvalidInputError(
                f"snapshot_every must be a whole number of events, at least 1, got {snapshot_every!r}"
            )
        self._snapshot_every = snapshot_every
        if isinstance(target, TaskLog):
            self.log = target
        elif target is None or isinstance(target, str):
            self.log = TaskLog(target, tenant=tenant)
        elif isinstance(getattr(target, "log", None), TaskLog):
            self.log = target.log
        else:
            raise InvalidInputError(f"TetherSaver takes a store URL, a TaskLog or an App, not {type(target).__name__}")
        self._threads: OrderedDict[str, _Thread] = OrderedDict()
        self._cache_size = cache_size
        # One thread of its own does all of this saver's work: the threads LangGraph calls from (its
        # pools, a background executor per run and subgraph) never touch the store, so the saver needs
        # no lock and holds one connection (PostgreSQL lends each appending thread one until it ends).
        self._worker = Worker(self, "tether-langgraph")

    def close(self) -> None:
        """Stop the saver's worker thread (the store stays open: it belongs to the log)."""
        self._worker.shutdown()

    # ------------------------------------------------------------------ reading the log
    def _thread(self, thread_id: str, *, refresh: bool = True) -> _Thread:
        """The thread's view, brought up to date with the store (one indexed read when nothing changed)."""
        thread = self._threads.get(thread_id)
        if thread is None:
            thread = self._threads[thread_id] = _Thread(Stream(self.log, stream_id(thread_id), THREAD_TYPE))
            while len(self._threads) > self._cache_size:
                self._threads.popitem(last=False)
        else:
            self._threads.move_to_end(thread_id)
            if not refresh:
                return thread
        row = self.log.store.get_task(self.log.tenant, thread.stream.id)
        if row is None or (thread.created_at is not None and row.created_at != thread.created_at):
            # Deleted, or deleted and started again, by someone else: forget what we knew.
            thread.view, thread.created_at, thread.snapped = ThreadView(), None, 0
            if row is None:
                return thread
        if row.version != thread.view.version:
            try:
                if thread.view.version == 0:
                    self._open(thread, row)
                else:
                    thread.view.read(thread.stream)
            except NeedsHistory:
                self._refold(thread)
        thread.created_at = row.created_at
        return thread

    def _open(self, thread: _Thread, row: TaskRow) -> None:
        """A thread this process has not read: its newest snapshot and the events after it (one read),
        or all its events when it has none (written before snapshots, or short)."""

        def parse(snap: SnapshotRow) -> ThreadView:
            return view_of_snapshot(snap.data, snap.seq, row.created_at, snap.schema)

        try:
            snap, view, after = self.log.latest(thread.stream.id, parse)
        except TaskNotFoundError:
            return  # deleted meanwhile: the next read finds it gone
        thread.view = view if view is not None else ThreadView()
        thread.snapped = snap.seq if snap is not None and view is not None else 0
        with no_cycle_collection():
            for rec in after:
                thread.view.apply(rec)  # NeedsHistory when an event reaches past the snapshot

    def _refold(self, thread: _Thread) -> None:
        """Fold the thread's whole stream: what a view read from a snapshot lacked is needed."""
        view = ThreadView()
        view.read(thread.stream)
        thread.view = view

    def _full_view(self, thread_id: str) -> ThreadView:
        """The thread's view with its whole history (folded now if it was read from a snapshot)."""
        thread = self._thread(thread_id)
        if thread.view.partial:
            self._refold(thread)
        return thread.view

    def _snapshot_if_due(self, thread: _Thread) -> None:
        """After a write: store the thread's newest state as a snapshot once ``snapshot_every`` events
        came after the one before (which it replaces, in the same transaction). A cache: a reader
        that finds it missing or damaged folds the events."""
        view = thread.view
        if view.version - thread.snapped < self._snapshot_every:
            return
        replaces = thread.snapped or None
        data, held = snapshot_data(view, thread.created_at)
        try:
            self.log.put_stream_snapshot(thread.stream.id, view.version, SNAPSHOT_SCHEMA, data, replaces=replaces)
        except TaskNotFoundError:
            return  # deleted since this saver's write: nothing to cache
        thread.snapped = view.version
        view.recent = held  # from now on this saver refers only to items a reader of the snapshot holds

    def _append(self, thread_id: str, make: Callable[[ThreadView], Event | None]) -> None:
        """Append the event ``make`` builds from the thread's view; when another writer got there first
        (the append wrote nothing), read what it wrote and build the event again from that.

        The view is brought up to date first (one indexed read): a thread deleted and started again
        elsewhere may have reached the version this process knows, and an event built against the
        old thread (an append to its lists, a reference to its items) would be taken there and make
        the new one unreadable."""

        def attempt() -> None:
            thread = self._thread(thread_id)
            thread.view.begin()
            try:
                event = make(thread.view)
            except NeedsHistory:  # it names a checkpoint from before the snapshot this view was read from
                self._refold(thread)
                thread.view.begin()
                event = make(thread.view)
            if event is None:
                return
            expected = thread.view.version
            newest = newest_after(thread.view, [event])
            with _deleted_is_conflict(thread.stream.id, expected):
                if expected == 0:
                    if not create_with_head(thread.stream, event, newest):
                        raise ConflictError(thread.stream.id, expected=0, actual=None)  # another writer made it
                    version = 1
                else:
                    version = append_with_head(thread.stream, [event], expected, newest)
            if thread.created_at is None:
                row = self.log.store.get_task(self.log.tenant, thread.stream.id)
                thread.created_at = row.created_at if row is not None else None
            thread.view.apply(Recorded(version, 0.0, event))
            self._snapshot_if_due(thread)

        retry_on_conflict(attempt, stream=stream_id(thread_id), tries=_RETRIES)

    def _thread_rows(self) -> builtins.list[TaskRow]:
        return self.log.store.list_tasks(self.log.tenant, TaskFilter(type=THREAD_TYPE), limit=_ALL)

    def _thread_ids(self) -> builtins.list[str]:
        return [thread_of(r.task_id) for r in self._thread_rows()]

    def _tuple(self, thread_id: str, view: ThreadView, saved: Saved) -> CheckpointTuple:
        serde = self.serde
        checkpoint = decode_json(serde, saved.body)
        checkpoint["id"] = saved.id
        checkpoint["channel_versions"] = dict(saved.versions)
        checkpoint["channel_values"] = view.values(serde, saved)
        writes = view.pending_writes(serde, saved)
        parent = None
        if saved.parent is not None:
            parent = _config(thread_id, saved.ns, saved.parent)
        return CheckpointTuple(
            config=_config(thread_id, saved.ns, saved.id),
            checkpoint=checkpoint,
            metadata=decode_json(serde, saved.metadata),
            parent_config=parent,
            pending_writes=writes,
        )

    # ------------------------------------------------------------------ the saver contract
    @serialized
    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """The checkpoint ``config`` names (its ``checkpoint_id``; the tuple's config is then ``config``
        itself, as LangGraph's savers answer), or the thread's newest in its namespace."""
        conf = config["configurable"]
        thread_id, ns = str(conf["thread_id"]), conf.get("checkpoint_ns", "")
        checkpoint_id = get_checkpoint_id(config)
        view = self._thread(thread_id).view
        saved = view.checkpoints.get((ns, checkpoint_id)) if checkpoint_id else view.latest(ns)
        if saved is None and view.partial:  # older than the snapshot, or of a namespace it did not keep
            view = self._full_view(thread_id)
            saved = view.checkpoints.get((ns, checkpoint_id)) if checkpoint_id else view.latest(ns)
        if saved is None:
            return None
        found = self._tuple(thread_id, view, saved)
        return found._replace(config=config) if checkpoint_id else found

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        """Checkpoints newest first (by checkpoint id): of one thread, or of every thread with ``config=None``.

        ``config`` may narrow to a namespace (``checkpoint_ns``) or one checkpoint (``checkpoint_id``);
        ``filter`` keeps those whose metadata has every given key with the given value; ``before``
        keeps those older than its checkpoint; ``limit`` stops after that many. Across threads, a
        thread is read only when the next checkpoint could be one of its (see ``_langgraph_index``).
        """
        listing = self._listing(config, before)
        left = limit
        # Built on the worker a batch at a time (one hand-over per batch), yielded one at a time.
        while left is None or left > 0:
            want = min(_BATCH, left) if left is not None else _BATCH
            batch = self._listed(listing, want, filter)
            yield from batch
            if len(batch) < want:
                return
            if left is not None:
                left -= len(batch)

    @serialized
    def _listing(self, config: RunnableConfig | None, before: RunnableConfig | None) -> Listing:
        """The checkpoints ``config`` and ``before`` select, to be taken newest first; across threads,
        the threads ordered by what their index rows say (one read of the rows, no events)."""
        conf = config["configurable"] if config else {}
        threads: builtins.list[tuple[str, bool, str | None]]
        if config:
            threads = [(str(conf["thread_id"]), False, None)]
        else:
            threads = [(thread_of(row.task_id), *newest_in(row)) for row in self._thread_rows()]
        return Listing(
            threads,
            ns=conf.get("checkpoint_ns"),
            only=get_checkpoint_id(config) if config else None,
            before=get_checkpoint_id(before) if before else None,
        )

    @serialized
    def _listed(self, listing: Listing, n: int, filter: dict[str, Any] | None) -> builtins.list[CheckpointTuple]:
        """The next ``n`` tuples of ``listing`` whose metadata matches ``filter``."""

        def keep(saved: Saved) -> bool:
            if not filter:
                return True
            metadata = decode_json(self.serde, saved.metadata)
            return all(metadata.get(k) == v for k, v in filter.items())

        with no_cycle_collection():
            found = listing.take(n, self._full_view, keep)
            return [self._tuple(thread_id, view, saved) for thread_id, view, saved in found]

    @serialized
    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Store a checkpoint: one event with the values of the channels in ``new_versions`` only."""
        conf = config["configurable"]
        thread_id, ns = str(conf["thread_id"]), conf.get("checkpoint_ns", "")
        parent_id: str | None = conf.get("checkpoint_id")
        self._append(
            thread_id,
            lambda view: self._checkpoint_event(view, ns, parent_id, checkpoint, config, metadata, new_versions),
        )
        return _config(thread_id, ns, checkpoint["id"])

    def _checkpoint_event(
        self,
        view: ThreadView,
        ns: str,
        parent_id: str | None,
        checkpoint: Checkpoint,
        config: RunnableConfig,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> CheckpointSaved:
        values = checkpoint["channel_values"]
        parent = view.find(ns, parent_id) if parent_id is not None else None
        if parent_id is not None and parent is None and view.partial:
            raise NeedsHistory(f"checkpoint {checkpoint['id']} follows {parent_id}, older than the snapshot")
        view.context = parent
        stored: dict[str, list[Any]] = {}
        # In the order the fold reads them (the checkpoint's versions), so that an item two channels
        # hold is stored by the first it reads and referred to by the second.
        order = {channel: i for i, channel in enumerate(checkpoint["channel_versions"])}
        for channel in sorted(new_versions, key=lambda c: order.get(c, len(order))):
            if channel not in values:
                stored[channel] = ["e"]
            else:
                base = parent.sources.get(channel) if parent is not None else None
                stored[channel] = view.encode(self.serde, channel, values[channel], base)
        rest = {k: v for k, v in checkpoint.items() if k not in ("id", "channel_values", "channel_versions")}
        return CheckpointSaved(
            ns=ns,
            id=checkpoint["id"],
            parent=parent_id,
            versions=dict(checkpoint["channel_versions"]),
            checkpoint=encode_json(self.serde, rest),
            metadata=encode_json(self.serde, dict(get_checkpoint_metadata(config, metadata))),
            values=stored,
        )

    @serialized
    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Store a task's writes against a checkpoint; writes already stored for (task, index) are kept."""
        conf = config["configurable"]
        thread_id, ns, checkpoint_id = str(conf["thread_id"]), conf.get("checkpoint_ns", ""), conf["checkpoint_id"]

        def event(view: ThreadView) -> WritesSaved | None:
            if not view.holds_writes_of(ns, checkpoint_id):
                raise NeedsHistory(f"writes to checkpoint {checkpoint_id}, older than the snapshot")
            known = view.writes.get((ns, checkpoint_id), {})
            # What the task read: its checkpoint (or, its writes stored before it, the one before).
            view.context = view.checkpoints.get((ns, checkpoint_id)) or view.latest(ns)
            items = []
            for i, (channel, value) in enumerate(writes):
                idx = WRITES_IDX_MAP.get(channel, i)
                if idx >= 0 and (task_id, idx) in known:
                    continue  # a retried put_writes: this one is stored already
                items.append([idx, channel, view.encode(self.serde, channel, value, None)])
            if not items:
                return None
            return WritesSaved(ns=ns, checkpoint_id=checkpoint_id, task_id=task_id, task_path=task_path, writes=items)

        self._append(thread_id, event)

    @serialized
    def delete_thread(self, thread_id: str) -> None:
        """Delete the thread: its stream, every namespace's checkpoints and writes."""
        stream = stream_id(str(thread_id))
        if self.log.store.get_task(self.log.tenant, stream) is not None:
            self.log.store.delete_task(self.log.tenant, stream)
        self._threads.pop(str(thread_id), None)

    @serialized
    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Delete the checkpoints (and their writes) whose metadata names one of ``run_ids``, in every thread."""
        runs = set(run_ids)
        if not runs:
            return
        for thread_id in self._thread_ids():
            view = self._full_view(thread_id)
            doomed = [s for s in view.checkpoints.values() if decode_json(self.serde, s.metadata).get("run_id") in runs]
            self._delete(thread_id, doomed, "delete_for_runs")

    @serialized
    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copy every checkpoint and write of one thread to another, as they were."""
        source = self._thread(str(source_thread_id))
        records = source.stream.read() if source.view.version else []
        events = [r.event for r in records]
        # A pruned source starts over at its ThreadCompacted: copy what follows (it stands alone), not
        # the marker, which would make the target's readers drop the target's own checkpoints too.
        compacted = [i for i, event in enumerate(events) if isinstance(event, ThreadCompacted)]
        if compacted:
            events = events[compacted[-1] + 1 :]
        if not events:
            return
        # Two writes when the target is new: a create with the first event, then the rest at once.
        target = self._thread(str(target_thread_id))
        first = events[0]
        if target.view.version == 0 and create_with_head(target.stream, first, newest_after(target.view, [first])):
            target = self._thread(str(target_thread_id))
            events = events[1:]
        if events:
            self._append_many(str(target_thread_id), events)

    def _append_many(self, thread_id: str, events: Sequence[Event]) -> None:
        def attempt() -> None:
            thread = self._thread(thread_id)
            with _deleted_is_conflict(thread.stream.id, thread.view.version):
                append_with_head(thread.stream, events, thread.view.version, newest_after(thread.view, events))
            self._thread(thread_id)

        retry_on_conflict(attempt, stream=stream_id(thread_id), tries=_RETRIES)

    @serialized
    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """``keep_latest``: keep only each namespace's newest checkpoint; ``delete``: delete the threads."""
        if strategy not in ("keep_latest", "delete"):
            raise InvalidInputError(f"prune strategy must be 'keep_latest' or 'delete', got {strategy!r}")
        for thread_id in thread_ids:
            if strategy == "delete":
                self.delete_thread(thread_id)
                continue
            self._compact(str(thread_id))

    def _compact(self, thread_id: str) -> None:
        """Keep each namespace's newest checkpoint and free the rest's bytes: the thread's history is
        replaced by its kept checkpoints restated whole (one transaction), read again by a writer
        that got in first."""

        def attempt() -> None:
            view = self._full_view(thread_id)
            thread = self._thread(thread_id, refresh=False)
            keep = {ns: max(ids) for ns, ids in view.ids.items() if ids}
            kept = [s for s in view.checkpoints.values() if keep.get(s.ns) == s.id]
            if view.version == 0 or (len(kept) == len(view.checkpoints) and not view.gone):
                return  # nothing to free
            part = thread.stream.part(restated(self.serde, view, kept, reason="prune"), view.version)
            with _deleted_is_conflict(thread.stream.id, view.version):
                self.log.store.compact(self.log.tenant, thread.stream.id, view.version, part.events)
            thread.snapped = 0  # the store dropped the thread's snapshots with its history
            self._thread(thread_id)  # read back what was written: the view starts over at ThreadCompacted

        retry_on_conflict(attempt, stream=stream_id(thread_id), tries=_RETRIES)

    def _delete(self, thread_id: str, doomed: Sequence[Saved], reason: str) -> None:
        if not doomed:
            return
        view = self._thread(thread_id, refresh=False).view
        if len(doomed) == len(view.checkpoints):
            self.delete_thread(thread_id)  # nothing left: the stream goes as a whole
            return
        gone = [[s.ns, s.id] for s in doomed]
        self._append(thread_id, lambda view: CheckpointsDeleted(checkpoints=gone, reason=reason))

    @serialized
    def get_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        """Each channel's writes along the parent chain of ``config``'s checkpoint, oldest first, back to
        the nearest ancestor that stores a value for it (its ``seed``). Read from memory, not per tuple."""
        if not channels:
            return {}
        conf = config["configurable"]
        thread_id, ns = str(conf["thread_id"]), conf.get("checkpoint_ns", "")
        checkpoint_id = get_checkpoint_id(config)
        collected: dict[str, list[PendingWrite]] = {c: [] for c in channels}
        seeds: dict[str, Any] = {}
        view = self._full_view(thread_id)
        target = view.checkpoints.get((ns, checkpoint_id)) if checkpoint_id else view.latest(ns)
        remaining = set(channels)
        cursor = view.checkpoints.get((ns, target.parent)) if target and target.parent else None
        while cursor is not None and remaining:
            for w in reversed(view.ordered_writes(ns, cursor.id)):
                if w.channel in remaining:
                    collected[w.channel].append((w.task_id, w.channel, view.value(self.serde, w.blob)))
            for channel in list(remaining):
                blob = cursor.sources.get(channel)
                if blob is not None and blob.kind != "e":
                    seeds[channel] = view.value(self.serde, blob)
                    remaining.discard(channel)
            cursor = view.checkpoints.get((ns, cursor.parent)) if cursor.parent else None
        result: dict[str, DeltaChannelHistory] = {}
        for channel in channels:
            entry: DeltaChannelHistory = {"writes": list(reversed(collected[channel]))}
            if channel in seeds:
                entry["seed"] = seeds[channel]
            result[channel] = entry
        return result

    # ------------------------------------------------------------------ inspection
    @serialized
    def threads(self, *, limit: int = 100) -> builtins.list[dict[str, Any]]:
        """The tenant's threads, most recently written first: how many checkpoints and events each holds,
        its namespaces, and its newest checkpoint of the graph's own namespace (and that one's step)."""
        return list_threads(self.log, self.serde, self._full_view, limit=limit)

    # ------------------------------------------------------------------ async twins
    # The same work, on the same worker thread; the event loop awaits it and never blocks on the store.
    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return await asyncio.wrap_future(self._worker.submit(raw(TetherSaver.get_tuple), config))

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        listing = await asyncio.wrap_future(self._worker.submit(raw(TetherSaver._listing), config, before))
        left = limit
        while left is None or left > 0:
            want = min(_BATCH, left) if left is not None else _BATCH
            batch = await asyncio.wrap_future(self._worker.submit(raw(TetherSaver._listed), listing, want, filter))
            for tup in batch:
                yield tup
            if len(batch) < want:
                return
            if left is not None:
                left -= len(batch)

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        put = self._worker.submit(raw(TetherSaver.put), config, checkpoint, metadata, new_versions)
        return await asyncio.wrap_future(put)

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        await asyncio.wrap_future(self._worker.submit(raw(TetherSaver.put_writes), config, writes, task_id, task_path))

    async def adelete_thread(self, thread_id: str) -> None:
        await asyncio.wrap_future(self._worker.submit(raw(TetherSaver.delete_thread), thread_id))

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        await asyncio.wrap_future(self._worker.submit(raw(TetherSaver.delete_for_runs), run_ids))

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        copy = self._worker.submit(raw(TetherSaver.copy_thread), source_thread_id, target_thread_id)
        await asyncio.wrap_future(copy)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        await asyncio.wrap_future(self._worker.submit(raw(TetherSaver.prune), thread_ids, strategy=strategy))

    async def aget_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        walk = self._worker.submit(raw(TetherSaver.get_delta_channel_history), config=config, channels=channels)
        return await asyncio.wrap_future(walk)


def _config(thread_id: str, ns: str, checkpoint_id: str) -> RunnableConfig:
    return {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": checkpoint_id}}


@contextmanager
def _deleted_is_conflict(stream: str, expected: int) -> Iterator[None]:
    """A thread another writer deleted meanwhile is, to a write, a conflict like an append that got in
    first: the write is tried again on the thread read again (:func:`retry_on_conflict`)."""
    try:
        yield
    except TaskNotFoundError:
        raise ConflictError(stream, expected=expected, actual=None) from None


if __name__ == "__main__":  # python -m tether.integrations.langgraph: the thread views
    import tether.integrations._langgraph_cli as thread_cli

    thread_cli.main()
