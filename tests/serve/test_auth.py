"""Keys, tenants, CSRF and the open mode: every endpoint with no key, a wrong key, another tenant's key."""

from __future__ import annotations

from typing import Any

from starlette.testclient import TestClient

from tests.serve._agents import build
from tests.serve.conftest import Served
from tether.serve import create_app
from tether.serve.keys import KeyRing


def endpoints(s: Served) -> list[tuple[str, str, Any]]:
    """One call of every /v1 endpoint, on tenant ``default``'s things."""
    w = s.waiting
    return [
        ("GET", "/v1/whoami", None),
        ("GET", "/v1/tasks", None),
        ("GET", "/v1/workers", None),
        ("GET", f"/v1/tasks/{w}", None),
        ("GET", f"/v1/tasks/{w}/history", None),
        ("GET", f"/v1/tasks/{w}/state?at=2", None),
        ("GET", f"/v1/tasks/{w}/diff?a=1&b=2", None),
        ("GET", f"/v1/tasks/{w}/tree", None),
        ("POST", f"/v1/tasks/{w}/fork", {"at": 2}),
        ("POST", f"/v1/tasks/{w}/rewind", {"to": 3}),
        ("POST", f"/v1/tasks/{w}/resume", None),
        ("POST", f"/v1/tasks/{s.failed}/retry", None),
        ("POST", f"/v1/tasks/{w}/cancel", {"reason": "x"}),
        ("GET", "/v1/inputs", None),
        ("POST", f"/v1/tasks/{w}/inputs/approve", {"value": {"yes": True}}),
        ("POST", f"/v1/tasks/{w}/calls/1/resolve", {"happened": False}),
        ("GET", "/v1/sessions", None),
        ("GET", "/v1/sessions/s1/messages", None),
        ("GET", "/v1/sessions/s1/window", None),
        ("GET", "/v1/users/u1", None),
        ("GET", "/v1/events", None),
        ("GET", f"/v1/tasks/{w}/events", None),
        ("GET", f"/v1/tasks/{w}/usage", None),
        ("GET", "/v1/usage", None),
        ("GET", "/metrics", None),
    ]


# Open to anyone, key or not: a probe carries no key, and they say nothing of any tenant
# (tests/serve/test_operations.py checks what they say).
PROBES = [("GET", "/healthz"), ("GET", "/readyz")]


def test_the_list_covers_every_endpoint(served: Served) -> None:
    documented = {
        (method.upper(), path)
        for path, ops in served.client.get("/openapi.json").json()["paths"].items()
        for method in ops
    }
    listed = set(PROBES)
    for method, path, _ in endpoints(served):
        parts = path.split("?")[0].split("/")
        for route_method, route in documented:
            pattern = route.split("/")
            if (
                route_method == method
                and len(pattern) == len(parts)
                and all(a == b or a.startswith("{") for a, b in zip(pattern, parts, strict=True))
            ):
                listed.add((route_method, route))
    assert listed == documented


def _call(s: Served, method: str, path: str, body: Any, headers: dict[str, str]) -> Any:
    return s.client.request(method, path, json=body, headers=headers)


def test_no_key_or_a_wrong_key_is_401_everywhere(served: Served) -> None:
    # The three ways to fail on one server: a refused request changes nothing the next one sees.
    for headers in [{}, {"Authorization": "Bearer tk_0000_nope"}, {"X-Tether-Key": "garbage"}]:
        for method, path, body in endpoints(served):
            response = _call(served, method, path, body, headers)
            assert response.status_code == 401, (headers, method, path, response.text)
            assert response.json()["code"] == "unauthorized", (headers, method, path, response.text)


def test_another_tenants_key_sees_and_changes_nothing(served: Served) -> None:
    before = {t: served.app.state(t).version for t in (served.waiting, served.failed, served.chatted)}
    mallory = served.headers(served.other_key)
    for method, path, body in endpoints(served):
        if path.endswith("/events") and path != "/v1/events":
            response = _call(served, method, path, body, mallory)
            assert response.status_code == 404
            continue
        if path == "/v1/events":
            continue  # a live stream: its tenant scoping is checked in test_live.py
        response = _call(served, method, path, body, mallory)
        if path in ("/v1/tasks", "/v1/inputs", "/v1/sessions"):
            assert response.status_code == 200 and response.json()["items"] == [], path
        elif path == "/v1/usage":
            assert response.status_code == 200 and response.json()["tasks"] == 0, response.text
        elif path == "/metrics":  # the process's counters; of tasks, only the key's own tenant's
            assert response.status_code == 200 and not any(t in response.text for t in before), response.text
        elif path == "/v1/whoami":
            assert response.json() == {"tenant": "other", "name": "mallory"}
        elif path == "/v1/workers":  # the fixture's workers ran for this tenant, not the other
            assert response.status_code == 200 and response.json()["last_seen"] is None, response.text
        else:
            assert response.status_code == 404, (method, path, response.text)
    after = {t: served.app.state(t).version for t in before}
    assert after == before


