"""``TetherStore``: LangGraph's long-term memory ``BaseStore`` on a tether database.

A store is one tether user document, ``langgraph-store:{name}`` (``app.user(...)`` reads it too):
each item is one key of it (its namespace and key as a JSON list) holding the value, its times, the
vectors of its indexed fields and its expiry. A batch's puts and deletes are one change of the
document (one event: all of them or none), appended optimistically at the version this process
read, so two processes never lose each other's writes.

Reads are LangGraph's own: each process folds the document's new changes (one indexed read when
nothing changed) into an ``InMemoryStore`` that answers gets, searches (filters, ``limit``/``offset``,
vector ranking by cosine similarity over the stored vectors) and namespace listings, so results are
the ones LangGraph's stores give. The embedding function runs in ``put`` (each text once, its vector
stored) and for a search's query, never on a read of stored items.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

import orjson

try:
    from langchain_core.embeddings import Embeddings
    from langgraph.store.base import (
        BaseStore,
        GetOp,
        IndexConfig,
        Item,
        ListNamespacesOp,
        Op,
        PutOp,
        Result,
        SearchOp,
        TTLConfig,
        ensure_embeddings,
        get_text_at_path,
        tokenize_path,
        validate_op_namespace,
    )
    from langgraph.store.memory import InMemoryStore
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        f"tether.integrations.langgraph needs LangGraph ({exc}); install it with: pip install 'tether[langgraph]'"
    ) from None

from tether.errors import InvalidInputError
from tether.integrations._langgraph_tools import log_of
from tether.log.conflicts import retry_on_conflict
from tether.log.streams import Stream
from tether.userstate import USER_TYPE, UserChanged, UserCreated

__all__ = ["TetherStore"]

Namespace = tuple[str, ...]


class _Namespaces(dict[Namespace, dict[str, Item]]):
    """The view's items by namespace, namespaces sorted: reading a namespace that holds nothing does
    not make it one (``InMemoryStore`` would list it), and every process orders them alike."""

    def __missing__(self, namespace: Namespace) -> dict[str, Item]:
        return {}


class _View(InMemoryStore):
    """LangGraph's ``InMemoryStore`` as one process's fold of a store's document: LangGraph answers
    the reads; the items change only through :meth:`keep` and :meth:`hide`, as the document does."""

    def __init__(self, index: IndexConfig | None) -> None:
        super().__init__(index=index)
        self._data: dict[Namespace, dict[str, Item]] = _Namespaces()

    def keep(self, item: Item, vectors: dict[str, list[float]] | None) -> None:
        namespace = item.namespace
        if namespace not in self._data:
            self._data[namespace] = {}
            ordered = sorted(self._data.items())
            self._data.clear()
            self._data.update(ordered)
        self._data[namespace][item.key] = item  # an item put again keeps its place, as in the document
        self._vectors[namespace].pop(item.key, None)
        if vectors:
            self._vectors[namespace][item.key] = dict(vectors)

    def hide(self, namespace: Namespace, key: str) -> None:
        items = self._data.get(namespace)
        if items is not None and items.pop(key, None) is not None and not items:
            del self._data[namespace]
        self._vectors.get(namespace, {}).pop(key, None)


class _Known(Embeddings):
    """The vectors of the texts a batch needs, computed by the user's function before it runs."""

    def __init__(self) -> None:
        self.vectors: dict[str, list[float]] = {}

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [self.vectors[t] for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return self.vectors[text]


class TetherStore(BaseStore):
    """LangGraph's ``BaseStore`` (long-term memory) kept in a tether database.

    Args:
        target: a store URL (``tether+`` before its scheme allowed), a :class:`~tether.App`, a
            :class:`~tether.TaskLog` or a ``TetherSaver`` (its database and tenant). ``None``
            opens tether's default database.
        name: which store of the database (each is a document of its own).
        index: LangGraph's ``IndexConfig`` for vector search: ``dims``, ``embed`` (an
            ``Embeddings``, or a function from texts to vectors, sync or async) and ``fields``.
        ttl: LangGraph's ``TTLConfig`` (``default_ttl`` and ``refresh_on_read``; expired items are
            never returned, and :meth:`sweep_ttl` deletes them).

    Example:
        >>> from tether.integrations.langgraph import TetherStore
        >>> store = TetherStore("memory://")
        >>> store.put(("users", "ada"), "prefs", {"seat": "aisle", "meals": 2})
        >>> store.get(("users", "ada"), "prefs").value
        {'seat': 'aisle', 'meals': 2}
        >>> [i.key for i in store.search(("users",), filter={"meals": {"$gte": 2}})]
        ['prefs']
        >>> store.list_namespaces(prefix=("users",))
        [('users', 'ada')]
    """

    supports_ttl: bool = True

    def __init__(
        self,
        target: Any = None,
        *,
        name: str = "default",
        index: IndexConfig | None = None,
        ttl: TTLConfig | None = None,
    ) -> None:
        if not isinstance(name, str) or not name:
            raise InvalidInputError(f"a TetherStore's name must be a non-empty string, got {name!r}")
        if index is not None and not index.get("embed"):
            raise InvalidInputError("index needs 'embed': an Embeddings or a function from texts to vectors")
        self.log, self._opened = log_of(target, "TetherStore")
        self.name = name
        self.ttl_config = ttl
        self.embeddings = ensure_embeddings(index["embed"]) if index is not None else None
        self._known = _Known()
        # LangGraph's own store answers the reads, over this process's fold of the document.
        self._view = _View({**index, "embed": self._known} if index is not None else None)
        self._expiry: dict[tuple[Namespace, str], float] = {}
        self._entries: dict[str, dict[str, Any]] = {}  # the document by item name, expired items included
        document = f"langgraph-store:{name}"
        self._stream = Stream(self.log, f"user:{document}", USER_TYPE)
        self._stream.create(UserCreated(user_id=document), user_id=document)
        self._version = 0
        self._lock = threading.Lock()

    def close(self) -> None:
        """Close the app this store opened from a URL (a log, App or saver given stays open)."""
        if self._opened is not None:
            self._opened.close()

    # ------------------------------------------------------------------ batches
    def batch(self, ops: Iterable[Op]) -> list[Result]:
        ops = _checked(ops)
        texts, queries = self._texts(ops)
        vectors = self.embeddings.embed_documents(texts) if texts and self.embeddings else []
        queried = [self.embeddings.embed_query(q) for q in queries] if self.embeddings else []
        return self._run(ops, dict(zip(texts, vectors, strict=True)) | dict(zip(queries, queried, strict=True)))

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        ops = _checked(ops)
        texts, queries = self._texts(ops)
        vectors = await self.embeddings.aembed_documents(texts) if texts and self.embeddings else []
        queried = [await self.embeddings.aembed_query(q) for q in queries] if self.embeddings else []
        known = dict(zip(texts, vectors, strict=True)) | dict(zip(queries, queried, strict=True))
        return await asyncio.to_thread(self._run, ops, known)

    def _run(self, ops: list[Op], vectors: dict[str, list[float]]) -> list[Result]:
        """Answer the batch's reads from the document as it is (before its writes, as LangGraph's
        stores do), then write its puts and deletes, and the reads' TTL refreshes, as one change."""
        puts = {(op.namespace, op.key): op for op in ops if isinstance(op, PutOp)}
        with self._lock:
            self._refresh()
            now = time.time()
            self._known.vectors = vectors
            reads = [op for op in ops if not isinstance(op, PutOp)]
            answers = iter(self._view.batch(reads) if reads else [])
            results: list[Result] = [None if isinstance(op, PutOp) else next(answers) for op in ops]
            touched = self._touched(ops, results, now)
            if puts or touched:
                self._write(puts, touched, vectors)
        return results

    def _texts(self, ops: Sequence[Op]) -> tuple[list[str], list[str]]:
        """The texts a batch's puts index and the queries its searches rank by (each once)."""
        if self.embeddings is None:
            return [], []
        texts: dict[str, None] = {}
        for op in ops:
            if isinstance(op, PutOp):
                for _, _, text in self._indexed(op):
                    texts[text] = None
        queries = {op.query: None for op in ops if isinstance(op, SearchOp) and op.query}
        return list(texts), list(queries)

    def _indexed(self, op: PutOp) -> list[tuple[str, str, str]]:
        """(path, field path, text) for each text ``op`` indexes, as ``InMemoryStore`` extracts them."""
        if op.value is None or op.index is False or self.embeddings is None:
            return []
        config: dict[str, Any] = dict(self._view.index_config or {})
        paths = config["__tokenized_fields"] if op.index is None else [(p, tokenize_path(p)) for p in op.index]
        found = []
        for path, field in paths:
            texts = get_text_at_path(op.value, field)
            if len(texts) > 1:
                found += [(path, f"{path}.{i}", text) for i, text in enumerate(texts)]
            elif texts:
                found.append((path, path, texts[0]))
        return found

    # ------------------------------------------------------------------ the document
    def _refresh(self) -> None:
        """Fold the document's changes this process has not seen into the view (one indexed read)."""
        for rec in self._stream.read(after=self._version):
            if isinstance(rec.event, UserChanged):
                for name in rec.event.removed:
                    self._forget(*_parse(name))
                for name, entry in rec.event.set.items():
                    self._keep(*_parse(name), entry)
            self._version = rec.seq
        now = time.time()
        for namespace, key in [k for k, at in self._expiry.items() if at <= now]:
            self._view.hide(namespace, key)  # expired: out of every read, in the document until swept

    def _keep(self, namespace: Namespace, key: str, entry: dict[str, Any]) -> None:
        item = Item(
            value=entry["value"],
            key=key,
            namespace=namespace,
            created_at=entry["created_at"],
            updated_at=entry["updated_at"],
        )
        self._view.keep(item, entry.get("vectors"))
        if entry.get("expires_at") is not None:
            self._expiry[(namespace, key)] = entry["expires_at"]
        else:
            self._expiry.pop((namespace, key), None)
        self._entries[_name(namespace, key)] = entry

    def _forget(self, namespace: Namespace, key: str) -> None:
        self._view.hide(namespace, key)
        self._expiry.pop((namespace, key), None)
        self._entries.pop(_name(namespace, key), None)

    def _touched(self, ops: Sequence[Op], results: Sequence[Result], now: float) -> dict[str, float]:
        """The new expiry of each item with a TTL that the batch's reads returned and refresh."""
        touched: dict[str, float] = {}
        for op, result in zip(ops, results, strict=True):
            found: list[Item]
            if isinstance(op, GetOp):
                found = [result] if isinstance(result, Item) and op.refresh_ttl else []
            elif isinstance(op, SearchOp) and op.refresh_ttl and isinstance(result, list):
                found = [r for r in result if isinstance(r, Item)]
            else:
                continue
            for item in found:
                entry = self._entries.get(name := _name(item.namespace, item.key))
                if entry is not None and entry.get("ttl") is not None:
                    touched[name] = now + entry["ttl"] * 60
        return touched

    def _write(
        self, puts: dict[tuple[Namespace, str], PutOp], touched: dict[str, float], vectors: dict[str, Any]
    ) -> None:
        """Append the batch's change of the document; another writer first: read its change, build again."""

        def attempt() -> None:
            change = self._change(puts, touched, vectors, datetime.now(UTC).isoformat())
            if change.set or change.removed:
                self._version = self._stream.append([change], self._version)
                for name in change.removed:
                    self._forget(*_parse(name))
                for name, entry in change.set.items():
                    self._keep(*_parse(name), entry)

        retry_on_conflict(attempt, stream=self._stream.id, on_conflict=lambda _: self._refresh())

    def _change(
        self, puts: dict[tuple[Namespace, str], PutOp], touched: dict[str, float], vectors: dict[str, Any], now: str
    ) -> UserChanged:
        changed: dict[str, Any] = {}
        removed: list[str] = []
        for name, expires_at in touched.items():
            if name in self._entries:
                changed[name] = {**self._entries[name], "expires_at": expires_at}
        for (namespace, key), op in puts.items():
            name = _name(namespace, key)
            old = self._entries.get(name)
            if op.value is None:
                changed.pop(name, None)
                if old is not None:
                    removed.append(name)
                continue
            ttl = op.ttl
            changed[name] = {
                "value": dict(op.value),
                "created_at": old["created_at"] if old is not None and not _expired(old) else now,
                "updated_at": now,
                "vectors": {path: vectors[text] for _, path, text in self._indexed(op)} or None,
                "ttl": ttl,
                "expires_at": time.time() + ttl * 60 if ttl is not None else None,
            }
        return UserChanged(set=changed, removed=removed)

    # ------------------------------------------------------------------ TTL
    def sweep_ttl(self) -> int:
        """Delete the expired items from the document; returns how many."""
        with self._lock:
            self._refresh()
            now = time.time()
            doomed = [n for n, e in self._entries.items() if e.get("expires_at") is not None and e["expires_at"] <= now]

            def attempt() -> None:
                gone = [n for n in doomed if n in self._entries]
                if gone:
                    self._version = self._stream.append([UserChanged(set={}, removed=gone)], self._version)
                    for name in gone:
                        self._forget(*_parse(name))

            retry_on_conflict(attempt, stream=self._stream.id, on_conflict=lambda _: self._refresh())
            return len(doomed)


def _checked(ops: Iterable[Op]) -> list[Op]:
    ops = list(ops)
    for op in ops:
        if not isinstance(op, (GetOp, PutOp, SearchOp, ListNamespacesOp)):
            raise InvalidInputError(f"a store batch takes GetOp, PutOp, SearchOp and ListNamespacesOp, not {op!r:.80}")
        validate_op_namespace(op)
        if isinstance(op, PutOp) and op.value is not None:
            try:
                orjson.dumps(dict(op.value))
            except TypeError as exc:
                raise InvalidInputError(f"item {op.namespace}/{op.key}: the value must be JSON ({exc})") from None
    return ops


def _name(namespace: Namespace, key: str) -> str:
    return orjson.dumps([*namespace, key]).decode()


def _parse(name: str) -> tuple[Namespace, str]:
    *namespace, key = orjson.loads(name)
    return tuple(namespace), key


def _expired(entry: dict[str, Any]) -> bool:
    return entry.get("expires_at") is not None and entry["expires_at"] <= time.time()
