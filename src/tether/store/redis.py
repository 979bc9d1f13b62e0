"""``redis://`` (and ``rediss://``) — for teams whose shared state already lives in Redis.

redis-py, one connection pool per store. Every write is one server-side Lua script (``EVALSHA`` of
a script loaded once, reloaded on ``NOSCRIPT``; see ``_redis_lua.py``): an append checks the task's
fencing token and version, appends the events, moves the index row and the claim index, and
publishes the wake-up, in one atomic step. Claims take the oldest due task from a sorted set by due
time together with its lease; idle workers wait on pub/sub, on a channel of their own that only the
commits that may make a task claimable are published on. On open the store reads the server's
``appendonly``/``appendfsync`` and refuses ``durability="full"`` on a server that does not fsync
every write, unless told to accept it (``accept_durability``; docs/redis.md has the table).

The key layout is in ``_redis_keys.py``, the connection policy in ``_redis_io.py``.
"""

from __future__ import annotations

import threading
import uuid
import weakref
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from functools import partial
from typing import Any, TypeVar
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import orjson

try:
    import redis
except ImportError as exc:  # pragma: no cover - exercised by installs without the extra
    raise ImportError("the Redis backend needs redis-py 5 or newer: pip install 'tether[redis]'") from exc

from tether.checks import check_positive
from tether.errors import ConfigurationError, ConflictError, LeaseLostError, StoreUnavailableError, TaskNotFoundError
from tether.store import _redis_lua as lua
from tether.store._redis_io import Listener, check_durability, connect, read_persistence, unavailable
from tether.store._redis_keys import (
    check_prefix,
    escape,
    number,
    pack_event,
    pack_row,
    pack_snapshot,
    unpack_event,
    unpack_ledger,
    unpack_row,
    unpack_snapshot,
)
from tether.store.base import (
    COMPLETES,
    FINISHED,
    WORKERS_KEPT,
    EventRow,
    IndexUpdate,
    LedgerRow,
    Position,
    SnapshotRow,
    StreamAppend,
    TaskFilter,
    TaskRow,
    WorkerRow,
    check_batch,
    check_streams,
    read_across_forks,
    redact_url,
)
from tether.store.memory import _matches

__all__ = ["OPTIONS", "RedisStore"]

T = TypeVar("T")
OPTIONS = frozenset({"prefix", "durability", "accept_durability", "readonly", "ttl"})
"""tether's own options on a Redis URL's query string (the rest go to redis-py)."""
_PAGE = 256  # index rows read per round trip while listing
_PRUNED = 256  # expired streams one PRUNE script drops at most (the script's own bound)


def split_url(url: str) -> tuple[str, dict[str, str]]:
    """The URL redis-py opens, and tether's options taken out of its query string."""
    parts = urlsplit(url)
    pairs = parse_qsl(parts.query, keep_blank_values=True)
    ours = {k: v for k, v in pairs if k in OPTIONS}
    theirs = [(k, v) for k, v in pairs if k not in OPTIONS]
    return urlunsplit(parts._replace(query=urlencode(theirs))), ours