def test_a_revoked_key_is_refused(served: Served) -> None:
    ring = KeyRing(served.app.store)
    key_id = served.key.split("_")[1]
    assert served.get("/v1/whoami").status_code == 200
    ring.revoke(key_id)
    assert served.get("/v1/whoami").status_code == 401


def test_keys_are_stored_as_hashes_only(served: Served) -> None:
    from tether.serve.keys import SYSTEM_TENANT
    from tether.store import TaskFilter

    store = served.app.store
    rows = store.list_tasks(SYSTEM_TENANT, TaskFilter(internal=True), limit=10)
    stored = b"".join(
        e.data if isinstance(e.data, bytes) else e.data.encode()
        for r in rows
        for e in store.read_events(SYSTEM_TENANT, r.task_id)
    )
    # The secret part is everything after the prefix and the key id (it may itself hold "_").
    assert served.key.encode() not in stored and served.key.split("_", 2)[2].encode() not in stored
    assert store.list_tasks("default", TaskFilter(internal=True), limit=100)  # the tenant's own streams ...
    assert all(r.type != "tether.keys" for r in store.list_tasks("default", TaskFilter(internal=True), limit=100))


def test_browser_writes_need_the_csrf_header(served: Served) -> None:
    client = served.client
    login = client.post(
        "/login",
        content=f"key={served.key}",
        headers={"Content-Type": "application/x-www-form-urlencoded"},
        follow_redirects=False,
    )
    assert login.status_code == 303 and login.headers["location"] == "/"
    assert "httponly" in login.headers.get("set-cookie", "").lower()
    assert client.get("/v1/whoami").json()["name"] == "alice"  # the cookie is enough to read
    path = f"/v1/tasks/{served.waiting}/fork"
    refused = client.post(path, json={"at": 2})
    assert refused.status_code == 403 and refused.json()["code"] == "csrf_failed"
    forged = client.post(path, json={"at": 2}, headers={"X-Tether-CSRF": "guess"})
    assert forged.status_code == 403
    token = client.cookies["tether_csrf"]
    assert client.post(path, json={"at": 2}, headers={"X-Tether-CSRF": token}).status_code == 201


def test_login_refuses_a_wrong_key_and_another_origin(served: Served) -> None:
    form = {"Content-Type": "application/x-www-form-urlencoded"}
    wrong = served.client.post("/login", content="key=tk_1_2", headers=form, follow_redirects=False)
    assert wrong.headers["location"] == "/login?error=1"
    cross = served.client.post(
        "/login", content=f"key={served.key}", headers={**form, "Origin": "http://evil.example"}, follow_redirects=False
    )
    assert cross.status_code == 403
    assert served.client.get("/", follow_redirects=False).headers["location"] == "/login"


def test_pages_send_a_strict_content_policy(served: Served) -> None:
    page = served.client.get("/login")
    assert "script-src 'self'" in page.headers["content-security-policy"]
    assert page.headers["x-frame-options"] == "DENY"


def test_no_auth_answers_loopback_hosts_only(tmp_path: Any) -> None:
    app, _ = build(f"sqlite:///{tmp_path / 't.db'}")
    asgi = create_app(f"sqlite:///{tmp_path / 't.db'}", no_auth=True)
    with TestClient(asgi, base_url="http://127.0.0.1:8700") as client:
        assert client.get("/v1/whoami").json() == {"tenant": "default", "name": "no-auth"}
        rebound = client.get("/v1/whoami", headers={"Host": "attacker.example"})
        assert rebound.status_code == 403 and rebound.json()["code"] == "bad_host"
        task = app.start("trip", city="Oslo").task_id
        refused = client.post(f"/v1/tasks/{task}/cancel", headers={"Origin": "http://127.0.0.1:8700"})
        assert refused.status_code == 403  # even without keys, a browser write needs the CSRF token
    asgi.state.store.close()
    app.close()


def test_the_cli_refuses_no_auth_off_loopback(tmp_path: Any) -> None:
    from click.testing import CliRunner

    from tether.cli import main

    result = CliRunner().invoke(main, ["serve", "--db", str(tmp_path / "t.db"), "--host", "0.0.0.0", "--no-auth"])
    assert result.exit_code != 0 and "--no-auth is refused on 0.0.0.0" in result.output


def test_keys_cli_prints_the_key_once(tmp_path: Any) -> None:
    from click.testing import CliRunner

    from tether.cli import main

    db = str(tmp_path / "k.db")
    from tether import App

    App(db).close()  # keys go into an existing store: no command but demo creates one
    runner = CliRunner()
    made = runner.invoke(main, ["keys", "create", "--db", db, "--tenant", "acme", "--name", "ci"])
    assert made.exit_code == 0, made.output
    secret = made.stdout.strip().splitlines()[0]
    assert secret.startswith("tk_")
    listed = runner.invoke(main, ["keys", "list", "--db", db, "--json"])
    assert secret not in listed.output and '"tenant": "acme"' in listed.output
