"""More threads than the store's pool of connections (a worker at a high concurrency, a web server's
threads) each run tasks that append: every task completes, none is told the store is unreachable."""
# mypy: disable-error-code="no-any-return"

from __future__ import annotations

import threading

import tether


def test_more_appending_threads_than_the_pool_has_connections(store_url: str) -> None:
    small_pool = store_url + ("&" if "?" in store_url else "?") + "pool_max=4"
    url = small_pool if store_url.startswith("postgres") else store_url
    app = tether.App(url)

    @app.tool
    def work(i: int) -> int:
        return i

    @app.task
    def job(ctx: tether.TaskContext, k: int) -> int:
        return sum(ctx.call(work, i) for i in range(10)) + k

    errors: list[BaseException] = []
    start = threading.Barrier(12)

    def run(k: int) -> None:
        start.wait()
        try:
            app.run(job, k, task_id=f"j{k}")
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(k,)) for k in range(12)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert [app.get(f"j{k}").output for k in range(12)] == [45 + k for k in range(12)]
    app.close()
