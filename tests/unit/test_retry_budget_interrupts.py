"""An attempt cut short by a crash (the process died inside the tool, the run was interrupted, its
lease was lost) is recorded as ``Interrupted`` and run again under the same key, but it is not one of
the tool's failures: it never uses up the ``Retry`` budget, live or when the record is replayed."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

import tether


class Crash(BaseException):
    """Stands for the process dying inside an attempt (a ``BaseException``, as a kill is)."""


@pytest.fixture
def app() -> Iterator[tether.App]:
    app = tether.App("memory://")
    yield app
    app.close()


def _flaky_tool(app: tether.App, crashes: int, failures: int, max_attempts: int) -> list[str]:
    """Task ``job`` calling a tool whose first ``crashes`` attempts die inside it and whose next
    ``failures`` raise ``TimeoutError``; the task returns the tool's result, or the failure's attempts
    count. Returns what each attempt of the tool did, in order."""
    seen: list[str] = []

    @app.tool(retry=tether.Retry(max_attempts=max_attempts, backoff=0, jitter=0))
    def flaky() -> str:
        if seen.count("crash") < crashes:
            seen.append("crash")
            raise Crash
        if seen.count("timeout") < failures:
            seen.append("timeout")
            raise TimeoutError("the gateway timed out")
        seen.append("ok")
        return "ok"

    @app.task
    def job(ctx: tether.TaskContext) -> Any:
        try:
            return ctx.call(flaky)
        except tether.ToolError as exc:
            return {"gave_up_after": exc.attempts}

    return seen


def _crash_then_resume(app: tether.App, crashes: int) -> tether.TaskState:
    with pytest.raises(Crash):
        app.run("job", task_id="t")
    for _ in range(crashes - 1):
        with pytest.raises(Crash):
            app.resume("t")
    run = app.resume("t")
    return run.state


def test_interrupted_attempts_do_not_use_up_the_retry_budget(app: tether.App) -> None:
    # Two attempts allowed; two crashed, then one failed: the failure still has its retry.
    seen = _flaky_tool(app, crashes=2, failures=1, max_attempts=2)
    state = _crash_then_resume(app, crashes=2)
    assert seen == ["crash", "crash", "timeout", "ok"]
    assert state.status is tether.Status.COMPLETED and state.output == "ok"
    assert [a.error_type for a in state.calls[0].attempts] == ["Interrupted", "Interrupted", "TimeoutError", None]


def test_many_interrupted_attempts_leave_the_budget_whole(app: tether.App) -> None:
    # More crashes than the policy has attempts: none of them counts, so both failures are retried.
    seen = _flaky_tool(app, crashes=3, failures=2, max_attempts=3)
    state = _crash_then_resume(app, crashes=3)
    assert seen == ["crash"] * 3 + ["timeout"] * 2 + ["ok"]
    assert state.output == "ok"
    types = [a.error_type for a in state.calls[0].attempts]
    assert types == ["Interrupted"] * 3 + ["TimeoutError"] * 2 + [None]
    assert [a.number for a in state.calls[0].attempts] == [1, 2, 3, 4, 5, 6]  # numbers go on, the budget does not


def test_a_call_that_runs_out_counts_only_its_errors_live_and_on_replay(app: tether.App) -> None:
    # The budget runs out on real errors only; the ToolError (live, and rebuilt from the record on
    # replay) says how many attempts failed, the crash not among them.
    seen = _flaky_tool(app, crashes=1, failures=2, max_attempts=2)
    state = _crash_then_resume(app, crashes=1)
    assert seen == ["crash", "timeout", "timeout"]
    assert state.output == {"gave_up_after": 2}
    assert [a.error_type for a in state.calls[0].attempts] == ["Interrupted", "TimeoutError", "TimeoutError"]
    report = app.replay("t")
    assert report.clean, report


def test_attempts_cut_short_by_a_lost_lease_do_not_use_up_the_retry_budget(app: tether.App) -> None:
    # Another worker takes the task while the tool runs (twice): the run cannot record the result and
    # stops; those attempts are interrupted, not failed, and the one real failure is still retried.
    seen: list[str] = []

    @app.tool(retry=tether.Retry(max_attempts=2, backoff=0, jitter=0))
    def flaky() -> str:
        if seen.count("lease lost") < 2:
            seen.append("lease lost")
            token = app.store.acquire_lease(app.tenant, "t", "another-worker", 30.0, time.time() + 3600)
            assert token is not None
            app.store.release_lease(app.tenant, "t", token)  # and lets it go, so the task resumes here
            return "too late to record"
        if "timeout" not in seen:
            seen.append("timeout")
            raise TimeoutError("the gateway timed out")
        seen.append("ok")
        return "ok"

    @app.task
    def job(ctx: tether.TaskContext) -> str:
        return str(ctx.call(flaky))

    with pytest.raises(tether.LeaseLostError):
        app.run(job, task_id="t")
    with pytest.raises(tether.LeaseLostError):
        app.resume("t")
    state = app.resume("t").state
    assert seen == ["lease lost", "lease lost", "timeout", "ok"]
    assert state.output == "ok"
    assert [a.error_type for a in state.calls[0].attempts] == ["Interrupted", "Interrupted", "TimeoutError", None]
