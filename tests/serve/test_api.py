"""Every /v1 endpoint against every backend: what it returns, and 4xx (never 5xx) for bad input."""

from __future__ import annotations

import re

import pytest

from tests.serve._agents import work
from tests.serve.conftest import Served


def test_list_filters_pages_and_totals(served: Served) -> None:
    body = served.get("/v1/tasks").json()
    assert body["total"] == 3 and len(body["items"]) == 3
    by_id = {t["task_id"]: t for t in body["items"]}
    waiting = by_id[served.waiting]
    assert waiting["status"] == "awaiting_input" and waiting["waiting_for"] == "approve"
    assert waiting["prompt"] == "Book Lisbon for 120?" and waiting["position"].startswith("step 2 of 3")
    assert by_id[served.failed]["status"] == "failed"

    page = served.get("/v1/tasks", params={"limit": 2, "offset": 2}).json()
    assert page["total"] == 3 and len(page["items"]) == 1 and page["offset"] == 2
    assert [t["task_id"] for t in served.get("/v1/tasks", params={"status": "failed"}).json()["items"]] == [
        served.failed
    ]
    assert served.get("/v1/tasks", params={"type": "chat"}).json()["total"] == 1
    assert served.get("/v1/tasks", params={"user_id": "u1"}).json()["total"] == 2
    assert served.get("/v1/tasks", params={"q": "brok"}).json()["items"][0]["task_id"] == served.failed
    both = served.get("/v1/tasks", params=[("status", "failed"), ("status", "completed")]).json()
    assert both["total"] == 2


def test_a_task_is_listed_by_the_conversation_it_opened_while_it_runs(served: Served) -> None:
    """A task started without a session opens the one made for it (named after the task): a listing
    by that session finds it from its first run on, while it waits, not only its state once read."""
    task_id = served.app.start("talk", text="hi").task_id
    work(served.app)
    body = served.get("/v1/tasks", params={"session_id": task_id}).json()
    assert [(t["task_id"], t["status"], t["session_id"]) for t in body["items"]] == [
        (task_id, "awaiting_input", task_id)
    ]
    assert body["total"] == 1
    assert served.get("/v1/tasks", params={"session_id": "s1"}).json()["total"] == 1  # the chat's named one


def test_a_task_and_the_workers_endpoint_say_whether_a_worker_is_alive(served: Served) -> None:
    """The fixture's workers ran and stopped: none is alive, and both say since when and how to
    start one; a worker's liveness record (as ``tether worker support:app`` writes it) makes one alive."""
    import time

    from tether.store import WorkerRow

    gone = served.get(f"/v1/tasks/{served.waiting}").json()["workers"]
    assert gone["alive"] == 0 and gone["last_seen"].endswith("Z")
    assert gone["note"].startswith("no worker is running: the last one stopped")
    # The same answer, but for the seconds since the stop: the two requests may fall either side of one.
    alone = served.get("/v1/workers").json()
    assert {**gone, "note": re.sub(r"\d+ s ago", "N s ago", gone["note"])} == {
        **alone,
        "note": re.sub(r"\d+ s ago", "N s ago", alone["note"]),
    }
    now = time.time()
    served.app.store.record_worker(served.app.tenant, WorkerRow("h:1:w", now, now, app="support:app"))
    alive = served.get("/v1/workers").json()
    assert (alive["alive"], alive["app"], alive["note"]) == (1, "support:app", None)


def test_task_has_calls_decisions_observations_and_failure(served: Served) -> None:
    body = served.get(f"/v1/tasks/{served.waiting}").json()
    state = body["state"]
    call = state["calls"][0]
    assert call["tool"] == "lookup" and call["args"] == {"city": "Lisbon"}
    assert call["result"] == {"city": "Lisbon", "price": 120} and call["attempts"][0]["duration"] >= 0
    assert state["decisions"][0]["rationale"] == "the only offer"
    assert state["observations"]["price"]["value"] == 120
    assert [s["name"] for s in state["plan"]] == ["search", "approve", "book"]
    assert state["waiting"]["input_schema"]["required"] == ["yes"]
    failed = served.get(f"/v1/tasks/{served.failed}").json()
    assert failed["state"]["failure"]["message"] == "the booking service is down"
    assert "after 2 attempts" in failed["failure_summary"]


def test_history_state_and_diff(served: Served) -> None:
    entries = served.get(f"/v1/tasks/{served.waiting}/history").json()["items"]
    assert entries[0]["type"] == "TaskCreated" and entries[0]["summary"]
    assert any(e["boundary"] == "before step 1" for e in entries)
    later = served.get(f"/v1/tasks/{served.waiting}/history", params={"after": 3}).json()["items"]
    assert later[0]["seq"] == 4

    at1 = served.get(f"/v1/tasks/{served.waiting}/state", params={"at": 1}).json()
    assert at1["version"] == 1 and at1["status"] == "pending"
    before = served.get(f"/v1/tasks/{served.waiting}/state", params={"before_step": "search"}).json()
    after = served.get(f"/v1/tasks/{served.waiting}/state", params={"after_step": "1"}).json()
    assert before["calls"] == [] and after["calls"][0]["tool"] == "lookup"
    assert served.get(f"/v1/tasks/{served.waiting}/state").json()["status"] == "awaiting_input"

    diff = served.get(f"/v1/tasks/{served.waiting}/diff", params={"a": 1, "b": 2}).json()
    assert {"op": "replace", "path": "/status", "value": "running"} in diff["patch"] and diff["text"]


