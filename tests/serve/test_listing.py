"""The live task list's shared reads (serve/_listing.py): a client woken for a change never gets a
read that began before it, and clients woken together share one read."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable

import pytest

import tether
from tether.serve._listing import Listings


class _Feed:
    count = 0


def _setup() -> tuple[tether.App, _Feed, Listings, Callable[[], tether.App]]:
    app = tether.App("memory://")
    app.task(name="job")(lambda ctx: None)
    feed = _Feed()
    return app, feed, Listings(feed), lambda: app  # type: ignore[arg-type]


def test_a_read_that_began_before_the_change_is_not_taken_for_it() -> None:
    app, feed, listings, get_app = _setup()

    async def main() -> None:
        first = listings.look("default", get_app, count=0, max_age=math.inf)
        assert await first.rows() == {}
        app.start("job", task_id="new")
        feed.count += 1  # the feed counted the change
        again = listings.look("default", get_app, count=0, max_age=math.inf)
        assert again is first  # a client that saw no change takes the last read
        after = listings.look("default", get_app, count=1, max_age=math.inf)
        assert after is not first and after.count == 1
        assert set(await after.rows()) == {"new"}
        assert listings.look("default", get_app, count=1, max_age=math.inf) is after
        assert listings.reads["default"] == 2

    asyncio.run(main())


def test_clients_woken_together_share_one_read_and_a_recheck_reads_once_it_is_old() -> None:
    _app, _feed, listings, get_app = _setup()

    async def main() -> None:
        looks = [listings.look("default", get_app, count=0, max_age=math.inf) for _ in range(5)]
        assert all(look is looks[0] for look in looks)
        await asyncio.gather(*(look.rows() for look in looks))
        assert listings.reads["default"] == 1
        other = listings.look("other", get_app, count=0, max_age=math.inf)  # another tenant: its own read
        await other.rows()
        assert listings.reads == {"default": 1, "other": 1}
        await asyncio.sleep(0.02)
        stale = listings.look("default", get_app, count=0, max_age=0.01)  # the recheck's safety net
        assert stale is not looks[0]
        await stale.rows()
        assert listings.reads["default"] == 2

    asyncio.run(main())


def test_a_summary_is_made_once_per_read() -> None:
    app, _feed, listings, get_app = _setup()
    app.start("job", task_id="t1")

    async def main() -> None:
        look = listings.look("default", get_app, count=0, max_age=math.inf)
        row = (await look.rows())["t1"]
        first = await look.summary(get_app, row)
        assert first["task_id"] == "t1" and first["version"] == row.version
        assert await look.summary(get_app, row) is first

    asyncio.run(main())


def test_a_failed_read_fails_its_clients_and_the_next_look_reads_again() -> None:
    app, _feed, listings, _get_app = _setup()
    broken = True

    def flaky() -> tether.App:
        if broken:
            raise RuntimeError("store away")
        return app

    async def main() -> None:
        nonlocal broken
        look = listings.look("default", flaky, count=0, max_age=math.inf)
        for _ in range(2):  # every client waiting on it
            with pytest.raises(RuntimeError, match="store away"):
                await look.rows()
        broken = False
        again = listings.look("default", flaky, count=0, max_age=math.inf)
        assert again is not look
        assert await again.rows() == {}

    asyncio.run(main())


def test_a_client_that_leaves_does_not_stop_the_read_for_the_others() -> None:
    app, _feed, listings, get_app = _setup()
    app.start("job", task_id="t1")

    async def main() -> None:
        look = listings.look("default", get_app, count=0, max_age=math.inf)
        leaving = asyncio.ensure_future(look.rows())
        await asyncio.sleep(0)
        leaving.cancel()
        assert set(await look.rows()) == {"t1"}

    asyncio.run(main())
