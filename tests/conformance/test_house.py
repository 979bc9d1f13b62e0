"""The idempotency key's argument hash: nested arguments count, key order and float spelling do not
(the kit's tether.testing.runtime.tasks.test_house holds the house's other invariants on every
backend)."""

from __future__ import annotations

from tether.canonical import args_hash, call_key


def test_the_key_hashes_nested_arguments_and_ignores_order_and_float_spelling() -> None:
    base = {"to": "ada", "meta": {"tags": ["a", "b"], "n": 1}}
    assert args_hash(base) != args_hash({"to": "ada", "meta": {"tags": ["a", "c"], "n": 1}})
    assert args_hash(base) != args_hash({"to": "ada", "meta": {"tags": ["b", "a"], "n": 1}})  # list order counts
    assert args_hash(base) != args_hash({"to": "ada", "meta": {"tags": ["a", "b"], "n": 2}})
    assert args_hash(base) != args_hash({"to": "ada", "meta": {"tags": ["a", "b"], "n": 1, "x": None}})
    assert args_hash(base) == args_hash({"meta": {"n": 1, "tags": ["a", "b"]}, "to": "ada"})  # key order does not
    flat = {"to": "ada", "n": 1, "cc": None, "urgent": True}  # flat strings, ints, bools, None: a faster path
    assert args_hash(flat) == args_hash(dict(reversed(flat.items())))
    assert args_hash(flat) != args_hash({**flat, "n": 2}) and args_hash(flat) == args_hash({**flat, "n": 1.0})
    assert args_hash({"n": 1}) == args_hash({"n": 1.0})  # nor float spelling of a whole number
    assert args_hash({"n": 1.5}) != args_hash({"n": 1})
    assert call_key("t", 1, "send", base) != call_key("t", 2, "send", base) != call_key("t", 1, "mail", base)
