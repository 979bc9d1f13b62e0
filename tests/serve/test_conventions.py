"""The HTTP API's conventions, as a client relies on them: problems for every error, one list
envelope, stable operation ids, the security schemes, UTC times, the summary's conversation,
streams a proxy passes through and a reconnect resumes, and scripts on a loopback server without keys."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import httpx
import pytest
from starlette.testclient import TestClient

from tests.serve._agents import build, work
from tests.serve.conftest import LiveServer, Served
from tether.serve import create_app


@pytest.fixture
def store_url() -> Iterator[str]:
    yield "memory://"  # the conventions are the server's, the same on every backend


PROBLEM = "application/problem+json"


def _problem(response: httpx.Response, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith(PROBLEM), response.headers
    body: dict[str, Any] = response.json()
    assert body["type"] == f"urn:tether:error:{code}" and body["code"] == code and body["status"] == status
    assert body["title"] and body["detail"] == body["message"] and body["instance"] == response.request.url.path
    return body


def test_every_error_is_a_problem_with_tethers_code(served: Served) -> None:
    _problem(served.get("/v1/tasks/nope"), 404, "task_not_found")
    _problem(served.client.get("/v1/tasks"), 401, "unauthorized")
    _problem(served.get("/v1/tasks", params={"limit": 0}), 422, "invalid_request")
    _problem(served.post(f"/v1/tasks/{served.waiting}/retry"), 409, "not_retryable")  # pending: a state conflict
    _problem(served.post(f"/v1/tasks/{served.waiting}/resume"), 409, "not_runnable")
    assert served.client.get("/v1/tasks").headers["www-authenticate"].startswith("Bearer")


def test_an_unknown_route_is_a_problem_that_names_the_route_meant(served: Served) -> None:
    typo = _problem(served.get(f"/v1/tasks/{served.waiting}/histroy"), 404, "not_found")
    assert typo["did_you_mean"] == "/v1/tasks/{task_id}/history" and "did you mean" in typo["detail"]
    assert _problem(served.get("/v1/task"), 404, "not_found")["did_you_mean"] == "/v1/tasks"
    assert "did_you_mean" not in _problem(served.get("/v1/nothing/like/it/at/all"), 404, "not_found")
    truncated = _problem(served.get(f"/v1/tasks/{served.waiting[:-2]}"), 404, "task_not_found")  # a short paste
    assert truncated["did_you_mean"] == served.waiting and f"did you mean {served.waiting!r}" in truncated["detail"]
    assert "did_you_mean" not in _problem(served.get("/v1/tasks/zzz"), 404, "task_not_found")
    wrong = _problem(served.client.delete("/v1/tasks", headers=served.headers()), 405, "method_not_allowed")
    assert "GET" in wrong["detail"]


def test_the_document_describes_every_answer(served: Served) -> None:
    doc = served.client.get("/openapi.json").json()
    ids = [op["operationId"] for path in doc["paths"].values() for op in path.values()]
    assert len(ids) == len(set(ids)) and all(i.isidentifier() and i.islower() and not i.endswith("_get") for i in ids)
    ours = {
        "whoami", "list_tasks", "get_task", "get_history", "get_state", "get_diff", "get_fork_tree", "fork_task",
        "rewind_task", "resume_task", "retry_task", "cancel_task", "list_inputs", "answer_input", "resolve_call",
        "list_sessions", "list_messages", "get_window", "get_user", "stream_events", "stream_task_events",
        "get_workers",
    }  # fmt: skip
    assert ours <= set(ids)
    assert doc["components"]["securitySchemes"]["bearer"] == {
        "type": "http", "scheme": "bearer", "description": "an API key: `tether keys create`"
    }  # fmt: skip
    assert doc["components"]["securitySchemes"]["tetherKey"]["name"] == "X-Tether-Key"
    get_task = doc["paths"]["/v1/tasks/{task_id}"]["get"]
    assert {"bearer": []} in get_task["security"] and {"tetherKey": []} in get_task["security"]
    for path, ops in doc["paths"].items():
        for op in ops.values():
            if op["operationId"] not in ours:
                continue
            ok = op["responses"].get("200") or op["responses"].get("201") or op["responses"].get("202")
            schema = ok["content"].get("application/json", {}).get("schema")
            streams = set(ok["content"]) == {"text/event-stream"} and path.endswith("/events")
            assert streams or (schema and schema != {"type": "object"} and "additionalProperties" not in schema), (
                path, schema,
            )  # fmt: skip
            assert set(op["responses"]["404"]["content"]) == {PROBLEM}
    assert doc["paths"]["/v1/tasks/{task_id}/retry"]["post"]["responses"]["409"]


def test_lists_share_one_envelope_and_page_on(served: Served) -> None:
    for n in range(3):
        served.app.start("trip", city=f"c{n}")
    first = served.get("/v1/tasks", params={"limit": 2, "status": "pending"}).json()
    assert set(first) == {"items", "total", "limit", "offset", "truncated", "next"}
    assert first["total"] == 3 and len(first["items"]) == 2 and first["next"] is not None
    second = served.get(first["next"]).json()
    assert len(second["items"]) == 1 and second["next"] is None
    assert {t["task_id"] for t in first["items"] + second["items"]} == {
        t["task_id"] for t in served.get("/v1/tasks", params={"status": "pending"}).json()["items"]
    }
    history = served.get(f"/v1/tasks/{served.waiting}/history", params={"limit": 2}).json()
    assert [e["seq"] for e in history["items"]] == [1, 2] and history["total"] > 2
    rest = served.get(history["next"]).json()
    assert [e["seq"] for e in rest["items"]] == [3, 4]
    for path in ("/v1/inputs", "/v1/sessions", "/v1/sessions/s1/messages"):
        assert {"items", "total", "limit", "offset", "truncated", "next"} <= set(served.get(path).json()), path


def test_summaries_carry_the_conversation_and_utc_times(served: Served) -> None:
    alone = served.app.start("chat", text="hi").task_id  # names no session: the task makes its own
    work(served.app)
    made = served.app.state(alone).session_id
    assert made is not None
    summaries = {t["task_id"]: t for t in served.get("/v1/tasks").json()["items"]}
    assert summaries[alone]["session_id"] == made and summaries[served.chatted]["session_id"] == "s1"
    task = served.get(f"/v1/tasks/{alone}").json()
    entry = served.get(f"/v1/tasks/{alone}/history").json()["items"][0]
    for moment in (
        task["summary"]["created_at"],
        task["summary"]["updated_at"],
        task["state"]["created_at"],
        entry["at"],
    ):
        assert moment.endswith("Z"), moment  # UTC, with its offset, whatever the server's zone
    from datetime import datetime

    assert datetime.fromisoformat(task["summary"]["created_at"]).utcoffset() == timedelta(0)


def test_a_summary_says_what_was_requested(served: Served) -> None:
    def requested(task_id: str) -> Any:
        return served.get(f"/v1/tasks/{task_id}").json()["summary"]["requested"]

    assert requested(served.waiting) is None
    served.post(f"/v1/tasks/{served.waiting}/inputs/approve", json={"value": {"yes": True}})
    assert requested(served.waiting) == "answer"
    served.post(f"/v1/tasks/{served.failed}/retry")
    assert requested(served.failed) == "retry"
    fresh = served.app.start("trip", city="Rome").task_id
    assert requested(fresh) is None
    served.post(f"/v1/tasks/{fresh}/cancel")
    assert requested(fresh) == "cancel"
    work(served.app)
    assert requested(served.waiting) is None and requested(fresh) is None


def test_streams_carry_ids_a_reconnect_resumes_from(served: Served) -> None:
    with LiveServer(served.asgi) as live, httpx.Client(base_url=live.base, headers=served.headers()) as http:
        with http.stream("GET", f"/v1/tasks/{served.waiting}/events") as stream:
            assert stream.headers["cache-control"] == "no-cache" and stream.headers["x-accel-buffering"] == "no"
            lines = stream.iter_lines()
            assert next(lines).startswith("retry: ")
            ids = _ids_until(lines, count=2)
        assert ids == ["1", "2"]
        resumed = {**served.headers(), "Last-Event-ID": "4"}  # as an EventSource sends it when it reconnects
        with http.stream("GET", f"/v1/tasks/{served.waiting}/events", headers=resumed) as stream:
            assert _ids_until(stream.iter_lines(), count=1) == ["5"]
        with http.stream("GET", "/v1/events", headers={**served.headers(), "Last-Event-ID": "0"}) as stream:
            assert stream.headers["x-accel-buffering"] == "no"
            got = _ids_until(stream.iter_lines(), count=3)  # every watched task changed since time 0
        assert got == sorted(got, key=float)


def _ids_until(lines: Iterator[str], *, count: int) -> list[str]:
    ids: list[str] = []
    for line in lines:
        if line.startswith("id: "):
            ids.append(line[4:])
            if len(ids) == count:
                return ids
    raise AssertionError(f"the stream ended after {ids}")


def test_scripts_post_to_a_loopback_server_without_keys_and_browsers_still_need_csrf() -> None:
    app, _ = build("memory://")
    try:
        task = app.start("trip", city="Oslo").task_id
        work(app)
        asgi = create_app(app.store, no_auth=True)
        with TestClient(asgi, base_url="http://127.0.0.1") as script:
            answered = script.post(f"/v1/tasks/{task}/inputs/approve", json={"value": {"yes": True}})
            assert answered.status_code == 200, answered.text
            assert script.post(f"/v1/tasks/{task}/cancel").status_code == 202
            page = {"Origin": "http://evil.example", "Content-Type": "application/json"}
            forged = script.post(f"/v1/tasks/{task}/cancel", headers=page)
            assert forged.status_code == 403 and forged.json()["code"] == "csrf_failed"
            fetched = script.post(f"/v1/tasks/{task}/cancel", headers={"Sec-Fetch-Site": "same-origin"})
            assert fetched.status_code == 403  # a browser's own page sends the header too
            assert app.history(task)[-1].type == "CancelRequested"
        asgi.state.feed.stop()
    finally:
        app.close()
