"""A task a worker parked (its run could not go on) says so in the API and on its inspector page."""

from __future__ import annotations

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
