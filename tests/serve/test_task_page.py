"""The task page as a person reads it, in Debian's Chromium at a desktop width and at 390 px: its
first screen tells the story (status, what was requested, the worker, the latest event), the state
renders as a tree with the last event's changes marked, the transcript pairs each tool call with
its result, cancel asks first and then shows as requested, and everything works by keyboard."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.serve._agents import work
from tests.serve.conftest import LiveServer, Served
from tests.serve.test_inspector import ARGS, chromium, store_url  # noqa: F401 (fixtures)

WIDTHS = {"desktop": {"width": 1280, "height": 900}, "narrow": {"width": 390, "height": 844}}


@pytest.fixture
def browser(chromium: str) -> Iterator[Any]:  # noqa: F811
    from playwright.sync_api import expect, sync_playwright

    expect.set_options(timeout=15_000)
    with sync_playwright() as p:
        launched = p.chromium.launch(executable_path=chromium, args=ARGS, headless=True)
        yield launched
        launched.close()


def _shots(tmp_path: Path) -> Path:
    """Where the screenshots go: ``TETHER_SCREENSHOTS`` if set (to look at them), else the test's folder."""
    folder = Path(os.environ.get("TETHER_SCREENSHOTS") or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _open(browser: Any, live: LiveServer, served: Served, size: dict[str, int]) -> tuple[Any, Any, list[str]]:
    context = browser.new_context(viewport=size)
    tab = context.new_page()
    tab.set_default_timeout(15_000)
    problems: list[str] = []
    tab.on("pageerror", lambda exc: problems.append(f"script error: {exc}"))
    tab.on("response", lambda r: problems.append(f"{r.status} {r.url}") if r.status >= 400 else None)
    tab.goto(f"{live.base}/login")
    tab.fill("input[name=key]", served.key)
    tab.click("form.login button")
    return context, tab, problems


@pytest.mark.timeout(240)
@pytest.mark.parametrize("width", list(WIDTHS))
def test_the_first_screen_tells_the_story_and_cancel_asks_first(
    browser: Any, served: Served, tmp_path: Path, width: str
) -> None:
    from playwright.sync_api import expect

    task = served.waiting
    served.app.send_input(task, "approve", {"yes": True, "note": "aisle"}, actor="alice")
    version = served.app.state(task).version
    size = WIDTHS[width]
    with LiveServer(served.asgi) as live:
        context, tab, problems = _open(browser, live, served, size)
        tab.goto(f"{live.base}/tasks/{task}")
        story = tab.locator("#story")
        expect(story.locator(".pill.requested")).to_have_text("answered")  # not a bare awaiting_input
        expect(story.locator(".request")).to_contain_text("Answered by alice")
        expect(story.locator(".worker")).to_contain_text("worker")
        latest = story.locator(".latest")
        expect(latest).to_contain_text(f"#{version} InputReceived")
        expect(latest).to_be_in_viewport()  # the newest event is on the first screen
        newest = tab.locator("#timeline li").first
        assert newest.get_attribute("data-seq") == str(version)  # newest first
        if width == "desktop":
            expect(newest).to_be_in_viewport()
        when = latest.locator("time")
        expect(when).not_to_contain_text("UTC")  # relative, in the reader's terms
        assert "UTC" in (when.get_attribute("title") or "")  # the exact time on hover
        tree = tab.locator("#state-tree")
        expect(tree).to_contain_text(f'task_id: "{task}"')
        expect(tree.locator(".changed").first).to_be_visible()  # the last event's changes, marked
        assert "\\u000a" not in tab.locator("#diff").inner_text()  # the change list keeps its lines
        assert tab.evaluate("document.documentElement.scrollWidth") <= size["width"]  # nothing runs off the side
        calls = tab.locator("#calls .scroll")  # nor off its own box: at 390 px each call is a card of labelled lines
        assert calls.evaluate("el => el.scrollWidth <= el.clientWidth"), calls.evaluate("el => el.scrollWidth")
        if width == "narrow":
            expect(calls.locator("td[data-label=tool]").first).to_be_visible()
        # Cards or rows, the calls stay a table to a screen reader: its parts say their roles, which
        # some browsers stop inferring from the tags once CSS displays rows and cells as blocks.
        table = calls.locator("table.calls")
        assert table.get_attribute("role") == "table"
        cells = table.locator("tbody tr").first.locator("td")
        assert cells.count() >= 7 and all(cells.nth(i).get_attribute("role") == "cell" for i in range(cells.count()))
        assert table.locator("tbody tr[role=row]").count() == table.locator("tbody tr").count()
        assert table.locator("th").count() == table.locator("th[role=columnheader]").count() >= 7
        tab.screenshot(path=str(_shots(tmp_path) / f"task-answered-{width}.png"))
        calls.screenshot(path=str(_shots(tmp_path) / f"task-calls-{width}.png"))

        tab.get_by_role("button", name="Cancel…").click()  # cancel runs compensations: asked first
        dialog = tab.get_by_role("dialog", name="Cancel this task?")
        expect(dialog).to_be_visible()
        dialog.get_by_role("button", name="Keep it").click()
        expect(dialog).to_be_hidden()
        assert served.app.state(task).cancel_reason is None
        tab.get_by_role("button", name="Cancel…").click()
        dialog.get_by_label("Reason").fill("the trip is off")
        dialog.get_by_role("button", name="Yes, cancel it").click()
        expect(tab.locator("#action-result")).to_contain_text("Cancel requested")  # its outcome, at once
        expect(story.locator(".pill.requested")).to_have_text("cancel requested")
        expect(story.locator(".request")).to_contain_text("Cancel requested by alice")
        assert served.app.state(task).cancel_reason == "the trip is off"
        tab.screenshot(path=str(_shots(tmp_path) / f"task-cancel-requested-{width}.png"))
        context.close()
    assert problems == [], problems  # no script error, no 404 (the favicon included)


@pytest.mark.timeout(180)
def test_by_keyboard_with_labelled_controls_and_a_readable_failure(
    browser: Any, served: Served, tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    with LiveServer(served.asgi) as live:
        context, tab, problems = _open(browser, live, served, WIDTHS["narrow"])
        tab.goto(f"{live.base}/tasks/{served.failed}")
        failure = tab.locator("section.failure")
        expect(failure).to_contain_text("RuntimeError: the booking service is down")
        expect(failure.locator("details summary")).to_have_text("Traceback")
        text = failure.inner_text()
        assert "`" not in text and "--app" not in text and "MODULE:APP" not in text
        for absent in ("#decisions", "#output", "#conversation"):  # nothing to show: not shown
            expect(tab.locator(absent)).to_have_count(0)
        unlabelled = tab.evaluate(
            """[...document.querySelectorAll("input:not([type=hidden]), select, textarea, button")]
                .filter((c) => !(c.labels && c.labels.length) && !c.getAttribute("aria-label")
                               && !c.textContent.trim())
                .map((c) => c.outerHTML)"""
        )
        assert unlabelled == []
        point = tab.locator('#timeline li[data-seq="3"] button')
        point.focus()
        tab.keyboard.press("Enter")
        expect(tab.locator("#at")).to_have_text("#3")
        expect(tab.locator("#state-tree")).to_contain_text("version: 3")
        tab.get_by_role("button", name="Retry").focus()
        tab.keyboard.press("Enter")
        expect(tab.locator("#action-result")).to_contain_text("Retry requested")
        expect(tab.locator("#story .pill.requested")).to_have_text("retry requested")
        tab.screenshot(path=str(_shots(tmp_path) / "failed-retried-narrow.png"), full_page=True)
        assert tab.request.get(f"{live.base}/favicon.ico").status == 200
        context.close()
    assert problems == [], problems


@pytest.mark.timeout(120)
def test_the_transcript_pairs_each_tool_call_with_its_result(browser: Any, served: Served) -> None:
    from playwright.sync_api import expect

    task = served.app.start("tools", city="Porto", session_id="weather").task_id
    work(served.app)
    with LiveServer(served.asgi) as live:
        context, tab, problems = _open(browser, live, served, WIDTHS["desktop"])
        tab.goto(f"{live.base}/tasks/{task}")
        call = tab.locator("#conversation .tool-call")
        expect(call).to_have_count(1)
        expect(call).to_contain_text('weather({"city":"Porto"})')
        expect(call.locator(".call-id")).to_have_text("call_w1")
        expect(call.locator(".tool-result")).to_contain_text("18°C and sunny")  # under the call it answers
        expect(tab.locator("#conversation .msg")).to_have_count(3)  # user, assistant calling, assistant answering
        context.close()
    assert problems == [], problems


def test_the_story_says_whether_a_worker_is_alive_to_take_a_runnable_task_up(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The worker line reads the workers' liveness records: none alive (the fixture's workers ran
    and stopped) says so and how to start one, with the app the last worker ran when it said."""
    import time

    from tether.serve import _task_page
    from tether.store import WorkerRow

    def page(task_id: str) -> str:
        return served.client.get(f"/tasks/{task_id}", headers=served.headers()).text

    task = served.app.start("trip", city="Oslo").task_id  # pending, and no worker runs here
    first = page(task)
    assert 'data-alive="0"' in first and "no worker is running: the last one stopped" in first
    assert "<code>tether worker module:app</code>" in first  # the fixture's workers named no app
    now = time.time()
    store, tenant = served.app.store, served.app.tenant
    store.record_worker(tenant, WorkerRow("host:1:w", started_at=now - 5, seen_at=now, app="agents:app"))
    assert "Runnable: the next free worker takes it up (1 worker alive)." in page(task)
    monkeypatch.setattr(_task_page, "_IDLE", -1.0)  # as if it had waited past the time a worker takes
    assert "No worker has taken it up since" in page(task) and "1 worker alive, busy" in page(task)
    store.record_worker(tenant, WorkerRow("host:1:w", started_at=now - 900, seen_at=now - 600, app="agents:app"))
    fixtures = WorkerRow(served.app.worker_id, started_at=now - 900, seen_at=now - 700, stopped_at=now - 700)
    store.record_worker(tenant, fixtures)  # as if the fixture's workers had stopped before it went
    gone = page(task)
    assert "no worker has been seen for 10 min: run <code>tether worker agents:app</code>" in gone
    waiting = page(served.waiting)
    assert "No worker is needed until it is answered. Once it is, no worker has been seen for 10 min" in waiting