class RedisStore:
    """The Redis backend.

    Args:
        url: ``redis://[:password@]host:6379/0`` or ``rediss://…`` for TLS; redis-py's own options
            may ride on the query string beside tether's.
        prefix: what every key of this store starts with (default ``tether``): several stores, or
            several tenants' deployments, can share one database under different prefixes.
        durability: ``"normal"`` (default) or ``"full"``: ``"full"`` refuses a server that does not
            fsync every write before it replies (``appendfsync always``).
        accept_durability: the server persistence accepted for ``"full"`` anyway (``everysec``,
            ``no``, ``off`` or ``unknown``, as docs/redis.md describes them).
        readonly: refuse every write (what ``tether`` inspection commands open).
        ttl: seconds after which a task that finishes (completed, failed or cancelled) goes away
            whole; never while a fork of it is unfinished. Sessions are kept. ``None`` (default):
            nothing expires. docs/redis.md says exactly what expires and when.

    Example:
        >>> store = RedisStore("redis://127.0.0.1:6379/0?prefix=doc")  # doctest: +SKIP
        >>> store.persistence  # doctest: +SKIP
        'always'
    """

    def __init__(
        self,
        url: str,
        *,
        prefix: str | None = None,
        durability: str | None = None,
        accept_durability: str | None = None,
        readonly: bool | str = False,
        ttl: float | str | None = None,
    ) -> None:
        server, ours = split_url(url)
        self.url = redact_url(url)
        self.prefix = check_prefix(prefix or ours.get("prefix", "tether"))
        self.durability = durability or ours.get("durability", "normal")
        accept = accept_durability or ours.get("accept_durability")
        flag = readonly if readonly is not False else ours.get("readonly", False)
        self.readonly = flag.lower() in ("1", "true", "yes") if isinstance(flag, str) else bool(flag)
        self.ttl = _seconds("ttl", ttl if ttl is not None else ours.get("ttl"))
        self._ttl_ms = 0 if self.ttl is None else max(1, round(self.ttl * 1000))
        # Typed Any: redis-py types every reply as bytes | str, and this client (decode_responses=False)
        # returns bytes only.
        self._client: Any = connect(server)
        with unavailable(self.url):
            self.persistence = read_persistence(self._client)
        if not self.readonly:
            check_durability(self.durability, self.persistence, accept, self.url)
        self._scripts = {name: self._client.register_script(getattr(lua, name)) for name in lua.__all__}
        self._listener = Listener(self._client, self.prefix)
        weakref.finalize(self, _shut, self._listener, self._client)

    # -- keys and scripts ---------------------------------------------------------
    def _tenant_key(self, tenant: str, name: str) -> str:
        return f"{self.prefix}:{{{escape(tenant)}}}:{name}"

    def _task_key(self, tenant: str, task_id: str, part: str) -> str:
        return f"{self.prefix}:{{{escape(tenant)}:{escape(task_id)}}}:{part}"

    def _writable(self) -> None:
        if self.readonly:
            raise ConfigurationError(f"{self.url} was opened read-only; open it without readonly to write")

    def _run(self, name: str, tenant: str, *args: Any) -> Any:
        self._writable()
        with unavailable(self.url):
            return self._scripts[name](args=[self.prefix, escape(tenant), *args])

    def _do(self, fn: Callable[[], T]) -> T:
        with unavailable(self.url):
            return fn()

    # -- streams ----------------------------------------------------------------
    def create_task(self, tenant: str, row: TaskRow, first: EventRow) -> None:
        pairs = pack_row(row, version=first.seq, updated_at=first.at, base=first.seq - 1)
        event = pack_event(first, first.fence)
        parent = row.parent_id or ""
        answer = self._run("CREATE", tenant, row.task_id, parent, number(row.created_at), event, *pairs)
        if answer == b"exists":
            raise ConflictError(row.task_id, expected=0, actual=None)
        if answer == b"noparent":
            raise TaskNotFoundError(parent, tenant=tenant)

    def append(
        self,
        tenant: str,
        task_id: str,
        events: Sequence[EventRow],
        expected_version: int,
        *,
        fence: int | None = None,
        index: IndexUpdate | None = None,
    ) -> None:
        check_batch(task_id, events, expected_version)
        self._append(tenant, [StreamAppend(task_id, events, expected_version, fence, index)])

    def append_streams(self, tenant: str, appends: Sequence[StreamAppend]) -> None:
        check_streams(appends)
        self._append(tenant, appends)

    def _append(self, tenant: str, appends: Sequence[StreamAppend]) -> None:
        args: list[Any] = [len(appends), uuid.uuid4().hex, self._ttl_ms]
        for part in appends:
            args += _append_header(part)
            args += [pack_event(e, part.fence) for e in part.events]
        answer = self._run("APPEND", tenant, *args)
        if answer[0] == b"ok":
            return
        part = appends[int(answer[1]) - 1]
        if answer[0] == b"missing":
            raise TaskNotFoundError(part.task_id, tenant=tenant)
        if answer[0] == b"fence":
            assert part.fence is not None
            raise LeaseLostError(part.task_id, token=part.fence, current=int(answer[2]))
        raise ConflictError(part.task_id, expected=part.expected_version, actual=int(answer[2]))

    def compact(self, tenant: str, task_id: str, expected_version: int, events: Sequence[EventRow]) -> int:
        check_batch(task_id, events, expected_version)
        completes = sum(1 for e in events if e.type == COMPLETES)
        packed = [pack_event(e, e.fence) for e in events]
        answer = self._run(
            "COMPACT", tenant, task_id, expected_version, completes, events[-1].seq, number(events[-1].at), *packed
        )
        self._refused(tenant, task_id, expected_version, answer)
        return int(answer[1])

    @staticmethod
    def _refused(tenant: str, task_id: str, expected: int, answer: Sequence[Any]) -> None:
        """Raise the error a script's refusal names (``missing``, ``version``, ``forked``), if any."""
        code = answer[0]
        if code == b"missing":
            raise TaskNotFoundError(task_id, tenant=tenant)
        if code == b"version":
            raise ConflictError(task_id, expected=expected, actual=int(answer[1]))
        if code == b"forked":
            raise ConflictError(task_id, expected=0, actual=None)

    def rewind(
        self,
        tenant: str,
        task_id: str,
        expected_version: int,
        *,
        archive_id: str,
        archived: EventRow,
        fork: TaskRow,
        forked: EventRow,
    ) -> None:
        row = replace(fork, parent_id=archive_id)
        answer = self._run(
            "REWIND",
            tenant,
            task_id,
            expected_version,
            archive_id,
            pack_event(archived, archived.fence),
            archived.seq,
            number(archived.at),
            int(archived.type == COMPLETES),
            ",".join(sorted(FINISHED)),
            number(fork.created_at),
            pack_event(forked, forked.fence),
            self._ttl_ms,
            *pack_row(row, version=forked.seq, updated_at=forked.at, base=forked.seq - 1),
        )
        if answer[0] == b"archive_exists":
            raise ConflictError(archive_id, expected=0, actual=None)
        self._refused(tenant, task_id, expected_version, answer)

    def read_events(self, tenant: str, task_id: str, *, after: int = 0, upto: int | None = None) -> list[EventRow]:
        return self._do(lambda: self._read(tenant, task_id, after, upto))

    def _read(self, tenant: str, task_id: str, after: int, upto: int | None) -> list[EventRow]:
        for _ in range(_READ_TRIES):
            try:
                return self._read_once(tenant, task_id, after, upto)
            except _MovedError:
                continue  # a stream compacted, rewound or made again meanwhile: read it again, whole
        raise StoreUnavailableError(
            f"Redis: the events of task {task_id!r} were replaced {_READ_TRIES} times while they were read"
        )

    def _read_once(self, tenant: str, task_id: str, after: int, upto: int | None) -> list[EventRow]:
        bases: dict[str, int] = {}

        def parent_of(stream: str) -> tuple[str, int] | None:
            row = self._task_key(tenant, stream, "r")
            base, parent, at = self._client.hmget(row, "base", "parent_id", "parent_seq")
            if base is None:
                raise TaskNotFoundError(stream, tenant=tenant)
            bases[stream] = int(base)
            return None if parent is None or at is None else (parent.decode(), int(at))

        def segment(stream: str, low: int, last: int | None) -> list[EventRow]:
            base = bases[stream] if stream in bases else (parent_of(stream), bases[stream])[1]
            start = max(low - base, 0)
            stop = -1 if last is None else last - base - 1  # LRANGE's -1 is the end: only for "no upper bound"
            if last is not None and stop < start:
                return []
            # The slice with the row's base, in one transaction: an element's seq is its place after
            # the base, and a compaction, a rewind or a delete and re-create between two round trips
            # would give the new list's elements the old base's seqs.
            pipe = self._client.pipeline(transaction=True)
            pipe.hget(self._task_key(tenant, stream, "r"), "base")
            pipe.lrange(self._task_key(tenant, stream, "e"), start, stop)
            now, got = pipe.execute()
            if now is None:  # expired (or deleted) since its row was read: gone whole, never half
                raise TaskNotFoundError(stream, tenant=tenant)
            if int(now) != base:
                raise _MovedError
            return [unpack_event(v, base + 1 + start + i) for i, v in enumerate(got)]

        return read_across_forks(task_id, after, upto, parent_of, segment)

    def get_task(self, tenant: str, task_id: str) -> TaskRow | None:
        raw = self._do(lambda: self._client.hgetall(self._task_key(tenant, task_id, "r")))
        return unpack_row(tenant, task_id, raw)

    def delete_task(self, tenant: str, task_id: str) -> int:
        answer = self._run("DELETE", tenant, task_id)
        self._refused(tenant, task_id, 0, answer)
        return int(answer[1])

    def _rows(self, tenant: str, flt: TaskFilter) -> Iterator[TaskRow]:
        """The tenant's rows matching ``flt``, newest first, read a page at a time (a task created
        meanwhile pushes the rest down a place: one seen already is not given twice)."""
        self._prune(tenant)
        tasks = self._tenant_key(tenant, "tasks")
        start = 0
        seen: set[bytes] = set()
        while True:
            ids: list[bytes] = self._do(partial(self._client.zrevrange, tasks, start, start + _PAGE - 1))
            if not ids:
                return
            pipe = self._client.pipeline(transaction=False)
            for raw_id in ids:
                pipe.hgetall(self._task_key(tenant, raw_id.decode(), "r"))
            for raw_id, raw in zip(ids, self._do(pipe.execute), strict=True):
                row = unpack_row(tenant, raw_id.decode(), raw)
                if row is not None and raw_id not in seen and _matches(row, flt):
                    yield row
                seen.add(raw_id)
            start += _PAGE

    def _prune(self, tenant: str) -> None:
        """Drop the index entries of the tenant's expired streams. A reader never returns one either
        way (its row is gone with the rest of it); pruning keeps the indexes from growing with them."""
        if self.readonly:
            return
        while self._run("PRUNE", tenant) == _PRUNED:
            pass

    def list_tasks(self, tenant: str, flt: TaskFilter, *, limit: int = 100, offset: int = 0) -> list[TaskRow]:
        rows: list[TaskRow] = []
        for n, row in enumerate(self._rows(tenant, flt)):
            if n >= offset + limit:
                break
            if n >= offset:
                rows.append(row)
        return rows

    def count_tasks(self, tenant: str, flt: TaskFilter, *, cap: int) -> int:
        count = 0
        for _ in self._rows(tenant, flt):
            count += 1
            if count >= cap:
                break
        return min(count, cap)

    def stream_positions(self, tenant: str, type: str, prefix: str, *, user_id: str | None = None) -> list[Position]:
        flt = TaskFilter(type=type, user_id=user_id, id_prefix=prefix or None)
        return [Position(r.task_id, r.created_at, r.version) for r in self._rows(tenant, flt)]

    # -- snapshots --------------------------------------------------------------
    def put_snapshot(self, tenant: str, task_id: str, snapshot: SnapshotRow, *, replaces: int | None = None) -> None:
        gone = "" if replaces is None else replaces
        if not self._run("SNAPSHOT", tenant, task_id, snapshot.seq, pack_snapshot(snapshot), gone):
            raise TaskNotFoundError(task_id, tenant=tenant)

    def get_snapshot(self, tenant: str, task_id: str, *, at_most: int) -> SnapshotRow | None:
        pipe = self._client.pipeline(transaction=False)
        pipe.exists(self._task_key(tenant, task_id, "r"))
        pipe.hkeys(self._task_key(tenant, task_id, "s"))
        exists, seqs = self._do(pipe.execute)
        if not exists:
            raise TaskNotFoundError(task_id, tenant=tenant)
        below = [int(s) for s in seqs if int(s) <= at_most]
        if not below:
            return None
        seq = max(below)
        value = self._do(lambda: self._client.hget(self._task_key(tenant, task_id, "s"), str(seq)))
        return None if value is None else unpack_snapshot(seq, value)

    def read_latest(self, tenant: str, task_id: str) -> tuple[SnapshotRow | None, list[EventRow]]:
        snap = self.get_snapshot(tenant, task_id, at_most=2**62)
        return snap, self.read_events(tenant, task_id, after=snap.seq if snap else 0)

    # -- idempotency ledger -----------------------------------------------------
    def _ledger_key(self, tenant: str, key: str) -> str:
        return self._tenant_key(tenant, f"L:{key}")

    def ledger_get(self, tenant: str, key: str) -> LedgerRow | None:
        fields = ("status", "result", "started_at", "finished_at", "runs")
        reply = self._do(lambda: self._client.hmget(self._ledger_key(tenant, key), *fields))
        return None if reply[0] is None else unpack_ledger(key, reply)

    def ledger_begin(self, tenant: str, key: str, now: float) -> LedgerRow:
        self._writable()
        with unavailable(self.url):
            reply = self._scripts["LEDGER_BEGIN"](keys=[self._ledger_key(tenant, key)], args=[number(now)])
        if reply == [b"new"]:
            return LedgerRow(key, "new", None, now, None, 0)
        return unpack_ledger(key, reply)

    def ledger_finish(self, tenant: str, key: str, result: str | bytes, now: float) -> LedgerRow:
        self._writable()
        with unavailable(self.url):
            reply = self._scripts["LEDGER_FINISH"](keys=[self._ledger_key(tenant, key)], args=[result, number(now)])
        return unpack_ledger(key, reply)

    def ledger_forget(self, tenant: str, key: str) -> None:
        self._writable()
        self._do(lambda: self._client.delete(self._ledger_key(tenant, key)))

    # -- leases -----------------------------------------------------------------
    def acquire_lease(
        self,
        tenant: str,
        task_id: str,
        owner: str,
        ttl: float,
        now: float,
        *,
        steal_from: str | None = None,
        at_version: int | None = None,
    ) -> int | None:
        steal = ("0", "") if steal_from is None else ("1", steal_from)
        version = "" if at_version is None else at_version
        token = int(self._run("LEASE", tenant, task_id, owner, number(now + ttl), number(now), *steal, version))
        if token < 0:
            raise TaskNotFoundError(task_id, tenant=tenant)
        return token or None

    def claim(self, tenant: str, owner: str, ttl: float, now: float) -> tuple[str, int] | None:
        answer = self._run("CLAIM", tenant, owner, number(now + ttl), number(now))
        return None if not answer else (answer[0].decode(), int(answer[1]))

    def lease_holders(self, tenant: str, prefix: str, now: float) -> list[tuple[str, str]]:
        ids = sorted(self._do(lambda: self._client.smembers(self._tenant_key(tenant, "held"))))
        pipe = self._client.pipeline(transaction=False)
        for raw_id in ids:
            pipe.hgetall(self._task_key(tenant, raw_id.decode(), "r"))
        holders: dict[str, str] = {}
        for raw_id, raw in zip(ids, self._do(pipe.execute) if ids else [], strict=True):
            row = unpack_row(tenant, raw_id.decode(), raw)
            owner = None if row is None else row.held_by(now)
            if row is None or owner is None or not owner.startswith(prefix) or row.type.startswith("tether."):
                continue
            at = row.due_at
            if at is not None and at <= now and row.task_id < holders.get(owner, "\U0010ffff"):
                holders[owner] = row.task_id
        return list(holders.items())

    def park(self, tenant: str, task_id: str, version: int, reason: str) -> bool:
        return bool(self._run("PARK", tenant, task_id, version, reason))

    def record_worker(self, tenant: str, worker: WorkerRow) -> None:
        packed = orjson.dumps([worker.worker_id, worker.started_at, worker.seen_at, worker.app, worker.stopped_at])
        oldest = number(worker.seen_at - WORKERS_KEPT)
        self._run("RECORD_WORKER", tenant, worker.worker_id, number(worker.seen_at), packed, oldest)

    def workers(self, tenant: str, *, seen_after: float = 0.0, limit: int = 20) -> list[WorkerRow]:
        seen, records = self._tenant_key(tenant, "wseen"), self._tenant_key(tenant, "workers")
        ids = self._do(
            lambda: self._client.zrevrangebyscore(seen, "+inf", f"({number(seen_after)}", start=0, num=limit)
        )
        packed = self._do(lambda: self._client.hmget(records, ids)) if ids else []
        return [WorkerRow(*orjson.loads(p)) for p in packed if p is not None]

    def renew_lease(self, tenant: str, task_id: str, token: int, ttl: float, now: float) -> bool:
        answer = int(self._run("RENEW", tenant, task_id, token, number(now + ttl)))
        if answer < 0:
            raise TaskNotFoundError(task_id, tenant=tenant)
        return answer == 1

    def release_lease(self, tenant: str, task_id: str, token: int) -> None:
        if int(self._run("RELEASE", tenant, task_id, token)) < 0:
            raise TaskNotFoundError(task_id, tenant=tenant)

    def wait_for_change(
        self, timeout: float, *, interrupt: threading.Event | None = None, claimable: bool = False
    ) -> bool:
        return self._listener.wait(timeout, interrupt, claimable=claimable)

    def close(self) -> None:
        _shut(self._listener, self._client)


