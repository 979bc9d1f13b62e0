"""tether serve for operators: /healthz and /readyz open to probes, /readyz bounded by the store's
answer, /metrics in Prometheus text behind the API's auth, the usage API, one access-log line per request."""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from fastapi.testclient import TestClient

import tether
from tether.errors import StoreUnavailableError
from tether.serve import create_app, operations
from tether.serve.keys import KeyRing


@pytest.fixture
def app() -> Iterator[tether.App]:
    app = tether.App("memory://")

    @app.tool
    def model(q: str) -> dict:
        return {"model": "claude-x", "type": "message", "usage": {"input_tokens": 30, "output_tokens": 4}}

    @app.task
    def ask(ctx: tether.TaskContext, q: str) -> str:
        return ctx.call(model, q)["model"]

    app.run(ask, "hi", task_id="t1", user_id="ada")
    yield app
    app.close()


def client(app: tether.App, *, no_auth: bool) -> TestClient:
    return TestClient(create_app(app, no_auth=no_auth), base_url="http://127.0.0.1")


def test_probes_answer_without_a_key_and_metrics_does_not(app: tether.App) -> None:
    served = client(app, no_auth=False)
    assert served.get("/healthz").json() == {"status": "ok"}
    ready = served.get("/readyz")
    assert ready.status_code == 200 and ready.json()["status"] == "ready"
    assert served.get("/metrics").status_code == 401
    assert served.get("/v1/usage").status_code == 401
    secret, _ = KeyRing(app.store).create(tenant="default", name="prometheus")
    scraped = served.get("/metrics", headers={"Authorization": f"Bearer {secret}"})
    assert scraped.status_code == 200 and scraped.headers["content-type"].startswith("text/plain; version=0.0.4")
    assert 'tether_tasks{status="completed"} 1.0' in scraped.text.splitlines()


def test_readyz_says_unavailable_when_the_store_is_slow_or_down(
    app: tether.App, monkeypatch: pytest.MonkeyPatch
) -> None:
    served = client(app, no_auth=True)
    release = threading.Event()
    monkeypatch.setattr(operations, "READY_WITHIN", 0.05)
    monkeypatch.setattr(app.store, "count_tasks", lambda *a, **k: release.wait(5))
    try:
        slow = served.get("/readyz")
    finally:
        release.set()
    assert slow.status_code == 503 and "took over 0.05s" in slow.json()["reason"]

    def down(*a: object, **k: object) -> int:
        raise StoreUnavailableError("connection to db.internal:5432 refused")

    monkeypatch.setattr(app.store, "count_tasks", down)
    refused = served.get("/readyz")
    assert refused.status_code == 503 and refused.json()["reason"] == "the store refused (store_unavailable)"
    assert "db.internal" not in refused.text  # an open endpoint never repeats the store's words
    assert served.get("/healthz").status_code == 200


def test_usage_over_http(app: tether.App) -> None:
    served = client(app, no_auth=True)
    task = served.get("/v1/tasks/t1/usage").json()
    assert task["own"]["input_tokens"] == 30 and task["own"]["output_tokens"] == 4
    assert task["calls"][0]["model"] == "claude-x" and task["inherited"]["calls"] == 0
    by_user = served.get("/v1/usage", params={"by": "user"}).json()
    assert by_user["groups"]["ada"]["total_tokens"] == 34
    bad = served.get("/v1/usage", params={"by": "colour"})
    assert bad.status_code == 400 and "task, type, user, session, model, day" in bad.json()["message"]
    assert served.get("/v1/usage", params={"since": "yesterday"}).status_code == 400
    assert served.get("/v1/tasks/nope/usage").status_code == 404
    typo = served.get("/v1/tasks/t1x/usage").json()  # close to t1: said, as every task route says it
    assert typo["code"] == "task_not_found" and typo["did_you_mean"] == "t1", typo


def test_usage_bodies_are_typed_and_give_times_in_utc(app: tether.App) -> None:
    served = client(app, no_auth=True)
    spent = app.usage("t1").calls[0].at
    call = served.get("/v1/tasks/t1/usage").json()["calls"][0]
    assert call["at"] == datetime.fromtimestamp(spent, UTC).isoformat().replace("+00:00", "Z")  # not epoch seconds
    report = served.get("/v1/usage", params={"since": "7d"}).json()
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT[\d:.]+Z", report["since"]) and report["total"]["total_tokens"] == 34
    schemas = served.get("/openapi.json").json()["components"]["schemas"]
    paths = served.get("/openapi.json").json()["paths"]
    for path, model in (("/v1/tasks/{task_id}/usage", "TaskUsageBody"), ("/v1/usage", "UsageReportBody")):
        body = paths[path]["get"]["responses"]["200"]["content"]["application/json"]["schema"]
        assert body == {"$ref": f"#/components/schemas/{model}"}
    assert schemas["CallUsageBody"]["properties"]["at"]["format"] == "date-time"


def test_one_access_line_per_request(app: tether.App, caplog: pytest.LogCaptureFixture) -> None:
    served = client(app, no_auth=True)
    with caplog.at_level(logging.INFO, logger="tether.serve.access"):
        served.get("/v1/tasks/nope/usage?secret=1")
    lines = [r for r in caplog.records if r.name == "tether.serve.access"]
    assert len(lines) == 1
    line = lines[0]
    assert (line.http_method, line.http_path, line.http_status) == ("GET", "/v1/tasks/nope/usage", 404)  # type: ignore[attr-defined]
    assert line.tether_tenant == "default" and line.duration_s >= 0  # type: ignore[attr-defined]
    assert "secret" not in line.getMessage()
