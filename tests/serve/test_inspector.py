"""The web inspector in a real browser: Debian's chromium, driven by Playwright (never `playwright install`)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests import _prepare
from tests.serve._agents import work
from tests.serve.conftest import LiveServer, Served

ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.fixture(scope="session")
def chromium() -> str:
    """Debian's chromium, installed with apt-get when it is missing (the tests never skip for it)."""
    try:
        return _prepare.chromium()
    except _prepare.Missing as exc:
        pytest.fail(str(exc))


@pytest.fixture(params=["sqlite"])
def store_url(request: pytest.FixtureRequest, tmp_path: Any) -> Any:
    yield f"sqlite:///{tmp_path / 'tether.db'}"


@pytest.fixture
def page(chromium: str, served: Served) -> Iterator[Any]:
    from playwright.sync_api import expect, sync_playwright

    expect.set_options(timeout=15_000)  # expect's own default (5 s) is not the page's
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=ARGS, headless=True)
        context = browser.new_context(viewport={"width": 1400, "height": 1000})
        tab = context.new_page()
        tab.set_default_timeout(15_000)
        errors: list[str] = []
        tab.on("pageerror", lambda exc: errors.append(str(exc)))
        yield tab
        context.close()
        browser.close()
        assert errors == [], errors


@pytest.mark.timeout(300)
def test_inspect_answer_and_fork_in_a_browser(page: Any, served: Served, tmp_path: Path) -> None:
    from playwright.sync_api import expect

    shots = tmp_path / "screenshots"
    shots.mkdir()
    with LiveServer(served.asgi) as live:
        page.goto(f"{live.base}/")
        assert page.url.endswith("/login")  # no key, no inspector
        page.fill("input[name=key]", served.key)
        page.click("form.login button")
        expect(page.locator("#tasks tbody tr")).to_have_count(3)
        expect(page.locator(f'tr[data-task="{served.waiting}"] td.status')).to_have_text("awaiting_input")
        page.screenshot(path=str(shots / "1-task-list.png"), full_page=True)

        # The list is live: a task started elsewhere appears without a reload.
        newcomer = served.app.start("trip", city="Porto").task_id
        # (Pushed by the change feed, whose wake-up and re-listing a loaded machine can slow past
        # the default 5 s: waited for up to 20 s, still without a reload.)
        expect(page.locator(f'tr[data-task="{newcomer}"]')).to_have_count(1, timeout=20_000)
        work(served.app)
        expect(page.locator(f'tr[data-task="{newcomer}"] td.status')).to_have_text("awaiting_input", timeout=20_000)
        page.fill("#search", "brok")
        expect(page.locator("#tasks tbody tr:visible")).to_have_count(1)
        page.fill("#search", "")

        # A task: click a point of the timeline, see the state there and the diff from the point before.
        page.click(f'a[href="/tasks/{served.waiting}"]')
        expect(page.locator("#task h1")).to_have_text(served.waiting)
        page.click('#timeline li[data-seq="3"]')
        expect(page.locator("#at")).to_have_text("#3")
        expect(page.locator("#state-tree")).to_contain_text("version: 3")
        expect(page.locator("#diff")).to_contain_text("/plan/0")
        expect(page.locator("table.calls")).to_contain_text("lookup")
        expect(page.locator("#tree")).to_contain_text(served.waiting)
        page.screenshot(path=str(shots / "2-task-timeline.png"), full_page=True)

        # Answer the pending input through the form made from its schema; a worker continues the task.
        form = page.locator("section.input form.answer")
        form.locator("input[name=yes]").check()
        form.locator("input[name=note]").fill("window seat")
        form.locator("button").click()
        expect(page.locator("#action-result")).to_contain_text("Answered approve")  # the page says what it did
        expect(page.locator("#story .request")).to_contain_text("Answered by alice")
        work(served.app)
        expect(page.locator(".meta .status")).to_have_text("completed")  # the page follows the task live
        assert served.app.state(served.waiting).output == {"booked": True, "note": "window seat"}
        page.screenshot(path=str(shots / "3-answered-and-completed.png"), full_page=True)

        # Fork from the UI at event 3: the new task's page, a fork of this one.
        page.get_by_label("Fork at event").fill("3")
        page.get_by_label("named").fill("lisbon-again")
        page.click("form.fork button")
        expect(page.locator(".meta")).to_contain_text(f"fork of {served.waiting}")
        expect(page.locator("#action-result")).to_contain_text("Forked at event #3")
        assert page.locator("#task").get_attribute("data-task") == "lisbon-again"
        assert served.app.state("lisbon-again").parent is not None
        page.screenshot(path=str(shots / "4-fork.png"), full_page=True)

        # The inbox renders the newcomer's question as a form; the failed list retries.
        page.click("nav a[href='/inbox']")
        expect(page.locator(f'section.input[data-task="{newcomer}"] input[name=yes]')).to_have_count(1)
        page.screenshot(path=str(shots / "5-inbox.png"), full_page=True)
        page.click("nav a[href='/failed']")
        page.locator(f'section.failed[data-task="{served.failed}"] button.retry').click()
        expect(page.locator(f'section.failed[data-task="{served.failed}"] .result')).to_contain_text("alice")
        page.screenshot(path=str(shots / "6-failed-retried.png"), full_page=True)
    assert served.app.state(served.failed).status.value == "pending"
    assert len(list(shots.glob("*.png"))) == 6


