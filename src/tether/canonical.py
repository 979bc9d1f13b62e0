"""Idempotency keys: ``{task_id}:{n}:{tool}:{args_hash}``.

``args_hash`` is a hash of the arguments' canonical JSON: keys sorted, and a
float that is a whole number written as that integer (``1.0`` and ``1`` are the
same argument), so neither dict order nor float formatting changes a key.
"""

from __future__ import annotations

import functools
import hashlib
import math
import operator
from collections.abc import Callable
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
    if data.find(b"null") >= 0:  # where orjson puts a NaN (``in`` would raise and clear a TypeError first)
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

    Called only when the encoded JSON holds a ``null`` (where a NaN would have gone), and only on
    values orjson encoded (so no cycles, at most :data:`MAX_DEPTH` deep). A quick pass without
    paths first; the path is worked out only for the error.
    """
    if _has_non_finite(value):
        path, number = _find_non_finite(value, "")
        where = f" at {path}" if path else ""
        raise NotSerializableError(
            f"{what}{where} is {number!r}: tether stores no NaN or infinity (JSON has none); "
            "store None or a string instead"
        )


def _children(item: Any) -> list[tuple[str, Any]] | None:
    """The named parts of a container (dict, list, tuple, dataclass, pydantic model), else ``None``."""
    if isinstance(item, dict):
        return [(str(k), v) for k, v in item.items()]
    if isinstance(item, list | tuple):
        return [(f"[{i}]", v) for i, v in enumerate(item)]
    names = getattr(type(item), "__dataclass_fields__", None)
    if names is not None:
        return [(name, getattr(item, name)) for name in names]
    if isinstance(item, BaseModel):
        return list(item.model_dump().items())
    return None


def _has_non_finite(value: Any) -> bool:
    stack = [value]
    pop, extend = stack.pop, stack.extend
    while stack:
        item = pop()
        kind = type(item)
        if kind is float:
            if item != item or item in _INFINITIES:
                return True
        elif kind is dict:
            extend(item.values())
        elif kind is list or kind is tuple:
            extend(item)
        elif kind not in _SCALARS:
            getter = _FIELD_GETTERS.get(kind)
            if getter is None:
                names = getattr(kind, "__dataclass_fields__", None)
                if names is not None:
                    fields = tuple(names)
                    if len(fields) == 1:  # attrgetter of one name gives the value, not a tuple
                        getter = _FIELD_GETTERS[kind] = functools.partial(_one_field, fields[0])
                    else:
                        getter = _FIELD_GETTERS[kind] = operator.attrgetter(*fields)
            if getter is not None:
                extend(getter(item))
                continue
            parts = _children(item)
            if parts is not None:
                extend(v for _, v in parts)
            elif isinstance(item, float) and not math.isfinite(item):
                return True
    return False


_FIELD_GETTERS: dict[type, Callable[[Any], tuple[Any, ...]]] = {}


def _one_field(name: str, item: Any) -> tuple[Any, ...]:
    return (getattr(item, name),)


def _find_non_finite(value: Any, path: str) -> tuple[str, float]:
    if isinstance(value, float) and not math.isfinite(value):
        return path, value
    for name, child in _children(value) or ():
        if _has_non_finite(child):
            joined = f"{path}{name}" if name.startswith("[") else (f"{path}.{name}" if path else name)
            return _find_non_finite(child, joined)
    return path, math.nan


_INFINITIES = (math.inf, -math.inf)


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


_FLAT = frozenset({str, int, bool, type(None)})  # values _normalise leaves as they are


def canonical_json(value: Any) -> bytes:
    """Canonical JSON bytes of a JSON-compatible value."""
    if type(value) is dict and all(type(v) in _FLAT for v in value.values()):
        return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)  # the common case: nothing to normalise
    return orjson.dumps(_normalise(value), option=orjson.OPT_SORT_KEYS)


def args_hash(args: dict[str, Any]) -> str:
    if not args:
        return "0"
    return hashlib.blake2b(canonical_json(args), digest_size=8).hexdigest()


def call_key(task_id: str, n: int, tool: str, args: dict[str, Any]) -> str:
    return f"{task_id}:{n}:{tool}:{args_hash(args)}"
