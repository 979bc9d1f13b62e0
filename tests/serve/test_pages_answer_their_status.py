"""The inspector's pages answer with the status the API gives the same error: a task that is not
there is a 404 page (naming the close id meant), not a 200 page that says so."""

from __future__ import annotations

from typing import Any

from starlette.testclient import TestClient

import tether
from tether.serve import create_app


def test_a_task_page_that_is_not_found_is_a_404_naming_the_id_meant(tmp_path: Any) -> None:
    url = f"sqlite:///{tmp_path / 't.db'}"
    with tether.App(url) as app:

        @app.task
        def refund(ctx: tether.TaskContext) -> str:
            return "done"

        app.run(refund, task_id="refund-7")
    asgi = create_app(url, no_auth=True)
    with TestClient(asgi, base_url="http://127.0.0.1:8700") as client:
        found = client.get("/tasks/refund-7")
        missing = client.get("/tasks/refund-77")
    asgi.state.store.close()
    assert found.status_code == 200
    assert missing.status_code == 404 and missing.headers["content-type"].startswith("text/html")
    assert "<title>not found · tether</title>" in missing.text
    assert "no task &#x27;refund-77&#x27; in tenant &#x27;default&#x27;; did you mean &#x27;refund-7&#x27;?" in (
        missing.text
    ), missing.text