def test_fork_tree_and_diff_across_tasks(served: Served) -> None:
    response = served.post(f"/v1/tasks/{served.waiting}/fork", json={"at": 3})
    assert response.status_code == 201, response.text
    fork = response.json()["summary"]
    assert fork["status"] == "pending" and fork["parent_id"] == served.waiting
    tree = served.get(f"/v1/tasks/{fork['task_id']}/tree").json()
    assert tree["task_id"] == served.waiting and tree["forks"][0]["task_id"] == fork["task_id"]
    assert tree["forks"][0]["fork_at"] == 3
    same = served.get(f"/v1/tasks/{served.waiting}/diff", params={"a": 3, "b": 3, "other": fork["task_id"]}).json()
    assert same["b"] == f"{fork['task_id']}@3" and same["patch"] == []  # shared history: the same state
    work(served.app)  # a worker takes the fork on from event 3
    assert served.get(f"/v1/tasks/{fork['task_id']}").json()["summary"]["status"] == "awaiting_input"


def test_rewind_keeps_the_old_branch(served: Served) -> None:
    response = served.post(f"/v1/tasks/{served.waiting}/rewind", json={"to": 3})
    assert response.status_code == 200, response.text
    assert served.get(f"/v1/tasks/{served.waiting}").json()["state"]["version"] == 4
    assert served.get(f"/v1/tasks/{served.waiting}~1").json()["state"]["superseded_by"] == served.waiting


def test_answer_is_checked_then_a_worker_continues(served: Served) -> None:
    pending = served.get("/v1/inputs").json()["items"]
    assert [(p["task_id"], p["key"]) for p in pending] == [(served.waiting, "approve")]
    assert pending[0]["schema"]["required"] == ["yes"]
    bad = served.post(f"/v1/tasks/{served.waiting}/inputs/approve", json={"value": {"yes": "sure"}})
    assert bad.status_code == 400 and bad.json()["code"] == "invalid_input" and "boolean" in bad.json()["message"]
    wrong_key = served.post(f"/v1/tasks/{served.waiting}/inputs/nope", json={"value": 1})
    assert wrong_key.status_code == 400
    good = served.post(f"/v1/tasks/{served.waiting}/inputs/approve", json={"value": {"yes": True, "note": "ok"}})
    assert good.status_code == 200, good.text
    work(served.app)
    state = served.get(f"/v1/tasks/{served.waiting}").json()["state"]
    assert state["status"] == "completed" and state["output"] == {"booked": True, "note": "ok"}
    assert served.get("/v1/inputs").json()["items"] == []


def test_retry_is_queued_with_the_key_as_actor(served: Served) -> None:
    response = served.post(f"/v1/tasks/{served.failed}/retry")
    assert response.status_code == 202 and response.json()["status"] == "pending"
    entries = served.get(f"/v1/tasks/{served.failed}/history").json()["items"]
    assert entries[-1]["type"] == "RetryRequested" and entries[-1]["data"]["actor"] == "alice"
    served.flags["fail"] = False
    work(served.app)
    assert served.get(f"/v1/tasks/{served.failed}").json()["state"]["output"] == 4
    again = served.post(f"/v1/tasks/{served.failed}/retry")  # its state forbids it: a conflict, not a bad value
    assert again.status_code == 409 and again.json()["code"] == "not_retryable"
    assert "completed" in again.json()["message"]
    pending = served.post(f"/v1/tasks/{served.waiting}/retry")
    assert pending.status_code == 409 and pending.json()["code"] == "not_retryable"


def test_cancel_is_queued_and_names_the_key(served: Served) -> None:
    response = served.post(f"/v1/tasks/{served.waiting}/cancel", json={"reason": "changed my mind"})
    assert response.status_code == 202, response.text
    work(served.app)
    state = served.get(f"/v1/tasks/{served.waiting}").json()["state"]
    assert state["status"] == "cancelled" and state["cancel_reason"] == "changed my mind"
    done = served.post(f"/v1/tasks/{served.chatted}/cancel")
    assert done.status_code == 409 and done.json()["code"] == "invalid_transition"


