"""What a browser or a stranger can do to the server: CSRF headers of any alphabet, a log out posted
by another site, errors while the store is away; and what a fork with new inputs needs."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import httpx
import pytest
from starlette.testclient import TestClient

import tether
from tests.serve._agents import work
from tests.serve.conftest import Served
from tether.serve import create_app
from tether.serve.keys import KeyRing
from tether.serve.problems import problem_body

FORM = {"Content-Type": "application/x-www-form-urlencoded"}


def _log_in(served: Served) -> httpx.Client:
    client = served.client
    login = client.post("/login", content=f"key={served.key}", headers=FORM, follow_redirects=False)
    assert login.status_code == 303
    return client


@pytest.mark.parametrize("where", ["header", "cookie", "both"])
def test_a_csrf_token_of_another_alphabet_is_refused_not_a_500(served: Served, where: str) -> None:
    client = _log_in(served)
    token = client.cookies["tether_csrf"]
    odd = "jeton-é-ü-漢".encode()  # sent as raw bytes: a header can hold any
    key = client.cookies["tether_key"]
    cookie = f"tether_key={key}; tether_csrf={odd.decode('latin-1') if where != 'header' else token}"
    headers = {
        "Cookie": cookie.encode("latin-1"),
        "X-Tether-CSRF": odd if where != "cookie" else token.encode(),
    }
    path = f"/v1/tasks/{served.waiting}/cancel"
    bare = TestClient(served.asgi, base_url="http://127.0.0.1")  # no cookie jar of its own
    refused = bare.post(path, headers=headers)  # type: ignore[arg-type]
    if where == "both":  # the same bytes in both: they match, as any token equal to its cookie does
        assert refused.status_code == 202, refused.text
        return
    assert refused.status_code == 403, refused.text
    assert refused.json()["code"] == "csrf_failed"
    assert served.app.state(served.waiting).cancel_reason is None


def test_log_out_needs_the_csrf_token(served: Served) -> None:
    client = _log_in(served)
    # Another site's form posts no token (it can read neither the cookie nor the page): refused.
    forged = client.post("/logout", content="", headers=FORM, follow_redirects=False)
    assert forged.status_code == 403
    forged = client.post("/logout", content="csrf=guess", headers=FORM, follow_redirects=False)
    assert forged.status_code == 403
    assert client.get("/v1/whoami").json()["name"] == "alice"  # still logged in

    # The page's own form carries it.
    page = client.get("/").text
    form = re.search(r'<form method="post" action="/logout"><input type="hidden" name="csrf" value="([^"]+)">', page)
    assert form is not None and form[1] == client.cookies["tether_csrf"]
    out = client.post("/logout", content=f"csrf={form[1]}", headers=FORM, follow_redirects=False)
    assert out.status_code == 303 and out.headers["location"] == "/login"
    assert "tether_key=" in out.headers["set-cookie"] and "Max-Age=0" in out.headers["set-cookie"]


def test_the_first_page_a_browser_sees_has_the_token_it_sets(served: Served) -> None:
    """A page served to a browser without a CSRF cookie yet sets one: its log out form carries that one."""
    with TestClient(served.asgi, base_url="http://127.0.0.1") as fresh:
        fresh.post("/login", content=f"key={served.key}", headers=FORM, follow_redirects=False)
        fresh.cookies.delete("tether_csrf")
        page = fresh.get("/")
        field = re.search(r'name="csrf" value="([^"]+)"', page.text)
        assert field is not None and page.cookies["tether_csrf"] == field[1]


# ---------------------------------------------------------------- the store away


class _Proxy:
    """tests/_tcp_proxy.py in a process of its own, between the server and PostgreSQL."""

    def __init__(self, target: str) -> None:
        parts = urlsplit(target)
        script = Path(__file__).parents[1] / "_tcp_proxy.py"
        self.process = subprocess.Popen(
            [sys.executable, str(script), parts.hostname or "127.0.0.1", str(parts.port or 5432)],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.process.stdout is not None
        self.port = int(self.process.stdout.readline())

    def url(self, base: str) -> str:
        parts = urlsplit(base)
        user = parts.netloc.rpartition("@")[0]
        through = urlunsplit(parts._replace(netloc=f"{user}@127.0.0.1:{self.port}"))
        return through + "&connect_timeout=2&query_timeout=2&give_up_after=1.5"

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
        self.process.wait()
        if self.process.stdout is not None:
            self.process.stdout.close()


@pytest.fixture
def pg() -> Iterator[str]:
    from tests.conftest import pg_url

    yield from pg_url()


@pytest.fixture
def proxy(pg: str) -> Iterator[_Proxy]:
    running = _Proxy(pg)
    yield running
    running.kill()


def test_while_the_store_is_away_a_stranger_learns_nothing_of_it(pg: str, proxy: _Proxy) -> None:
    writer = tether.App(pg)
    secret, _ = KeyRing(writer.store).create(tenant="default", name="alice")
    asgi = create_app(proxy.url(pg))
    schema = pg.rpartition("schema=")[2]
    secrets_of_the_store = [schema, str(proxy.port), "127.0.0.1", "postgres", "/test", "PostgreSQL"]
    try:
        with TestClient(asgi, base_url="http://127.0.0.1") as client:
            assert client.get("/v1/whoami", headers={"Authorization": f"Bearer {secret}"}).status_code == 200
            proxy.kill()  # the store is away: nothing listens where the server reaches it
            made_up = {"Authorization": "Bearer tk_0123456789ab_made-up"}
            answers = [
                client.get("/v1/tasks", headers=made_up),
                client.get("/v1/whoami", headers={"Authorization": f"Bearer {secret}"}),  # checked: away too
                client.post("/login", content="key=tk_0123456789ab_made-up", headers=FORM, follow_redirects=False),
                client.get("/", headers={"Cookie": "tether_key=tk_0123456789ab_made-up"}, follow_redirects=False),
            ]
            for answer in answers:
                assert answer.status_code == 503, answer.text
                away = "the server cannot answer now; try again shortly"
                assert answer.json() == problem_body(503, "store_unavailable", away, answer.request.url.path)
                assert not [s for s in secrets_of_the_store if s in answer.text], answer.text
    finally:
        asgi.state.feed.stop()
        asgi.state.store.close()
        writer.close()


# ---------------------------------------------------------------- a fork with new inputs


def test_a_server_without_the_code_does_not_offer_inputs(served: Served) -> None:
    schema = served.client.get("/openapi.json").json()
    bodies = {name: body for name, body in schema["components"]["schemas"].items() if name.startswith("Fork")}
    assert list(bodies) == ["ForkBody"] and set(bodies["ForkBody"]["properties"]) == {"at", "new_id"}
    refused = served.post(f"/v1/tasks/{served.waiting}/fork", json={"at": 2, "inputs": {"city": "Rome"}})
    assert refused.status_code == 422, refused.text
    assert "no task code" in refused.json()["errors"][0]["msg"]
    assert served.post(f"/v1/tasks/{served.waiting}/fork", json={"at": 2}).status_code == 201


@pytest.fixture
def with_code(served: Served) -> Iterator[TestClient]:
    """The server mounted with the workers' App: it has the tasks' code."""
    asgi = create_app(served.app)
    with TestClient(asgi, base_url="http://127.0.0.1", headers=served.headers()) as client:
        yield client
    asgi.state.feed.stop()


def test_a_server_given_the_code_forks_with_new_inputs_checked_against_the_signature(
    served: Served, with_code: TestClient
) -> None:
    schema = with_code.get("/openapi.json").json()["components"]["schemas"]
    assert "inputs" in schema["ForkWithInputsBody"]["properties"]
    path = f"/v1/tasks/{served.waiting}/fork"
    forked = with_code.post(path, json={"at": 2, "inputs": {"city": "Rome"}})
    assert forked.status_code == 201, forked.text
    fork = forked.json()["summary"]["task_id"]
    assert forked.json()["state"]["inputs"] == {"city": "Rome"}
    work(served.app)  # a worker reruns it from event 2 with the new inputs
    assert served.app.state(fork).waiting.prompt == "Book Rome for 120?"  # type: ignore[union-attr]

    wrong = with_code.post(path, json={"at": 2, "inputs": {"city": "Rome", "town": "Lazio"}})
    assert wrong.status_code == 400 and "town" in wrong.json()["message"], wrong.text
    missing = with_code.post(path, json={"at": 2, "inputs": {}})
    assert missing.status_code == 400 and "city" in missing.json()["message"], missing.text


def test_a_task_type_the_servers_app_does_not_register_is_refused_saying_so(served: Served) -> None:
    other = tether.App(served.app.store)  # an app with no tasks of its own
    asgi = create_app(other)
    with TestClient(asgi, base_url="http://127.0.0.1", headers=served.headers()) as client:
        refused = client.post(f"/v1/tasks/{served.waiting}/fork", json={"at": 2, "inputs": {"city": "Rome"}})
    asgi.state.feed.stop()
    assert refused.status_code == 409 and refused.json()["code"] == "task_definition"
    assert "does not register task type 'trip'" in refused.json()["message"]
    assert "@app.task" not in refused.json()["message"]
