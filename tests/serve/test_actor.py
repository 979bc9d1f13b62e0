"""Write actions through the API are recorded in the task's own history with the key's name as actor."""

from __future__ import annotations

from typing import Any

from starlette.testclient import TestClient

from tests.serve._agents import build
from tests.serve.conftest import Served
from tether.serve import create_app
from tether.serve.keys import KeyRing


def _entry(served: Served, task_id: str, type_: str) -> dict[str, Any]:
    entries = served.get(f"/v1/tasks/{task_id}/history").json()["items"]
    return next(e for e in reversed(entries) if e["type"] == type_)


def test_each_write_records_the_name_of_the_key_that_made_it(served: Served) -> None:
    bob, _ = KeyRing(served.app.store).create(tenant="default", name="bob")
    as_bob = served.headers(bob)
    answered = served.client.post(
        f"/v1/tasks/{served.waiting}/inputs/approve", headers=as_bob, json={"value": {"yes": True}}
    )
    assert answered.status_code == 200, answered.text
    assert served.post(f"/v1/tasks/{served.waiting}/cancel", json={"reason": "too dear"}).status_code == 202
    assert served.client.post(f"/v1/tasks/{served.failed}/retry", headers=as_bob).status_code == 202
    forked = served.client.post(f"/v1/tasks/{served.waiting}/fork", headers=as_bob, json={"at": 2})
    assert forked.status_code == 201, forked.text
    fork = _entry(served, forked.json()["state"]["task_id"], "TaskForked")
    assert fork["actor"] == "bob" and fork["summary"].endswith(" by bob")

    answer = _entry(served, served.waiting, "InputReceived")
    assert answer["actor"] == "bob" and answer["data"]["actor"] == "bob" and answer["summary"].endswith(" by bob")
    cancel = _entry(served, served.waiting, "CancelRequested")
    assert cancel["actor"] == "alice" and cancel["summary"] == "cancellation requested by alice: too dear"
    retry = _entry(served, served.failed, "RetryRequested")
    assert retry["actor"] == "bob" and retry["summary"].startswith("retried by bob after RuntimeError")
    timeline = served.get(f"/tasks/{served.waiting}").text  # the inspector's task page
    assert "= {&quot;yes&quot;:true} by bob</span>" in timeline and "cancellation requested by alice" in timeline
    # The same facts through the library, from the workers' side of the store.
    by_type = {e.type: e.event for e in served.app.history(served.waiting)}
    assert by_type["InputReceived"].actor == "bob"  # type: ignore[attr-defined]
    assert by_type["CancelRequested"].actor == "alice"  # type: ignore[attr-defined]
    assert served.app.state(served.waiting).cancel_reason == "too dear"  # the reason is the caller's own words


def test_without_keys_writes_are_recorded_as_no_auth(tmp_path: Any) -> None:
    url = f"sqlite:///{tmp_path / 't.db'}"
    app, _ = build(url)
    task = app.start("trip", city="Oslo").task_id
    asgi = create_app(url, no_auth=True)
    with TestClient(asgi, base_url="http://127.0.0.1:8700") as client:
        client.get("/")  # a page sets the CSRF cookie that a write without keys must echo
        token = client.cookies["tether_csrf"]
        assert client.post(f"/v1/tasks/{task}/cancel", headers={"X-Tether-CSRF": token}).status_code == 202
    asgi.state.store.close()
    assert [e.summary for e in app.history(task)][-1] == "cancellation requested by no-auth: cancelled"
    app.close()
