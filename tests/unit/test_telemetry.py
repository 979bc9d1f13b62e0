"""tether's telemetry in one process: nothing recorded or emitted while it is off; metrics by outcome and
kind while it is on (failures by type, conversation appends counted once across a resume); the
Prometheus text of those metrics; calls counted by tool and replay without a measurement per call; one
structured log line per run start and end, with no payload; a worker's lines with the task, tenant and
attempt as fields."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk")

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import tether
import tether.errors
import tether.runtime.worker
import tether.telemetry
from tether.telemetry.prometheus import exposition


@pytest.fixture
def app() -> Iterator[tether.App]:
    tether.telemetry.uninstrument()  # whatever an earlier test in this process turned on
    app = tether.App("memory://")
    yield app
    app.close()
    tether.telemetry.uninstrument()


def points(reader: InMemoryMetricReader, name: str) -> dict[tuple[Any, ...], Any]:
    return {
        tuple(sorted(p.attributes.items())): getattr(p, "value", None)
        for rm in reader.get_metrics_data().resource_metrics
        for sm in rm.scope_metrics
        for m in sm.metrics
        if m.name == name
        for p in m.data.data_points
    }


def test_off_records_and_emits_nothing(app: tether.App) -> None:
    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))

    @app.task
    def plain(ctx: tether.TaskContext) -> int:
        return 1

    with provider.get_tracer("caller").start_as_current_span("caller"):
        app.run(plain, task_id="t1")
    assert [e.type for e in app.history("t1")] == ["TaskCreated", "StatusChanged", "OutputSet", "StatusChanged"]
    assert app.get("t1").state.trace is None and [s.name for s in spans.get_finished_spans()] == ["caller"]


def test_metrics_count_failures_by_type_and_appends_once(app: tether.App) -> None:
    reader = InMemoryMetricReader()
    tether.telemetry.instrument(tracer_provider=TracerProvider(), meter_provider=MeterProvider(metric_readers=[reader]))

    @app.task
    def chat(ctx: tether.TaskContext) -> None:
        ctx.session.add("user", "hello")
        ctx.session.compact(keep_last=0)
        ctx.wait_for_input("more")
        raise KeyError("gone")

    app.run(chat, task_id="c1", session_id="s1")
    app.send_input("c1", "more", True)
    assert app.resume("c1").status.value == "failed"
    assert points(reader, "tether.conversation.appends") == {(): 1}
    assert points(reader, "tether.conversation.compactions") == {(): 1}
    assert points(reader, "tether.failures") == {(("error.type", "KeyError"), ("tether.task.type", "chat")): 1}
    assert points(reader, "tether.waits.answered") == {(("tether.task.type", "chat"),): 1}
    ended = points(reader, "tether.tasks")
    assert ended[(("tether.task.status", "failed"), ("tether.task.type", "chat"))] == 1
    assert ended[(("tether.task.status", "awaiting_input"), ("tether.task.type", "chat"))] == 1
    text = "\n".join(exposition(reader.get_metrics_data()))
    assert "# TYPE tether_failures_total counter" in text
    assert 'tether_failures_total{error_type="KeyError",tether_task_type="chat"} 1' in text
    assert "# TYPE tether_run_duration_seconds histogram" in text and 'le="+Inf"' in text


class _Adds:
    """A meter provider that counts the synchronous measurements (``add``, ``record``) taken on each
    instrument of the meters it hands out, and passes everything on to ``inner``."""

    def __init__(self, inner: MeterProvider) -> None:
        self.inner = inner
        self.taken: dict[str, int] = {}

    def get_meter(self, *args: Any, **kwargs: Any) -> Any:
        meter, taken = self.inner.get_meter(*args, **kwargs), self.taken

        class Meter:
            def __getattr__(self, attr: str) -> Any:
                made = getattr(meter, attr)
                if not attr.startswith("create_") or "observable" in attr:
                    return made

                def create(name: str, *a: Any, **k: Any) -> Any:
                    instrument = made(name, *a, **k)

                    def measure(*m: Any, **mk: Any) -> None:
                        taken[name] = taken.get(name, 0) + 1
                        (instrument.add if hasattr(instrument, "add") else instrument.record)(*m, **mk)

                    return type("Counted", (), {"add": staticmethod(measure), "record": staticmethod(measure)})()

                return create

        return Meter()


def test_calls_are_counted_by_tool_and_replay_without_a_measurement_per_call(app: tether.App) -> None:
    reader = InMemoryMetricReader()
    meters = _Adds(MeterProvider(metric_readers=[reader]))
    tether.telemetry.instrument(tracer_provider=TracerProvider(), meter_provider=meters)

    @app.tool(readonly=True)
    def price(city: str) -> int:
        return len(city)

    @app.tool
    def book(city: str) -> str:
        return city

    @app.task
    def trip(ctx: tether.TaskContext, cities: list[str]) -> str:
        ctx.map(price, cities)  # in threads: each tool's tally is counted under its lock
        ctx.wait_for_input("ok")
        if ctx.call(book, cities[0]) == "Rome":
            raise KeyError("no rooms")  # the run crashes in the task's code: its calls stay counted
        return "booked"

    cities = [f"city{i}" for i in range(40)]
    app.run(trip, cities, task_id="t1")
    assert points(reader, "tether.calls") == {(("gen_ai.tool.name", "price"), ("tether.replayed", False)): 40}
    tether.telemetry.instrument(tracer_provider=TracerProvider(), meter_provider=meters)  # again: counts go on
    app.send_input("t1", "ok", True)
    app.resume("t1")
    app.run(trip, ["Rome"], task_id="t2")
    app.send_input("t2", "ok", True)
    assert app.resume("t2").status.value == "failed"
    assert points(reader, "tether.calls") == {
        (("gen_ai.tool.name", "price"), ("tether.replayed", False)): 41,
        (("gen_ai.tool.name", "price"), ("tether.replayed", True)): 41,
        (("gen_ai.tool.name", "book"), ("tether.replayed", False)): 2,
    }
    assert "tether.calls" not in meters.taken  # observed from the tallies, never added to per call
    text = "\n".join(exposition(reader.get_metrics_data()))
    assert 'tether_calls_total{gen_ai_tool_name="book",tether_replayed="false"} 2' in text


def test_worker_lines_carry_the_task_its_attempt_and_tenant(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = tether.App(f"sqlite:///{tmp_path}/w.db", tenant="acme")
    changed = {"code": False}

    @app.tool
    def first() -> int:
        return 1

    @app.tool
    def other() -> int:
        return 2

    @app.task
    def asks(ctx: tether.TaskContext) -> object:
        ctx.call(other if changed["code"] else first)
        return ctx.wait_for_input("ok")

    def lines() -> list[tuple[Any, ...]]:
        """The worker's records since the last look, as (action, task, tenant, attempt, status, error, retry in)."""
        names = ("tether_action", "tether_task_id", "tether_tenant", "tether_attempt", "tether_status")
        names += ("tether_error_type", "tether_retry_in_s")
        got = [tuple(getattr(r, n, None) for n in names) for r in caplog.records if r.name == "tether.worker"]
        assert all(r.tether_worker_id == app.worker_id for r in caplog.records if r.name == "tether.worker")  # type: ignore[attr-defined]
        caplog.clear()
        return got

    with caplog.at_level(logging.DEBUG, logger="tether.worker"):
        app.start(asks, task_id="w1")
        app.run_worker(idle_exit=True)
        assert lines() == [
            ("claimed", "w1", "acme", None, None, None, None),
            ("finished", "w1", "acme", 1, "awaiting_input", None, None),
        ]
        app.send_input("w1", "ok", True)
        changed["code"] = True  # the code now asks for another call than the one recorded: it is parked
        app.run_worker(idle_exit=True)
        assert lines() == [
            ("claimed", "w1", "acme", None, None, None, None),
            ("parked", "w1", "acme", 2, None, "NonDeterminismError", None),
            ("failed", "w1", "acme", 2, None, "NonDeterminismError", None),
        ]

        def unavailable(*args: Any) -> Any:
            raise tether.errors.StoreUnavailableError("the store went away")

        monkeypatch.setattr(tether.runtime.worker, "run_claimed", unavailable)
        app.start(asks, task_id="r1")
        app.run_worker(idle_exit=True)
        assert lines() == [
            ("claimed", "r1", "acme", None, None, None, None),
            ("failed", "r1", "acme", None, None, "StoreUnavailableError", 1.0),  # held aside: claimed again in 1 s
        ]
    app.close()


