"""Idempotency keys: ``{task_id}:{n}:{tool}:{args_hash}``.

``args_hash`` is a hash of the arguments' canonical JSON: keys sorted, and a
float that is a whole number written as that integer (``1.0`` and ``1`` are the
same argument), so neither dict order nor float formatting changes a key.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
from typing import Any

import orjson
from pydantic import BaseModel

from tether.errors import NotSerializableError

__all__ = [
    "MAX_DEPTH",
    "args_hash",
    "as_json",
    "call_key",
    "canonical_json",
    "check_finite",
    "json_default",
    "unserializable_reason",
]

_SCALARS = frozenset({str, int, bool, type(None)})

MAX_DEPTH = 254
"""How deeply lists and objects may nest in a stored value (orjson's own limit)."""


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
        data = orjson.dumps(value, default=json_default)
    except TypeError as exc:
        raise NotSerializableError(unserializable_reason(exc)) from None
    if b"null" in data:
        check_finite(value)
    return orjson.loads(data)


def unserializable_reason(exc: Exception) -> str:
    """What orjson's refusal means, in words (its recursion limit names itself obscurely)."""
    if "Recursion limit" in str(exc):
        return f"the value nests lists or objects more than {MAX_DEPTH} levels deep ({exc})"
    return str(exc)


def check_finite(value: Any, what: str = "value") -> None:
    """Refuse NaN and ±infinity anywhere in ``value``: JSON has no such numbers, and storing them
    as ``null`` (what orjson does) would hand a resumed run something the live run never saw.

    Called only when the encoded JSON holds a ``null`` (where a NaN would have gone), so values
    without one pay nothing. Walks without recursion, to at most :data:`MAX_DEPTH` levels.
    """
    stack: list[tuple[Any, str, int]] = [(value, "", 0)]
    while stack:
        item, path, depth = stack.pop()
        if type(item) is float:
            if item != item or item in (math.inf, -math.inf):
                where = f" at {path}" if path else ""
                raise NotSerializableError(
                    f"{what}{where} is {item!r}: tether stores no NaN or infinity (JSON has none); "
                    "store None or a string instead"
                )
        elif depth < MAX_DEPTH:
            if isinstance(item, dict):
                stack.extend((v, f"{path}.{k}" if path else str(k), depth + 1) for k, v in item.items())
            elif isinstance(item, list | tuple):
                stack.extend((v, f"{path}[{i}]", depth + 1) for i, v in enumerate(item))
            elif dataclasses.is_dataclass(item) and not isinstance(item, type):
                stack.extend(
                    (getattr(item, f.name), f"{path}.{f.name}" if path else f.name, depth + 1)
                    for f in dataclasses.fields(item)
                )
            elif isinstance(item, BaseModel):
                stack.append((item.model_dump(), path, depth + 1))


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
