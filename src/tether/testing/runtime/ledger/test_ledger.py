"""app.ledger.once and the in-doubt policies of tools: retry, raise, reconcile."""
# mypy: disable-error-code="union-attr,unused-ignore"

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import tether


@pytest.fixture
def app(store_url: str) -> tether.App:
    return tether.App(store_url)


def test_once_runs_once_and_returns_the_recorded_result(app: tether.App) -> None:
    runs: list[int] = []

    def pay() -> dict[str, Any]:
        runs.append(1)
        return {"charge": "ch_1", "amount": 42}

    assert app.ledger.once("pay:1", pay) == {"charge": "ch_1", "amount": 42}
    assert app.ledger.once("pay:1", pay) == {"charge": "ch_1", "amount": 42}
    assert runs == [1]
    row = app.ledger.get("pay:1")
    assert row is not None and row.status == "done"


def test_a_failing_effect_can_run_again(app: tether.App) -> None:
    attempts: list[int] = []

    def flaky() -> str:
        attempts.append(1)
        if len(attempts) == 1:
            raise ConnectionError("card network down")
        return "ok"

    with pytest.raises(ConnectionError):
        app.ledger.once("k", flaky)
    assert app.ledger.once("k", flaky) == "ok" and len(attempts) == 2


def _interrupted(app: tether.App, key: str) -> None:
    def dies() -> None:
        raise KeyboardInterrupt  # the process stops inside the effect: started, never recorded

    with pytest.raises(KeyboardInterrupt):
        app.ledger.once(key, dies)


def test_unknown_outcome_retry_runs_again(app: tether.App) -> None:
    _interrupted(app, "k")
    assert app.ledger.once("k", lambda: "second run", on_unknown="retry") == "second run"
    row = app.ledger.get("k")
    assert row is not None and row.runs == 2


def test_unknown_outcome_raise_needs_a_person(app: tether.App) -> None:
    _interrupted(app, "k")
    with pytest.raises(tether.OutcomeUnknownError) as info:
        app.ledger.once("k", lambda: "must not run", on_unknown="raise")
    assert info.value.key == "k" and "resolve" in str(info.value)
    assert app.ledger.resolve("k", {"charge": "found by hand"}) == {"charge": "found by hand"}
    assert app.ledger.once("k", lambda: "must not run", on_unknown="raise") == {"charge": "found by hand"}


def test_unknown_outcome_reconcile_asks_the_other_system(app: tether.App) -> None:
    _interrupted(app, "found")
    _interrupted(app, "absent")
    asked: list[str] = []

    def reconcile(key: str) -> Any:
        asked.append(key)
        return {"charge": "ch_9"} if key == "found" else None

    assert app.ledger.once("found", lambda: "must not run", on_unknown=reconcile) == {"charge": "ch_9"}
    assert app.ledger.once("absent", lambda: "ran", on_unknown=reconcile) == "ran"
    assert asked == ["found", "absent"]


def test_once_async(app: tether.App) -> None:
    async def effect() -> int:
        await asyncio.sleep(0)
        return 7

    async def main() -> tuple[Any, Any]:
        return await app.ledger.once_async("a", effect), await app.ledger.once_async("a", effect)

    assert asyncio.run(main()) == (7, 7)


def test_bad_policy_and_key(app: tether.App) -> None:
    with pytest.raises(tether.InvalidInputError, match="on_unknown"):
        app.ledger.once("k", lambda: 1, on_unknown="maybe")  # type: ignore[arg-type]
    with pytest.raises(tether.InvalidInputError, match="key"):
        app.ledger.once("", lambda: 1)


def _task_with_interrupted_charge(app: tether.App, on_unknown: Any, effects: list[str]) -> Any:
    crash = {"now": True}

    @app.tool(on_unknown=on_unknown)
    def charge(amount: int) -> dict[str, Any]:
        effects.append(tether.current_call().key)
        if crash["now"]:
            crash["now"] = False
            raise KeyboardInterrupt  # dies after the effect reached the card network
        return {"charge": "ch_live", "amount": amount}

    @app.task
    def checkout(ctx: tether.TaskContext) -> Any:
        return ctx.call(charge, 42)

    with pytest.raises(KeyboardInterrupt):
        app.run(checkout, task_id="co")
    return checkout


