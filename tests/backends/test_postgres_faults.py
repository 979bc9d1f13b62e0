"""PostgreSQL faults: connections that say whose they are, schema names checked at open,
and every wait bounded when the server goes away."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import tether
from tests.conftest import PG_URL, pg_url
from tether.events import OutputSet, StatusChanged
from tether.model.status import TERMINAL


@pytest.fixture
def url() -> Iterator[str]:
    yield from pg_url("pgf")


def test_connections_carry_the_schema_in_application_name(url: str) -> None:
    import psycopg

    app = tether.App(url)
    app.session("s1").add("user", "hi")
    schema = url.rpartition("schema=")[2]
    with psycopg.connect(PG_URL, autocommit=True) as admin:
        names = [
            r[0]
            for r in admin.execute(
                "SELECT application_name FROM pg_stat_activity WHERE datname = current_database() "
                "AND pid <> pg_backend_pid() AND application_name = %s",
                (f"tether:{schema}",),
            )
        ]
        assert names, "tether's connections are not tagged with their schema"
        # Ending only our own leaves every other client alone, and tether recovers.
        admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s",
            (f"tether:{schema}",),
        )
        assert admin.execute("SELECT 1").fetchone() == (1,)
    assert [m.content for m in app.session("s1").messages()] == ["hi"]
    app.close()


@pytest.mark.parametrize(
    ("schema", "says"),
    [
        ("s" * 57, "at most 56"),
        ("s" * 63, "at most 56"),
        ("pg_mine", "reserved"),
        ("PG_Mine", "reserved"),
        ("information_schema", "reserved"),
        ("bad-name", "letters, digits"),
        ("1abc", "digit"),
        ("é", "letters, digits"),
    ],
)
def test_bad_schema_names_are_refused_at_open(schema: str, says: str) -> None:
    from tests.conftest import PG_PROBLEM

    if PG_PROBLEM:
        pytest.skip(PG_PROBLEM)
    with pytest.raises(tether.ConfigurationError, match=says):
        tether.open_store(f"{PG_URL}{'&' if '?' in PG_URL else '?'}schema={schema}")


def test_the_longest_schema_name_works() -> None:
    for url in pg_url("L" + "l" * 42):  # 43 + 1 + 12 hex = 56 characters
        schema = url.rpartition("schema=")[2]
        assert len(schema) == 56
        app = tether.App(url)
        app.session("s").add("user", "hi")
        assert app.store.wait_for_change(0.01) in (True, False)
        app.close()


def test_a_public_schema_with_other_tables_is_refused() -> None:
    import uuid

    import psycopg

    from tests.conftest import PG_PROBLEM

    if PG_PROBLEM:
        pytest.skip(PG_PROBLEM)
    table = f"someone_else_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(PG_URL, autocommit=True) as admin:
        admin.execute(f"CREATE TABLE public.{table} (x int)")
        try:
            with pytest.raises(tether.ConfigurationError, match="not tether's"):
                tether.open_store(f"{PG_URL}{'&' if '?' in PG_URL else '?'}schema=public")
            found = admin.execute(
                "SELECT count(*) FROM information_schema.tables "
                "WHERE table_schema = 'public' AND table_name = 'tether_meta'"
            ).fetchone()
            assert found == (0,)
        finally:
            admin.execute(f"DROP TABLE public.{table}")


class _Proxy:
    """A TCP proxy in a process of its own, between tether and PostgreSQL: kill it, stop it."""

    def __init__(self) -> None:
        import subprocess
        import sys
        from pathlib import Path
        from urllib.parse import urlsplit

        target = urlsplit(PG_URL)
        script = Path(__file__).parents[1] / "_tcp_proxy.py"
        self.process = subprocess.Popen(
            [sys.executable, str(script), target.hostname or "127.0.0.1", str(target.port or 5432)],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.process.stdout is not None
        self.port = int(self.process.stdout.readline())

    def url(self, base: str, **options: object) -> str:
        from urllib.parse import urlsplit, urlunsplit

        parts = urlsplit(base)
        user = parts.netloc.rpartition("@")[0]
        extra = "".join(f"&{k}={v}" for k, v in options.items())
        return urlunsplit(parts._replace(netloc=f"{user}@127.0.0.1:{self.port}")) + extra

    def close(self) -> None:
        import signal

        if self.process.poll() is None:
            self.process.send_signal(signal.SIGCONT)
            self.process.kill()
        self.process.wait()
        if self.process.stdout is not None:
            self.process.stdout.close()


@pytest.fixture
def proxy() -> Iterator[_Proxy]:
    from tests.conftest import PG_PROBLEM

    if PG_PROBLEM:
        pytest.skip(PG_PROBLEM)
    running = _Proxy()
    yield running
    running.close()


BOUNDS = {"connect_timeout": 2, "query_timeout": 2, "give_up_after": 1.5}


def _unavailable_within(app: tether.App, seconds: float) -> float:
    import time

    start = time.monotonic()
    with pytest.raises(tether.StoreUnavailableError) as caught:
        app.get("t")
    took = time.monotonic() - start
    assert took < seconds, f"StoreUnavailableError came after {took:.1f} s, over the bound {seconds} s"
    assert "give_up_after" in str(caught.value) or "connection" in str(caught.value).lower()
    return took


def test_a_dead_server_is_reported_within_the_bound(url: str, proxy: _Proxy) -> None:
    app = tether.App(proxy.url(url, **BOUNDS))

    @app.task
    def t(ctx: tether.TaskContext) -> int:
        return 1

    app.run(t, task_id="t")
    proxy.process.kill()  # gone for good: connections reset, nothing listens
    proxy.process.wait()
    # give_up_after + one connect_timeout + a backoff: about 3.5 s, never minutes
    _unavailable_within(app, 8.0)
    app.close()


def _wait_until_stopped(pid: int) -> None:
    """SIGSTOP takes effect when the process is next scheduled: on a busy machine the proxy could
    still forward (and answer) a query sent right after the signal. Wait for its state to read T."""
    import time
    from pathlib import Path

    deadline = time.monotonic() + 10
    while Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] not in ("T", "t"):
        assert time.monotonic() < deadline, "the proxy never stopped"
        time.sleep(0.005)


def test_a_blackholed_connection_is_cut_within_the_bound(url: str, proxy: _Proxy) -> None:
    import signal

    app = tether.App(proxy.url(url, **BOUNDS))

    @app.task
    def t(ctx: tether.TaskContext) -> int:
        return 1

    app.run(t, task_id="t")
    proxy.process.send_signal(signal.SIGSTOP)  # the peer stops answering; its kernel still ACKs, no RST
    _wait_until_stopped(proxy.process.pid)
    try:
        # query_timeout cuts the hung statement, then retries meet connect_timeout, until give_up_after
        _unavailable_within(app, 12.0)
    finally:
        proxy.process.send_signal(signal.SIGCONT)
    app.close()


def test_a_data_error_is_not_reported_as_an_outage(url: str) -> None:
    import secrets
    import time

    from tether.store import EventRow, TaskRow

    store = tether.open_store(url)
    now = time.time()
    huge = secrets.token_hex(5_000)  # 10,000 characters that do not compress: past the B-tree entry limit
    row = TaskRow(huge, "default", "t", "pending", None, None, now, now, 1)
    start = time.monotonic()
    with pytest.raises(tether.InvalidInputError, match="cannot store") as caught:
        store.create_task("default", row, EventRow(1, "TaskCreated", 1, now, "{}"))
    assert not isinstance(caught.value, tether.StoreUnavailableError)
    assert time.monotonic() - start < 4.0  # refused at once, not retried for give_up_after (5 s)
    with pytest.raises(tether.InvalidInputError, match="cannot store"):
        store.get_task("default", "a\0b")
    store.close()


def test_a_lease_taken_wakes_nobody_and_a_lease_given_back_wakes_waiters(url: str) -> None:
    """Waiters (workers, ``tether logs --follow``, the inspector's feed) are woken by what they look
    at: a task created, its status or wake time moved, its lease given back. Taking a lease changes
    none of those, and a NOTIFY serialises every notifying commit of the database (issue 17, target 6),
    so it sends none. Checked on the channel itself, in commit order: a marker sent after the
    operations arrives right after the notifications they sent, and only those."""
    import psycopg
    from psycopg import sql

    app = tether.App(url)
    app.log.create(type="t", task_id="a")
    schema = url.rpartition("schema=")[2]
    channel = f"tether_{schema}"

    def notifications(operation: Callable[[], object]) -> int:
        with psycopg.connect(PG_URL, autocommit=True) as listener:
            listener.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))
            operation()
            listener.execute("SELECT pg_notify(%s, 'marker')", (channel,))
            seen = 0
            for note in listener.notifies(timeout=30):
                if note.payload == "marker":
                    return seen
                seen += 1
        raise AssertionError("the marker never came")

    now = time.time()
    token: list[int | None] = []
    assert notifications(lambda: token.append(app.store.acquire_lease(app.tenant, "a", "w1", 30, now))) == 0
    assert token[0] is not None
    assert notifications(lambda: app.store.release_lease(app.tenant, "a", token[0])) == 1
    assert notifications(lambda: app.log.create(type="t", task_id="b")) == 1
    held = ("w3", 30.0)  # a task created leased is not claimable: nobody to wake
    assert notifications(lambda: app.log.create_record(type="t", task_id="c", holder=held)) == 0
    assert notifications(lambda: app.store.claim(app.tenant, "w2", 30, time.time())) == 0  # a claim takes a lease
    # A finished task's lease given back wakes nobody: its end (the status) did, in its own commit.
    for status, event in (("completed", OutputSet(output=1)), ("failed", None), ("cancelled", None)):
        task = f"done-{status}"
        app.log.create_record(type="t", task_id=task, holder=held)
        token = 1  # a task created held has lease token 1
        version = app.log.append(task, [StatusChanged(status="running")], 1, fence=token)
        ended: list[Any] = [event] if event is not None else []
        ended.append(StatusChanged(status=status))
        assert notifications(lambda: app.log.append(task, ended, version, fence=token)) == 1  # noqa: B023
        assert notifications(lambda: app.store.release_lease(app.tenant, task, token)) == 0  # noqa: B023
    assert {"completed", "failed", "cancelled"} == {s.value for s in TERMINAL}  # the trigger's list
    app.close()


def test_a_group_append_reads_each_task_row_by_its_key(url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A group commit's guard finds each part's task row by its primary key, whatever the planner
    thinks of the table: on a small one (a new schema) it once scanned the tenant's tasks per part,
    so a commit to 200 of 250 tasks read 20,000 rows. The plan is an ``EXPLAIN ANALYZE`` of the very
    statement, in a transaction rolled back before the statement runs for real."""
    from tether.events import ObservationRecorded
    from tether.store import _postgres_sql

    log = tether.TaskLog(url)
    tasks = [log.create(type="t").task_id for _ in range(250)]
    plans: list[Any] = []
    write_group = _postgres_sql.write_group

    def explained(conn: Any, group: tuple[str, tuple[Any, ...]]) -> None:
        conn.execute("BEGIN")
        (plan,) = conn.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + group[0], group[1]).fetchone()
        conn.execute("ROLLBACK")
        plans.append(plan)
        write_group(conn, group)

    monkeypatch.setattr(_postgres_sql, "write_group", explained)
    parts = tasks[:200]
    moved = [StatusChanged(status="running")]  # a status moves the row: the parts' rows are updated too
    noted = [ObservationRecorded(key="k", value=1, source="s")]
    log.append_together([(t, moved if i % 2 else noted, 1) for i, t in enumerate(parts)])
    assert len(plans) == 1 and all(log.load(t).version == 2 for t in parts)  # and it wrote them

    def rows_read(node: dict[str, Any]) -> int:
        own = 0
        if node.get("Relation Name") == "tasks":
            removed = node.get("Rows Removed by Filter", 0) + node.get("Rows Removed by Index Recheck", 0)
            own = (node["Actual Rows"] + removed) * node["Actual Loops"]
        return own + sum(rows_read(child) for child in node.get("Plans", []))

    read = rows_read(plans[0][0]["Plan"])
    # Once per part for its guard, and for the rows updated at most one pass over the table (the
    # planner's choice for a small one); never the table once per part, as before (20,000 rows).
    bound = 3 * len(parts) + 2 * len(tasks)
    assert len(parts) <= read <= bound, f"the group append read {read} rows of tasks for {len(parts)} parts"
