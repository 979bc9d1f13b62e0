"""A run whose task another process took over meanwhile stops with LeaseLostError, whatever its own
process has read of the task since: the conflict its write meets may come from the log's memory (the
app read the newer version), before the store's fencing check, and the run must still say why it
stopped — its lease was taken — not that its record disagrees with itself (ConflictError)."""

from __future__ import annotations

import threading

import tether


def test_a_run_taken_over_meanwhile_stops_with_lease_lost_even_when_its_app_read_the_newer_task(
    store_url: str,
) -> None:
    app = tether.App(store_url)
    other = tether.App(app.store)  # another process's app: its own log, the same database
    started, go = threading.Event(), threading.Event()
    effects: list[str] = []

    # Readonly: a holder inside a side-effecting call keeps its lease through a cancel (its effect may be
    # under way); one inside a readonly call has nothing to lose, and the canceller takes the lease.
    @app.tool(readonly=True)
    def slow() -> str:
        started.set()
        assert go.wait(30)
        return "done"

    @app.tool
    def after() -> str:
        effects.append("after")
        return "after"

    @app.task
    def job(ctx: tether.TaskContext) -> str:
        ctx.call(slow)
        return ctx.call(after)

    other.engine.registry = app.registry
    outcome: list[BaseException | tether.TaskHandle] = []

    def run() -> None:
        try:
            outcome.append(app.run(job, task_id="j"))
        except BaseException as exc:  # what the run raised, looked at below
            outcome.append(exc)

    runner = threading.Thread(target=run)
    runner.start()
    assert started.wait(30)
    assert other.cancel("j").status is tether.Status.CANCELLED  # takes the lease: the run has not written since
    app.get("j")
    app.log.load("j")  # this process reads the task as it is now: its log knows the newer version
    go.set()
    runner.join(30)
    assert len(outcome) == 1 and isinstance(outcome[0], tether.LeaseLostError), outcome
    assert effects == []  # the run stopped at its next write: nothing after it ran
    assert app.get("j").status is tether.Status.CANCELLED
    app.close()