_READ_TRIES = 20


class _MovedError(Exception):
    """A stream's events were replaced (its base moved) while a read was reading them."""


def _seconds(name: str, raw: float | str | None) -> float | None:
    """A Redis option in seconds (``ttl``), refused by name unless it is a finite number above zero."""
    if raw is None:
        return None
    try:
        return check_positive(float(raw) if isinstance(raw, str) else raw, name)
    except (ValueError, ConfigurationError):
        raise ConfigurationError(
            f"Redis option {name}={raw!r} is not a number of seconds above 0; expected a finite number such as "
            f"{name}=3600"
        ) from None


def _append_header(part: StreamAppend) -> list[Any]:
    """The 18 values that describe one stream's part of an append to the APPEND script."""
    events, index = part.events, part.index
    completes = sum(1 for e in events if e.type == COMPLETES)
    header: list[Any] = [
        part.task_id,
        part.expected_version,
        "" if part.fence is None else part.fence,
        len(events),
        completes,
        events[-1].seq,
        number(events[-1].at),
    ]
    if index is None:
        return [*header, "0", "0", "0", "", "", "0", 0, "", "0", "", ""]
    head = index.head
    header += ["1", "1" if index.moves else "0", "1" if index.status is not None else "0", index.status or ""]
    header += ["" if index.wake_at is None else number(index.wake_at)]
    if head is None:
        header += ["0", 0, "", "0", ""]
    else:
        output = head.output
        header += ["1", head.calls_done, head.summary, "0" if output is None else "1", output or ""]
    return [*header, index.session_id or ""]


def _shut(listener: Listener, client: redis.Redis) -> None:
    listener.stop()
    client.close()
