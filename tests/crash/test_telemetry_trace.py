"""One task's story as one trace across processes: created under a caller's span in one process, run
by another (parallel calls, then a wait), resumed after its answer by a third that is SIGKILLed inside
a call, and finished by a fourth. Each process exports its spans with the OpenTelemetry SDK (a file
per process, the last in memory)."""

from __future__ import annotations

import json
import os
import signal
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk")

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import tether
import tether.telemetry


def make_app(url: str, marker: Path) -> tuple[tether.App, Any]:
    app = tether.App(url)

    @app.tool
    def price(city: str) -> int:
        return len(city)

    @app.tool
    def book() -> str:
        if not marker.exists():  # the first attempt dies inside the call, as a crash would
            marker.touch()
            os.kill(os.getpid(), signal.SIGKILL)
        return "booked"

    @app.task
    def trip(ctx: tether.TaskContext) -> str:
        ctx.map(price, ["Lisbon", "Oslo", "Rome"])
        ctx.wait_for_input("ok")
        return str(ctx.call(book))

    return app, trip


def in_child(out: Path, body: Callable[[], None]) -> int:
    """Run ``body`` in a forked process exporting its spans to ``out`` (one JSON object per line, as
    each span ends); its exit status, or -signal when it was killed."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 0
        try:
            provider = TracerProvider()
            stream = out.open("w")
            exporter = ConsoleSpanExporter(out=stream, formatter=lambda s: s.to_json(indent=None) + "\n")
            provider.add_span_processor(SimpleSpanProcessor(exporter))
            tether.telemetry.instrument(tracer_provider=provider)
            body()
        except BaseException:
            traceback.print_exc()
            code = 1
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    return -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)


def spans_in(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_a_task_across_processes_and_a_sigkill_is_one_trace(tmp_path: Path) -> None:
    url, marker = f"sqlite:///{tmp_path / 't.db'}", tmp_path / "killed-once"

    def create() -> None:
        app, trip = make_app(url, marker)
        with tether.telemetry.hooks.ACTIVE.tracer.start_as_current_span("caller"):  # type: ignore[union-attr]
            app.start(trip, task_id="t1")
        app.close()

    def resume() -> None:
        app, _ = make_app(url, marker)
        app.resume("t1")
        app.close()

    assert in_child(tmp_path / "a.jsonl", create) == 0
    assert in_child(tmp_path / "b.jsonl", resume) == 0  # parallel calls, then waits
    app, _ = make_app(url, marker)
    try:
        app.send_input("t1", "ok", True)
        assert in_child(tmp_path / "c.jsonl", resume) == -signal.SIGKILL  # killed inside book()
        exporter, reader = InMemorySpanExporter(), InMemoryMetricReader()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        tether.telemetry.instrument(tracer_provider=provider, meter_provider=MeterProvider(metric_readers=[reader]))
        try:
            assert app.resume("t1").output == "booked"
        finally:
            tether.telemetry.uninstrument()
        keys = {c.tool + str(c.n): c.key for c in app.get("t1").state.calls}
    finally:
        app.close()

    caller = spans_in(tmp_path / "a.jsonl")
    b, c = spans_in(tmp_path / "b.jsonl"), spans_in(tmp_path / "c.jsonl")
    d = [json.loads(s.to_json(indent=None)) for s in exporter.get_finished_spans()]
    assert [s["name"] for s in caller] == ["caller"]
    trace_id = caller[0]["context"]["trace_id"]
    assert {s["context"]["trace_id"] for s in b + c + d} == {trace_id}, "every run of the task joins the caller's trace"

    def runs(spans: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [s for s in spans if s["name"] == "run trip"]

    def tools(spans: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
        return [s for s in spans if s["attributes"].get("gen_ai.tool.name") == name and s["name"].startswith("execute")]

    (run_b,) = runs(b)
    assert run_b["parent_id"] == caller[0]["context"]["span_id"] and run_b["links"] == []
    assert run_b["attributes"]["tether.task.status"] == "awaiting_input"
    prices = tools(b, "price")
    assert len(prices) == 3 and all(s["parent_id"] == run_b["context"]["span_id"] for s in prices)
    assert {s["attributes"]["gen_ai.tool.call.id"] for s in prices} == {keys["price1"], keys["price2"], keys["price3"]}
    assert not any(s["attributes"]["tether.replayed"] for s in prices)
    assert [s["attributes"]["tether.wait.outcome"] for s in b if s["name"] == "wait ok"] == ["suspended"]

    # The killed run's span never ended (nor was exported), but its children name it as their parent.
    assert runs(c) == []
    killed_run = {s["parent_id"] for s in c}
    assert len(killed_run) == 1
    assert all(s["attributes"]["tether.replayed"] for s in tools(c, "price")) and len(tools(c, "price")) == 3
    assert [s["attributes"]["tether.wait.outcome"] for s in c if s["name"] == "wait ok"] == ["answered"]
    assert tools(c, "book") == []  # it was running when the process died

    (run_d,) = runs(d)
    assert [link["context"]["span_id"] for link in run_d["links"]] == list(killed_run), "linked to the run it resumes"
    assert run_d["parent_id"] == caller[0]["context"]["span_id"]
    assert run_d["attributes"]["tether.run.resumed"] is True and run_d["attributes"]["tether.run.attempt"] == 3
    assert run_d["attributes"]["tether.task.status"] == "completed"
    assert len(tools(d, "price")) == 3 and all(s["attributes"]["tether.replayed"] for s in tools(d, "price"))
    (book,) = tools(d, "book")
    assert book["attributes"]["tether.replayed"] is False and book["attributes"]["tether.call.attempt"] == 2
    assert book["attributes"]["gen_ai.tool.call.id"] == keys["book4"]
    assert [s for s in d if s["name"] == "wait ok"] == []  # replayed: answered in the run before

    calls = {
        (p.attributes["gen_ai.tool.name"], p.attributes["tether.replayed"]): p.value
        for rm in reader.get_metrics_data().resource_metrics
        for sm in rm.scope_metrics
        for m in sm.metrics
        if m.name == "tether.calls"
        for p in m.data.data_points
    }
    assert calls == {("price", True): 3, ("book", False): 1}
