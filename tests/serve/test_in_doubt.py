"""A task whose call is in doubt (``on_unknown="raise"``) waits for a person, who settles it over HTTP
as they answer an ordinary wait: ``POST /v1/tasks/{id}/calls/{n}/resolve``, and the inspector's two
actions in place of the answer form."""

from __future__ import annotations

import time
from typing import Any

import pytest

import tether
from tests.conftest import dump_database
from tests.serve._agents import work
from tests.serve.conftest import Served
from tether.serve.keys import KeyRing
from tether.testing.runtime.ledger.test_in_doubt import _claim, _parked

RESOLVE = "/v1/tasks/co/calls/1/resolve"


@pytest.mark.parametrize("happened", [True, False])
def test_a_person_settles_the_call_over_http_and_a_worker_continues(served: Served, happened: bool) -> None:
    app = served.app
    effects = _parked(app)
    assert _claim(app) is None  # no worker takes it up until it is settled
    bob, _ = KeyRing(app.store).create(tenant="default", name="bob")
    body: dict[str, Any] = {"happened": True, "result": {"charge": "ch_by_hand"}} if happened else {"happened": False}
    response = served.client.post(RESOLVE, headers=served.headers(bob), json=body)
    assert response.status_code == 200, response.text
    out = response.json()
    state = app.state("co")
    assert out == {"task_id": "co", "status": state.status.value, "position": state.position}
    assert state.waiting is None and state.received["tether.call-1"] == {"happened": happened}
    answer = served.get("/v1/tasks/co/history").json()["items"][-1]
    assert answer["type"] == "InputReceived" and answer["actor"] == "bob" and answer["summary"].endswith(" by bob")
    call = state.call(1)
    assert call is not None
    if happened:
        assert (call.status, call.result) == ("completed", {"charge": "ch_by_hand"})
    else:
        assert call.attempts[-1].error_type == "Interrupted"
    assert _claim(app) == "co"  # runnable again
    work(app)
    done = app.state("co")
    assert done.status is tether.Status.COMPLETED
    if happened:  # the charge is not made twice: the person's result stands for it
        assert done.output == {"charge": "ch_by_hand"} and len(effects) == 1
    else:  # it runs again, under the same key
        assert done.output == {"charge": "ch_live", "amount": 42} and effects == [effects[0]] * 2
    again = served.post(RESOLVE, json=body)  # settled once: the call is no longer in doubt
    assert again.status_code == 400 and again.json()["code"] == "invalid_input", again.text


def test_bad_bodies_another_tenant_and_a_held_task_are_refused_and_write_nothing(served: Served) -> None:
    app = served.app
    _parked(app)
    before = dump_database(served.url, app.store)
    for path, body, status, says in [
        (RESOLVE, {"happened": True}, 422, "give the call's result"),
        (RESOLVE, {"happened": False, "result": {"charge": "x"}}, 422, "leave out 'result'"),
        (RESOLVE, {"happened": False, "result": None}, 422, "leave out 'result'"),  # null is a result
        (RESOLVE, {"happened": "yes"}, 422, "boolean"),
        (RESOLVE, {"result": 1}, 422, "Field required"),
        (RESOLVE, {"happened": False, "reason": "typo"}, 422, "Extra inputs"),
        (RESOLVE, "not json", 422, ""),
        ("/v1/tasks/co/calls/0/resolve", {"happened": False}, 422, ""),
        ("/v1/tasks/co/calls/2/resolve", {"happened": False}, 400, "missing"),
        (f"/v1/tasks/{served.waiting}/calls/1/resolve", {"happened": False}, 400, "completed"),  # not in doubt
        ("/v1/tasks/nope/calls/1/resolve", {"happened": False}, 404, "nope"),
    ]:
        response = served.post(path, json=body)
        assert response.status_code == status, (path, body, response.text)
        error = response.json()
        assert error["code"] and says in str(error), (path, body, error)
    mallory = served.client.post(RESOLVE, headers=served.headers(served.other_key), json={"happened": False})
    assert mallory.status_code == 404 and mallory.json()["code"] == "task_not_found"
    assert dump_database(served.url, app.store) == before

    token = app.store.acquire_lease(app.tenant, "co", "busy-worker", 30.0, time.time())
    assert token is not None
    held = dump_database(served.url, app.store)
    for body in ({"happened": True, "result": 1}, {"happened": False}):
        response = served.post(RESOLVE, json=body)
        assert response.status_code == 400 and "being run by busy-worker" in response.json()["message"]
    assert dump_database(served.url, app.store) == held


def test_the_in_doubt_key_is_not_answered_through_inputs_and_resume_points_to_resolve(served: Served) -> None:
    app = served.app
    _parked(app)
    before = dump_database(served.url, app.store)
    response = served.post("/v1/tasks/co/inputs/tether.call-1", json={"value": {"happened": True}})
    assert response.status_code == 400 and response.json()["code"] == "invalid_input", response.text
    assert "POST /v1/tasks/{task_id}/calls/1/resolve" in response.json()["message"]
    resume = served.post("/v1/tasks/co/resume")
    assert resume.status_code == 409 and "POST …/calls/1/resolve" in resume.json()["message"]
    assert dump_database(served.url, app.store) == before


def test_the_inspector_shows_the_call_and_the_two_actions_instead_of_the_answer_form(served: Served) -> None:
    effects = _parked(served.app)
    page = served.get("/tasks/co").text
    doubt = page[page.index('<section class="doubt"') :]
    doubt = doubt[: doubt.index("</section>")]
    assert 'data-task="co" data-n="1"' in doubt and "call #1 <code>charge()</code> is in doubt" in doubt
    assert (
        f"It started under key <code>{effects[0]}</code>" in doubt and "args: <code>{&quot;amount&quot;: 42}" in doubt
    )
    assert '<form class="happened">' in doubt and '<textarea name="result"' in doubt and "It happened" in doubt
    assert '<form class="not-happened">' in doubt and "It did not happen" in doubt
    assert 'class="answer"' not in page and 'class="input"' not in page  # no free-form answer here

    inbox = served.get("/inbox").text
    assert '<section class="doubt" data-task="co" data-n="1">' in inbox and "It did not happen" in inbox
    assert f'<section class="input" data-task="{served.waiting}" data-key="approve">' in inbox  # the others stay
    assert 'class="input" data-task="co"' not in inbox
    script = served.get("/static/app.js").text
    assert "/resolve`" in script and 'querySelectorAll("section.doubt")' in script