def test_one_line_per_run_start_and_end_without_payloads(app: tether.App, caplog: pytest.LogCaptureFixture) -> None:
    @app.task
    def secretive(ctx: tether.TaskContext, password: str) -> str:
        return password[::-1]

    with caplog.at_level(logging.INFO, logger="tether.run"):
        app.run(secretive, "hunter2", task_id="r1")
    lines = [r for r in caplog.records if r.name == "tether.run"]
    assert [r.getMessage().split()[-1] if "started" in r.getMessage() else r.tether_status for r in lines] == [  # type: ignore[attr-defined]
        "started",
        "completed",
    ]
    end = lines[1]
    assert (end.tether_task_id, end.tether_task_type, end.tether_attempt) == ("r1", "secretive", 1)  # type: ignore[attr-defined]
    assert end.tether_run_id == lines[0].tether_run_id and end.tether_duration_s >= 0  # type: ignore[attr-defined]
    assert not any("hunter2" in r.getMessage() or "2retnuh" in r.getMessage() for r in lines)
    assert logging.getLogger("tether").handlers and isinstance(
        logging.getLogger("tether").handlers[0], logging.NullHandler
    )


_GLOBAL_PROVIDER_SET_LATE = """
import tether, tether.telemetry
from opentelemetry import metrics
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

tether.telemetry.instrument()  # as TETHER_OTEL=1 does at import: the global provider is still a proxy
reader = InMemoryMetricReader()
metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))
tether.telemetry.instrument()  # again, once the SDK's provider is set
app = tether.App("memory://")

@app.tool
def double(x: int) -> int:
    return 2 * x

@app.task
def job(ctx, n: int) -> int:
    return sum(ctx.call(double, i) for i in range(n))

app.run(job, 5)
points = [
    (dict(p.attributes), p.value)
    for rm in reader.get_metrics_data().resource_metrics
    for sm in rm.scope_metrics
    for m in sm.metrics
    if m.name == "tether.calls"
    for p in m.data.data_points
]
print(points)
"""


def test_calls_are_counted_when_instrument_runs_before_and_after_the_global_provider_is_set() -> None:
    """The global meter provider (a proxy until set_meter_provider, then the SDK's) keeps one tally:
    a second ``instrument()`` once the SDK's provider is set made a second, whose callback the SDK
    never read, and tether.calls went silent. In a process of its own: the global provider is set once."""
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", _GLOBAL_PROVIDER_SET_LATE], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[({'gen_ai.tool.name': 'double', 'tether.replayed': False}, 5)]", done.stdout
