"""Idempotency keys: ``{task_id}:{n}:{tool}:{args_hash}``.

``args_hash`` is a hash of the arguments' canonical JSON: keys sorted, and a
float that is a whole number written as that integer (``1.0`` and ``1`` are the
same argument), so neither dict order nor float formatting changes a key.
"""

from __future__ import annotations

import hashlib
from typing import Any

import orjson
from pydantic import BaseModel

from tether.errors import NotSerializableError

__all__ = ["args_hash", "as_json", "call_key", "canonical_json", "json_default"]

_SCALARS = frozenset({str, int, bool, type(None)})


def json_default(value: Any) -> Any:
    """What orjson cannot encode by itself but tether stores: pydantic models, as their JSON form."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    raise TypeError(f"Type is not JSON serializable: {type(value).__name__}")


def as_json(value: Any) -> Any:
    """``value`` as it reads back from JSON (tuples become lists, models become dicts)."""
    if type(value) in _SCALARS:
        return value
    try:
        return orjson.loads(orjson.dumps(value, default=json_default))
    except TypeError as exc:
        raise NotSerializableError(str(exc)) from None


def _normalise(value: Any) -> Any:
    if type(value) is float:
        if value.is_integer() and abs(value) < 2**53:
            return int(value)
        return value
    if isinstance(value, dict):
        return {k: _normalise(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_normalise(v) for v in value]
    return value


def canonical_json(value: Any) -> bytes:
    """Canonical JSON bytes of a JSON-compatible value."""
    return orjson.dumps(_normalise(value), option=orjson.OPT_SORT_KEYS)


def args_hash(args: dict[str, Any]) -> str:
    if not args:
        return "0"
    return hashlib.blake2b(canonical_json(args), digest_size=8).hexdigest()


def call_key(task_id: str, n: int, tool: str, args: dict[str, Any]) -> str:
    return f"{task_id}:{n}:{tool}:{args_hash(args)}"
