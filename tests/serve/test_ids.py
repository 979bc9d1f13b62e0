"""Every id the Python API accepts is reachable over HTTP and in the inspector, linked
percent-encoded and shown with its invisible characters visible."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from typing import Any

import pytest

import tether
from tests.serve._agents import work
from tests.serve.conftest import Served
from tether.serve._ids import segment, visible

ODD_IDS = [
    "Aa/b",
    "a/b/history",  # looks like a route beneath a task
    "X?y",
    "frag#1",
    "100%",
    "a%2Fb",  # the text %2F, not a slash
    "..",
    ".",
    "../x",
    "sp ace ",
    "a\\b",
    "ünïcödé/名前",
    "pay\u202eevil.exe",  # a right-to-left override: looks like 'payexe.live'
    "tab\tnew\nline",
    "zero\u200bwidth",
    "~1",
]
BIDI = "\u202e"


@pytest.fixture
def odd(served: Served) -> list[str]:
    """One waiting trip under each odd id (another tenant's key sees none of them)."""
    for task_id in ODD_IDS:
        served.app.start("trip", city="Lisbon", task_id=task_id)
    work(served.app)
    return ODD_IDS


def test_the_segment_of_an_id_is_one_percent_encoded_path_segment() -> None:
    assert segment("a/b?c#d") == "a%2Fb%3Fc%23d"
    assert segment("100%") == "100%25"
    assert segment("..") == "%00.." and segment(".") == "%00."  # what browsers would remove
    assert segment("...") == "..."
    for task_id in ODD_IDS:
        assert re.fullmatch(r"[A-Za-z0-9%._~-]+", segment(task_id)), task_id


def test_every_id_reaches_every_task_route(served: Served, odd: list[str]) -> None:
    for task_id in odd:
        base = f"/v1/tasks/{segment(task_id)}"
        got = served.get(base)
        assert got.status_code == 200, (task_id, got.text)
        assert got.json()["summary"]["task_id"] == task_id
        assert served.get(f"{base}/history").json()["task_id"] == task_id
        assert served.get(f"{base}/state", params={"at": 2}).json()["task_id"] == task_id
        assert served.get(f"{base}/tree").json()["task_id"] == task_id
        assert served.get(f"{base}/diff", params={"a": 1, "b": 2, "other": task_id}).status_code == 200
        assert served.client.get(base, headers=served.headers(served.other_key)).status_code == 404
    # Sent as any client sends them: ".." percent-encoded (httpx, curl) reaches the task too.
    assert served.get("/v1/tasks/%2E%2E").json()["summary"]["task_id"] == ".."
    # The routes beneath a task still route: 'a/b/history' is a task, not the history of 'a/b'.
    assert served.get(f"/v1/tasks/{segment('a/b')}/history").status_code == 404
    assert served.get(f"/v1/tasks/{segment('a/b/history')}").json()["summary"]["task_id"] == "a/b/history"


def test_writes_reach_an_odd_id_and_its_input_key(served: Served) -> None:
    app = served.app

    @app.task
    def asks(ctx: tether.TaskContext) -> Any:
        return ctx.wait_for_input("yes/no?", prompt="go?", schema={"type": "boolean"})

    task_id = "q/1?#"
    app.start(asks, task_id=task_id)
    work(app)
    answered = served.post(f"/v1/tasks/{segment(task_id)}/inputs/{segment('yes/no?')}", json={"value": True})
    assert answered.status_code == 200, answered.text
    work(app)
    assert app.state(task_id).output is True
    forked = served.post(f"/v1/tasks/{segment(task_id)}/fork", json={"at": 2, "new_id": "fork/of?q"})
    assert forked.status_code == 201 and forked.json()["summary"]["parent_id"] == task_id
    assert served.post(f"/v1/tasks/{segment('fork/of?q')}/cancel").status_code == 202


def test_sessions_and_users_with_odd_ids(served: Served) -> None:
    served.app.session("chat/42?", user_id="u/1").add("user", "hi")
    served.app.user("u/1").set("seat", "window")
    messages = served.get(f"/v1/sessions/{segment('chat/42?')}/messages").json()
    assert messages["session_id"] == "chat/42?" and messages["items"][0]["content"] == "hi"
    assert served.get(f"/v1/sessions/{segment('chat/42?')}/window").status_code == 200
    assert served.get(f"/v1/users/{segment('u/1')}").json()["document"] == {"seat": "window"}


class _Page(HTMLParser):
    """A page's text as shown (not its attributes), and its links."""

    def __init__(self) -> None:
        super().__init__()
        self.text: list[str] = []
        self.links: list[str] = []
        self._skip = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "script":
            self._skip += 1
        if tag == "a":
            self.links.extend(v for k, v in attrs if k == "href" and v)

    def handle_endtag(self, tag: str) -> None:
        if tag == "script":
            self._skip -= 1

    def handle_data(self, data: str) -> None:
        if not self._skip:
            self.text.append(data)


def _parse(body: str) -> _Page:
    page = _Page()
    page.feed(body)
    return page


def _no_hidden_characters(page: _Page) -> None:
    shown = "".join(page.text)
    hidden = sorted({f"U+{ord(c):04X}" for c in shown if not c.isprintable() and c not in "\n"})
    assert hidden == [], hidden


def test_the_inspector_links_every_id_encoded_and_shows_it_safely(served: Served, odd: list[str]) -> None:
    served.client.post(
        "/login", content=f"key={served.key}", headers={"Content-Type": "application/x-www-form-urlencoded"}
    )
    listing = _parse(served.client.get("/").text)
    for task_id in odd:
        assert f"/tasks/{segment(task_id)}" in listing.links, task_id
    assert "/tasks/X" not in listing.links  # 'X?y' is linked as itself, not as task 'X' with a query
    _no_hidden_characters(listing)
    assert "pay\\u202eevil.exe" in "".join(listing.text)

    for task_id in odd:
        response = served.client.get(f"/tasks/{segment(task_id)}")
        assert response.status_code == 200 and 'class="error"' not in response.text, (task_id, response.text[-300:])
        page = _parse(response.text)
        assert visible(task_id) in "".join(page.text), task_id  # the heading
        assert f'data-task="{_attr(task_id)}"' in response.text  # what the script sends back: the id itself
        _no_hidden_characters(page)
    inbox = _parse(served.client.get("/inbox").text)
    assert {f"/tasks/{segment(t)}" for t in odd} <= set(inbox.links)
    _no_hidden_characters(inbox)
    head = served.client.get(f"/tasks/{segment('pay' + BIDI + 'evil.exe')}").text.split("</title>")[0]
    assert BIDI not in head and "pay\\u202eevil.exe" in head  # nor in the title


def _attr(value: str) -> str:
    import html

    return html.escape(value, quote=True)
