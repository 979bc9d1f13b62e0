"""A task a worker parked (its run could not go on) says so in the API and on its inspector page; the
page shows what the task's calls spent."""

from __future__ import annotations

import tether
from tests.serve.conftest import Served


def test_a_parked_task_says_why_in_the_api_and_the_inspector(served: Served) -> None:
    app = served.app
    version = app.store.get_task(app.tenant, served.waiting).version  # type: ignore[union-attr]
    reason = "NonDeterminismError: task: at event #9 the history records call #2 book but the code asks for refund"
    assert app.store.park(app.tenant, served.waiting, version, reason)

    by_id = {t["task_id"]: t for t in served.get("/v1/tasks").json()["items"]}
    assert by_id[served.waiting]["parked"] == reason
    assert by_id[served.failed]["parked"] is None
    assert served.get(f"/v1/tasks/{served.waiting}").json()["summary"]["parked"] == reason
    page = served.get(f"/tasks/{served.waiting}").text
    assert "Parked: no worker runs it" in page and "the history records call #2 book" in page
    # The story's worker line says so too, not that a worker is needed (none would take it).
    assert '<p class="worker idle">Parked: no worker runs it until someone acts on it (below).</p>' in page
    assert "A worker is needed" not in page
    assert "Parked" not in served.get(f"/tasks/{served.failed}").text

    app.send_input(served.waiting, "approve", {"yes": True})  # a person acted: the mark goes
    assert served.get(f"/v1/tasks/{served.waiting}").json()["summary"]["parked"] is None


def test_the_task_page_shows_each_calls_tokens_and_the_tasks_total(served: Served) -> None:
    """The inspector's calls table has a tokens column when calls reported usage (a model result's own
    usage, or ``ctx.usage`` with a cost), and the task's total above it; a task without usage has neither."""
    app = served.app

    @app.tool(readonly=True)
    def llm_turn(prompt: str) -> dict[str, object]:
        return {"model": "gpt-4o", "usage": {"prompt_tokens": 1200, "completion_tokens": 34}, "text": prompt}

    @app.task
    def spender(ctx: tether.TaskContext) -> str:
        ctx.call(llm_turn, "hello")
        ctx.call(llm_turn, "again")
        ctx.usage(input_tokens=10, output_tokens=5, cost=0.0125)
        return "ok"

    app.run(spender, task_id="spent")
    page = served.get("/tasks/spent").text
    assert '<th role="columnheader" scope="col">tokens</th>' in page
    usage = '<td role="cell" class="usage" data-label="tokens">'
    assert page.count(f"{usage}1,200 in · 34 out</td>") == 1  # call #1: its usage
    assert f"{usage}10 in · 5 out · cost 0.0125</td>" in page  # call #2: ctx.usage
    assert '<p class="usage-total">Usage: 1,210 in · 39 out · cost 0.0125 over 2 calls</p>' in page
    plain = served.get(f"/tasks/{served.failed}").text
    assert ">tokens</th>" not in plain and "usage-total" not in plain
