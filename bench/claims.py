"""Claim, delete and list beside many other tasks: their cost must not grow with the tasks that wait.

Run: ``python bench/claims.py`` (``--quick``: 100 and 1,000 only; ``TETHER_BENCH_PG_URL`` picks the
PostgreSQL server, default ``postgresql://postgres@127.0.0.1:5432/test``; without a server its rows
are skipped with a message). Prints a table, then one line of JSON.

Beside N tasks of each kind no claim may take (awaiting an answer without a timeout, asleep for an
hour, finished, and N conversation sessions newer than every task; inserted in bulk by SQL, as a
long-lived database holds them), on SQLite (a file) and PostgreSQL (a schema of its own), for
N = 100, 10,000 and 100,000:

* claim: ``Store.claim`` taking the one due task, then its lease given back (not timed), so every
  claim finds the same tasks: the median of 200, in ms;
* delete: ``Store.delete_task`` of a finished task without forks (it looks for forks first): the
  median of 50, in ms;
* list: ``Store.list_tasks`` of one type (20 tasks of type ``thread``, older than all the others,
  as LangGraph's threads are listed) and ``Store.stream_positions`` of that type (as ADK's sessions
  are): the median of 50 each, in ms;
* tasks: ``Store.list_tasks`` with no filter, as ``tether tasks`` lists (the newest 20 tasks,
  sessions left out): the median of 50, in ms;
* prefix: ``Store.stream_positions`` of the ids of type ``t`` that start with ``due`` (one, among
  3N of its type: an ADK app's document among its users'), and ``lookup``: ``Store.list_tasks``
  by the id prefix ``du``, as ``tether show du`` looks a task up: the median of 50 each, in ms;
* unfinished: ``Store.list_tasks`` of two statuses (pending and running: the one due task, among
  the finished), as ``tether tasks --status pending --status running``: the median of 50, in ms.

Target: each at the largest N costs at most 2x what it costs at 100 (``growth``).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from typing import Any

import orjson

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))

from tether.store import EventRow, Store, TaskFilter, TaskRow, open_store

PG = os.environ.get("TETHER_BENCH_PG_URL", "postgresql://postgres@127.0.0.1:5432/test")
TENANT = "default"
TARGET = 2.0
# status, wake-up time, type, and whether newer (1) or older (-1) than the tasks measured
KINDS = (
    "SELECT 'awaiting_input', NULL, 't', -1 UNION ALL SELECT 'sleeping', {later}, 't', -1 "
    "UNION ALL SELECT 'completed', NULL, 't', -1 UNION ALL SELECT 'open', NULL, 'tether.session', 1"
)


def fill_sqlite(url: str, n: int, now: float) -> None:
    import sqlite3

    conn = sqlite3.connect(url.removeprefix("sqlite:///"))
    conn.execute(
        "WITH RECURSIVE g(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM g WHERE i < ?), "
        f"k(status, wake, type, side) AS ({KINDS.format(later=now + 3600)}) "
        "INSERT INTO tasks (tenant, task_id, type, status, created_at, wake_at) "
        "SELECT ?, k.status || '-' || g.i, k.type, k.status, ? + k.side * (100 + g.i), k.wake FROM g, k",
        (n, TENANT, now),
    )
    conn.commit()
    conn.close()


def fill_postgres(url: str, n: int, now: float) -> None:
    import psycopg

    schema = url.rpartition("schema=")[2]
    with psycopg.connect(PG, autocommit=True, options=f"-c search_path={schema}") as conn:
        conn.execute(
            f"WITH k(status, wake, type, side) AS ({KINDS.format(later=now + 3600)}) "
            "INSERT INTO tasks (tenant, task_id, type, status, created_at, wake_at) "
            "SELECT %s, k.status || '-' || g, k.type, k.status, %s + k.side * (100 + g), k.wake "
            "FROM generate_series(1, %s) g, k",
            (TENANT, now, n),
        )
        conn.execute("ANALYZE tasks")


def median_ms(fn: Callable[[], object], between: Callable[[], object], rounds: int) -> float:
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
        between()
    return statistics.median(times) * 1000


def measure(url: str, fill: Callable[[str, int, float], None], n: int, rounds: int = 50) -> dict[str, float]:
    """Each figure the median of ``rounds`` (the claim's of four times as many)."""
    store: Store = open_store(url)
    now = time.time()
    store.create_task(TENANT, TaskRow("due", TENANT, "t", "pending", None, None, now, now, 1), _event(now))
    for i in range(20):
        thread = TaskRow(f"thread-{i}", TENANT, "thread", "completed", None, None, now - 10**6 - i, now, 1)
        store.create_task(TENANT, thread, _event(now))
    fill(url, n, now)
    held: list[Any] = []

    def claim() -> None:
        held.append(store.claim(TENANT, "w", 30, time.time()))

    def give_back() -> None:
        claimed = held.pop()
        assert claimed is not None and claimed[0] == "due", claimed
        store.release_lease(TENANT, "due", claimed[1])

    victims = iter(range(10**9))

    def make_victim() -> None:
        at = time.time()
        store.create_task(
            TENANT, TaskRow(f"v{next(victims)}", TENANT, "t", "completed", None, None, at, at, 1), _event(at)
        )

    deleted = iter(range(10**9))
    unfinished = TaskFilter(status=("pending", "running"))
    make_victim()
    out = {
        "claim_ms": median_ms(claim, give_back, 4 * rounds),
        "delete_ms": median_ms(lambda: store.delete_task(TENANT, f"v{next(deleted)}"), make_victim, rounds),
        "list_ms": median_ms(lambda: store.list_tasks(TENANT, TaskFilter(type="thread"), limit=20), _nothing, rounds),
        "tasks_ms": median_ms(lambda: store.list_tasks(TENANT, TaskFilter(), limit=20), _nothing, rounds),
        "positions_ms": median_ms(lambda: store.stream_positions(TENANT, "thread", "thread-"), _nothing, rounds),
        "prefix_ms": median_ms(lambda: store.stream_positions(TENANT, "t", "due"), _nothing, rounds),
        "lookup_ms": median_ms(lambda: store.list_tasks(TENANT, TaskFilter(id_prefix="du"), limit=2), _nothing, rounds),
        "unfinished_ms": median_ms(lambda: store.list_tasks(TENANT, unfinished, limit=20), _nothing, rounds),
    }
    store.close()
    return out


def _nothing() -> None:
    pass


def _event(at: float) -> EventRow:
    return EventRow(1, "DecisionMade", 1, at, "{}")


def postgres_answers() -> bool:
    try:
        import psycopg

        with psycopg.connect(PG, autocommit=True, connect_timeout=3):
            return True
    except Exception as exc:
        print(f"PostgreSQL skipped: {exc}")
        return False


def postgres_url(n: int) -> str:
    return f"{PG}{'&' if '?' in PG else '?'}schema=bench_claims_{n}_{uuid.uuid4().hex[:8]}"


def drop_schema(url: str) -> None:
    import psycopg

    with psycopg.connect(PG, autocommit=True) as admin:
        admin.execute(f"DROP SCHEMA IF EXISTS {url.rpartition('schema=')[2]} CASCADE")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="the shortest run through every path, for the test suite: its figures mean nothing",
    )
    args = parser.parse_args()
    sizes = (5, 20) if args.smoke else (100, 1_000) if args.quick else (100, 10_000, 100_000)
    folder = tempfile.mkdtemp(prefix="tether-bench-")
    result: dict[str, Any] = {"sizes": list(sizes), "target_growth": TARGET}
    backends: list[tuple[str, Callable[[int], str], Callable[[str, int, float], None]]] = [
        ("sqlite", lambda n: f"sqlite:///{os.path.join(folder, f'claims-{n}.db')}", fill_sqlite)
    ]
    if postgres_answers():
        backends.append(("postgres", postgres_url, fill_postgres))
    columns = ("claim_ms", "delete_ms", "list_ms", "tasks_ms", "positions_ms", "prefix_ms", "lookup_ms")
    columns += ("unfinished_ms",)
    print(f"{'backend':<10}{'tasks of each kind':>20}" + "".join(f"{c.replace('_ms', ' ms'):>14}" for c in columns))
    verdicts = []
    for name, make_url, fill in backends:
        rows = {}
        for n in sizes:
            url = make_url(n)
            try:
                rows[n] = measure(url, fill, n, 2 if args.smoke else 50)
            finally:
                if name == "postgres":
                    drop_schema(url)
            print(f"{name:<10}{n:>20,}" + "".join(f"{rows[n][c]:>14.3f}" for c in columns))
        growth = {c: rows[sizes[-1]][c] / rows[sizes[0]][c] for c in columns}
        grew = "".join(f"{growth[c]:>13.2f}x" for c in columns)
        print(f"{name:<10}{'growth':>20}{grew}  (target <= {TARGET})")
        verdicts.append(all(g <= TARGET for g in growth.values()))
        result[name] = {"sizes": {str(n): row for n, row in rows.items()}, "growth": growth}
    result["pass"] = all(verdicts)
    print(orjson.dumps(result).decode())


if __name__ == "__main__":
    main()