@pytest.mark.timeout(120)
def test_the_conversation_reads_as_a_chat(page: Any, served: Served) -> None:
    from playwright.sync_api import expect

    with LiveServer(served.asgi) as live:
        page.goto(f"{live.base}/login")
        page.fill("input[name=key]", served.key)
        page.click("form.login button")
        page.goto(f"{live.base}/tasks/{served.chatted}")
        expect(page.locator("#conversation .msg")).to_have_count(2)
        expect(page.locator("#conversation .msg.user")).to_contain_text("hello")
        expect(page.locator("#conversation .msg.assistant")).to_contain_text("you said hello")


@pytest.mark.timeout(120)
def test_a_call_in_doubt_is_settled_from_the_inbox(page: Any, served: Served) -> None:
    from playwright.sync_api import expect

    from tests.serve.test_in_doubt import _parked

    effects = _parked(served.app)
    with LiveServer(served.asgi) as live:
        page.goto(f"{live.base}/login")
        page.fill("input[name=key]", served.key)
        page.click("form.login button")
        page.goto(f"{live.base}/inbox")
        card = page.locator('section.doubt[data-task="co"]')
        expect(card).to_contain_text("call #1 charge() is in doubt")
        expect(card.locator("form.answer")).to_have_count(0)
        card.locator("textarea[name=result]").fill("ch_by_hand")  # not JSON: said, nothing sent
        card.locator("form.happened button").click()
        expect(card.locator(".result")).to_contain_text("must be JSON")
        card.locator("textarea[name=result]").fill('{"charge": "ch_by_hand"}')
        card.locator("form.happened button").click()
        expect(card.locator(".result")).to_contain_text("settled")
    state = served.app.state("co")
    assert state.received["tether.call-1"] == {"happened": True} and state.call(1).result == {"charge": "ch_by_hand"}  # type: ignore[union-attr]
    assert served.app.history("co")[-1].summary.endswith(" by alice")
    work(served.app)
    assert served.app.state("co").output == {"charge": "ch_by_hand"} and len(effects) == 1


@pytest.mark.timeout(180)
def test_odd_ids_are_linked_encoded_and_shown_visibly_by_the_script(page: Any, served: Served) -> None:
    """The live list's rows, the fork tree and the timeline are made by the script: its links and API
    calls carry an id as one encoded segment, and its text shows invisible characters."""
    from playwright.sync_api import expect

    odd = "X?y/z#1"
    spoof = "pay\u202eevil.exe"
    for task_id in (odd, spoof, ".."):
        served.app.start("trip", city="Porto", task_id=task_id)
    with LiveServer(served.asgi) as live:
        page.goto(f"{live.base}/login")
        page.fill("input[name=key]", served.key)
        page.click("form.login button")
        expect(page.locator("#tasks tbody tr")).to_have_count(6)
        _until_the_list_is_live(page, served)
        work(served.app)  # the three change: the script replaces their rows
        for task_id, href in (
            (odd, "/tasks/X%3Fy%2Fz%231"),
            (spoof, "/tasks/pay%E2%80%AEevil.exe"),
            ("..", "/tasks/%00.."),
        ):
            row = page.locator(f'tr.flash[data-task="{task_id}"]')  # made by the script
            expect(row.locator("td.status")).to_have_text("awaiting_input", timeout=20_000)
            assert row.locator("a").get_attribute("href") == href
        expect(page.locator(f'tr[data-task="{spoof}"] a')).to_have_text("pay\\u202eevil.exe")

        for task_id in (odd, ".."):
            page.click(f'tr[data-task="{task_id}"] a')
            expect(page.locator("#task h1")).to_have_text(task_id)
            expect(page.locator("#tree b")).to_have_text(task_id)  # the script's API call found the task
            page.click('#timeline li[data-seq="2"]')
            expect(page.locator("#state-tree")).to_contain_text("version: 2")
            page.go_back()
        page.goto(f"{live.base}/tasks/pay%E2%80%AEevil.exe")
        expect(page.locator("#task h1")).to_have_text("pay\\u202eevil.exe")
        expect(page.locator("#tree b")).to_have_text("pay\\u202eevil.exe")


def _until_the_list_is_live(page: Any, served: Served) -> None:
    """Start tasks until one appears in the list without a reload: its stream is connected (a change
    made before it connected is in the page already, or in its first look, and never announced)."""
    from playwright.sync_api import Error

    for attempt in range(20):
        task_id = served.app.start("trip", city="Oslo", task_id=f"sentinel-{attempt}").task_id
        try:
            page.locator(f'tr.flash[data-task="{task_id}"]').wait_for(timeout=2_000)
            return
        except Error:
            continue
    raise AssertionError("the task list never went live")