def test_tool_in_doubt_retry(app: tether.App) -> None:
    effects: list[str] = []
    _task_with_interrupted_charge(app, "retry", effects)
    run = app.resume("co")
    assert run.output == {"charge": "ch_live", "amount": 42}
    assert len(effects) == 2 and effects[0] == effects[1]  # the same key both times
    attempts = run.state.calls[0].attempts
    assert [a.error_type for a in attempts] == ["Interrupted", None]


def test_tool_in_doubt_raise_then_resolve(app: tether.App) -> None:
    effects: list[str] = []
    _task_with_interrupted_charge(app, "raise", effects)
    with pytest.raises(tether.OutcomeUnknownError):
        app.resume("co")
    parked = app.state("co")  # waits for a person: no worker takes it up meanwhile
    assert parked.status is tether.Status.AWAITING_INPUT and len(effects) == 1
    assert parked.waiting is not None and parked.waiting.key == "tether.call-1"
    app.resolve_call("co", 1, {"charge": "ch_by_hand", "amount": 42})
    run = app.resume("co")
    assert run.output == {"charge": "ch_by_hand", "amount": 42} and len(effects) == 1
    with pytest.raises(tether.InvalidInputError, match="completed"):
        app.resolve_call("co", 1, {})


def test_tool_in_doubt_raise_names_the_call_and_how_to_settle_it(app: tether.App) -> None:
    """The error a person meets names the task's call and the two ways on: it happened (record its
    result), or it did not (run it again under its key). ``ledger.resolve``/``forget``, which it
    used to name, settle a ledger key, and left the task's call in doubt for good."""
    effects: list[str] = []
    _task_with_interrupted_charge(app, "raise", effects)
    with pytest.raises(tether.OutcomeUnknownError) as info:
        app.resume("co")
    error = info.value
    assert (error.key, error.task_id, error.n, error.tool) == (effects[0], "co", 1, "charge")
    assert "app.resolve_call('co', 1, result)" in str(error)
    assert "app.resolve_call('co', 1, happened=False)" in str(error)
    assert "ledger" not in str(error)
    assert error.to_dict()["code"] == "outcome_unknown" and error.to_dict()["n"] == 1


def test_tool_in_doubt_raise_then_settled_as_not_happened_runs_again_under_its_key(app: tether.App) -> None:
    effects: list[str] = []
    _task_with_interrupted_charge(app, "raise", effects)
    with pytest.raises(tether.OutcomeUnknownError):
        app.resume("co")
    settled = app.resolve_call("co", 1, happened=False)  # the person found no charge
    assert settled.call(1) is not None and settled.call(1).status == "intended"
    run = app.resume("co")
    assert run.output == {"charge": "ch_live", "amount": 42}
    assert len(effects) == 2 and effects[0] == effects[1]  # run again, under the same key
    assert [a.error_type for a in run.state.calls[0].attempts] == ["Interrupted", None]
    assert "did not happen" in (run.state.calls[0].attempts[0].message or "")
    assert app.replay("co").clean
    with pytest.raises(tether.InvalidInputError, match="completed"):
        app.resolve_call("co", 1, happened=False)


def test_resolve_call_takes_a_result_or_happened_false(app: tether.App) -> None:
    effects: list[str] = []
    _task_with_interrupted_charge(app, "raise", effects)
    with pytest.raises(tether.InvalidInputError, match="result"):
        app.resolve_call("co", 1)
    with pytest.raises(tether.InvalidInputError, match="happened=False"):
        app.resolve_call("co", 1, {"charge": "x"}, happened=False)
    assert app.state("co").call(1).status == "intended"  # type: ignore[union-attr]


def test_tool_in_doubt_reconcile(app: tether.App) -> None:
    effects: list[str] = []
    _task_with_interrupted_charge(app, lambda key: {"charge": "ch_reconciled", "key": key}, effects)
    run = app.resume("co")
    assert run.output == {"charge": "ch_reconciled", "key": effects[0]} and len(effects) == 1
