"""The rewind key rule: a rewound task keeps its id, so a call it makes again carries the key the
abandoned branch's call carried; a fork is a new task, so its calls carry keys of their own."""

from __future__ import annotations

from typing import Any

import pytest

import tether


@pytest.fixture
def app(store_url: str) -> tether.App:
    return tether.App(store_url, inline_wait=0)


def _payment(app: tether.App, keys: list[str], charged: list[int]) -> Any:
    @app.tool
    def quote(amount: int) -> int:
        return amount + 1

    @app.tool
    def charge(amount: int) -> dict[str, Any]:
        key = tether.current_call().key
        keys.append(key)

        def effect() -> dict[str, Any]:  # what a provider that deduplicates by key does, once per key
            charged.append(amount)
            return {"charge": len(charged), "amount": amount}

        return dict(app.ledger.once(key, effect))

    @app.task
    def pay(ctx: tether.TaskContext, amount: int) -> dict[str, Any]:
        ctx.plan(["quote", "charge"])
        with ctx.step("quote"):
            total = ctx.call(quote, amount)
        with ctx.step("charge"):
            return dict(ctx.call(charge, total))

    return pay


def test_a_rewind_calls_again_under_the_abandoned_branchs_key_and_a_fork_under_its_own(app: tether.App) -> None:
    keys: list[str] = []
    charged: list[int] = []
    pay = _payment(app, keys, charged)
    first = app.run(pay, 10, task_id="pay")
    assert first.output == {"charge": 1, "amount": 11} and charged == [11]
    abandoned_key = app.state("pay").calls[1].key
    assert keys == [abandoned_key] and abandoned_key.startswith("pay:2:")
    at = app.state_after("pay", "quote").version  # before the charge: the rewind runs it again

    app.rewind("pay", to=at)
    again = app.resume("pay")
    # The same call at the same place of the same task: the same key as the branch set aside.
    assert app.state("pay~1").calls[1].key == abandoned_key
    assert keys == [abandoned_key, abandoned_key]
    assert app.state("pay").calls[1].key == abandoned_key
    # So a ledger (or a provider) that deduplicates by key answers with the first charge's result.
    assert again.output == {"charge": 1, "amount": 11} and charged == [11]

    app.fork("pay~1", at=at, new_id="pay-fork")
    forked = app.resume("pay-fork")
    fork_key = app.state("pay-fork").calls[1].key
    # A fork is a new task: fresh keys, and the effect is carried out again.
    assert fork_key != abandoned_key and fork_key.startswith("pay-fork:2:")
    assert keys == [abandoned_key, abandoned_key, fork_key]
    assert forked.output == {"charge": 2, "amount": 11} and charged == [11, 11]
    # The fork shares the call it did not make again (the quote), key and all.
    assert app.state("pay-fork").calls[0].key == app.state("pay~1").calls[0].key


def test_a_rewind_to_the_start_repeats_every_key_and_other_arguments_make_other_keys(app: tether.App) -> None:
    # Only the same call (tool and arguments) at the same ordinal of the same task gets the abandoned
    # branch's key: a run that asks differently (here a fork with other inputs) makes another call.
    keys: list[str] = []
    charged: list[int] = []
    pay = _payment(app, keys, charged)
    app.run(pay, 10, task_id="pay")
    quote_key = app.state("pay").calls[0].key
    app.rewind("pay", to=1)  # the very start: the quote and the charge run again, the same way
    app.resume("pay")
    assert [c.key for c in app.state("pay").calls] == [c.key for c in app.state("pay~1").calls]
    assert app.state("pay").calls[0].key == quote_key and keys[0] == keys[1] and charged == [11]
    app.fork("pay", at=1, inputs={"amount": 20}, new_id="pay-20")
    app.resume("pay-20")
    assert keys[2] != keys[0] and charged == [11, 21]