def test_resume_says_what_the_task_needs(served: Served) -> None:
    waits = served.post(f"/v1/tasks/{served.waiting}/resume")
    assert waits.status_code == 409 and waits.json()["code"] == "not_runnable" and "approve" in waits.json()["message"]
    assert (
        served.post(f"/v1/tasks/{served.failed}/resume").json()["message"].endswith("retry it instead (POST …/retry)")
    )
    fork = served.post(f"/v1/tasks/{served.waiting}/fork", json={"at": 2}).json()["summary"]["task_id"]
    queued = served.post(f"/v1/tasks/{fork}/resume")
    assert queued.status_code == 202 and queued.json()["runnable"] is True


def test_sessions_messages_window_and_users(served: Served) -> None:
    sessions = served.get("/v1/sessions").json()["items"]
    assert [s["session_id"] for s in sessions] == ["s1"]
    messages = served.get("/v1/sessions/s1/messages").json()["items"]
    assert [(m["role"], m["content"]) for m in messages] == [("user", "hello"), ("assistant", "you said hello")]
    window = served.get("/v1/sessions/s1/window", params={"max_tokens": 1000}).json()
    assert len(window["messages"]) == 2 and window["tokens"] > 0
    # a missing session or user is named as what it is, never as a task
    for path, words in (
        ("/v1/sessions/nope/messages", "no session 'nope' in tenant 'default'"),
        ("/v1/sessions/nope/window", "no session 'nope' in tenant 'default'"),
        ("/v1/users/nobody", "no user 'nobody' in tenant 'default'"),
    ):
        missing = served.get(path)
        assert missing.status_code == 404 and missing.headers["content-type"] == "application/problem+json"
        assert (missing.json()["code"], missing.json()["message"]) == ("not_found", words), missing.json()
    user = served.get("/v1/users/u1").json()
    assert user["document"] == {"seat": "aisle"} and user["version"] >= 2
    assert served.get("/v1/sessions").status_code == 200  # reading made nothing
    assert [s["session_id"] for s in served.get("/v1/sessions").json()["items"]] == ["s1"]


def test_bad_input_is_a_4xx_with_a_code(served: Served) -> None:
    # Every query on one server (they are reads: none changes what the next one sees), as
    # test_bad_bodies_are_4xx does for bodies; each failure names its query.
    for path, params in [
        ("/v1/tasks", {"limit": 0}),
        ("/v1/tasks", {"limit": "x"}),
        ("/v1/tasks", {"status": "dreaming"}),
        ("/v1/tasks", {"type": "a\x00b"}),
        ("/v1/tasks/{w}/state", {"at": 999}),
        ("/v1/tasks/{w}/state", {"at": 1, "before_step": "1"}),
        ("/v1/tasks/{w}/state", {"before_step": "nope"}),
        ("/v1/tasks/{w}/state", {"after_step": "approve"}),
        ("/v1/tasks/{w}/diff", {"a": 1}),
        ("/v1/tasks/{w}/diff", {"a": 1, "b": 2, "other": "nope"}),
        ("/v1/tasks/{w}/history", {"after": -1}),
        ("/v1/sessions/s1/window", {"max_tokens": 0}),
    ]:
        response = served.get(path.format(w=served.waiting), params=params)
        assert 400 <= response.status_code < 500, (path, params, response.text)
        assert response.json()["code"], (path, params, response.text)


def test_bad_bodies_are_4xx(served: Served) -> None:
    for path, body in [
        (f"/v1/tasks/{served.waiting}/fork", {"at": 0}),
        (f"/v1/tasks/{served.waiting}/fork", {"at": 10_000}),
        (f"/v1/tasks/{served.waiting}/fork", {"at": 2, "new_id": served.failed}),
        (f"/v1/tasks/{served.waiting}/fork", "not json"),
        (f"/v1/tasks/{served.waiting}/rewind", {"to": 10_000}),
        (f"/v1/tasks/{served.waiting}/inputs/approve", {}),
        (f"/v1/tasks/{served.failed}/inputs/approve", {"value": 1}),
    ]:
        response = served.post(path, json=body)
        assert 400 <= response.status_code < 500, (path, body, response.text)
        assert response.json()["code"]


def test_no_secret_or_store_url_in_any_answer(served: Served) -> None:
    texts = [
        served.get(p).text
        for p in ("/v1/whoami", "/v1/tasks", f"/v1/tasks/{served.waiting}", "/v1/tasks/nope", "/openapi.json", "/")
    ]
    scheme = served.url.partition("://")[0] + "://"
    for text in texts:
        assert scheme not in text and "tk_" not in text


@pytest.mark.parametrize("status", ["running", "completed", "failed", "cancelled"])
def test_a_finished_task_is_held_by_nobody(status: str) -> None:
    """A run gives its lease back after its last status change (and that release wakes no
    listener): the list never shows a finished task as held, a live one as held by its run."""
    import time
    from dataclasses import replace

    import tether
    from tether.serve._json import summary_json

    app = tether.App("memory://")
    app.log.create(type="t", task_id="a")
    row = replace(app.log.get("a"), status=status, lease_owner="w1", lease_expires=time.time() + 60)
    assert summary_json(app, row)["held_by"] == ("w1" if status == "running" else None)
