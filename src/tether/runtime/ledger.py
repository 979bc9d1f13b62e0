"""The idempotency ledger: run an effect once per key, across retries, processes and crashes."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Literal

import orjson

from tether.errors import InvalidInputError, NotSerializableError, OutcomeUnknownError
from tether.runtime._flow import Flow, Invoke, drive, drive_async
from tether.store import LedgerRow, Store

__all__ = ["Ledger", "OnUnknown"]

OnUnknown = Literal["retry", "raise"] | Callable[[str], Any]
"""What to do about an effect that started and never recorded a result (the process died in it).

* ``"retry"``: run it again with the same key (at-least-once; the key lets the
  other system deduplicate).
* ``"raise"``: raise :class:`~tether.OutcomeUnknownError` for a person to resolve
  (at-most-once, for payments).
* a callable ``reconcile(key)``: ask the other system what happened; its return
  value is recorded as the result, or ``None`` means "it did not happen, run it".
"""


def check_on_unknown(value: Any) -> None:
    if value not in ("retry", "raise") and not callable(value):
        raise InvalidInputError(f"on_unknown must be 'retry', 'raise' or a callable reconcile(key), got {value!r}")


class Ledger:
    """Records the result of an effect under a unique key.

    Example:
        >>> import tether
        >>> app = tether.App("memory://")
        >>> sent = []
        >>> def send():
        ...     sent.append("mail")
        ...     return {"message_id": 1}
        >>> app.ledger.once("invite:42", send)
        {'message_id': 1}
        >>> app.ledger.once("invite:42", send)  # recorded: not sent again
        {'message_id': 1}
        >>> sent
        ['mail']
    """

    def __init__(self, store: Store, tenant: str) -> None:
        self._store = store
        self._tenant = tenant

    def once(self, key: str, fn: Callable[[], Any], *, on_unknown: OnUnknown = "retry") -> Any:
        """Run ``fn()`` unless ``key`` already has a result; return the recorded result."""
        return drive(self._flow(key, fn, on_unknown))

    async def once_async(self, key: str, fn: Callable[[], Any], *, on_unknown: OnUnknown = "retry") -> Any:
        """The async twin of :meth:`once`: ``fn`` may be a coroutine function."""
        return await drive_async(self._flow(key, fn, on_unknown))

    def _flow(self, key: str, fn: Callable[[], Any], on_unknown: OnUnknown) -> Flow[Any]:
        check_on_unknown(on_unknown)
        if not isinstance(key, str) or not key:
            raise InvalidInputError(f"a ledger key must be a non-empty string, got {key!r}")
        row = self._store.ledger_begin(self._tenant, key, time.time())
        if row.status == "done":
            return _decode(row)
        if row.status == "started":
            if on_unknown == "raise":
                raise OutcomeUnknownError(key)
            if callable(on_unknown):
                reconcile = yield Invoke(on_unknown, (key,))
                assert reconcile is not None
                if not reconcile.ok:
                    raise reconcile.value
                if reconcile.value is not None:
                    return self.resolve(key, reconcile.value)
        outcome = yield Invoke(fn)
        assert outcome is not None
        if not outcome.ok:
            # The effect raised: nothing was done, so the key may run again.
            self._store.ledger_forget(self._tenant, key)
            raise outcome.value
        return self.resolve(key, outcome.value)

    def resolve(self, key: str, result: Any) -> Any:
        """Record ``result`` for ``key`` (a person settling an unknown outcome); return what stands."""
        try:
            encoded = orjson.dumps(result).decode()
        except TypeError as exc:
            raise NotSerializableError(
                f"the result for ledger key {key!r} is a {type(result).__name__}, which cannot be stored "
                f"as JSON ({exc})"
            ) from None
        return _decode(self._store.ledger_finish(self._tenant, key, encoded, time.time()))

    def get(self, key: str) -> LedgerRow | None:
        return self._store.ledger_get(self._tenant, key)

    def forget(self, key: str) -> None:
        """Drop a key, so the next ``once`` runs the effect again."""
        self._store.ledger_forget(self._tenant, key)


def _decode(row: LedgerRow) -> Any:
    return None if row.result is None else orjson.loads(row.result)
