"""tether on OpenTelemetry's API: the tracer and meter, the instruments, and the spans of one run
(:class:`RunTrace`). Imported only once telemetry is turned on (``opentelemetry-api`` is optional)."""

from __future__ import annotations

import importlib.metadata
import threading
import time
import weakref
from collections.abc import Callable, Iterable
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import metrics, trace
from opentelemetry.metrics import CallbackOptions, Observation
from opentelemetry.trace import Link, Span, SpanKind, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from opentelemetry.util.types import Attributes

from tether.events import RunTraced
from tether.model import TaskState
from tether.telemetry.usage import usage_of

__all__ = ["CallSpan", "RunTrace", "Telemetry", "span_context_of", "traceparent_of"]

_PROPAGATOR = TraceContextTextMapPropagator()
_SECONDS = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0]
_TOKENS = [1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304]  # the GenAI conventions' buckets
_SCOPE = "tether"


def _version() -> str | None:
    try:
        return importlib.metadata.version("tether")
    except importlib.metadata.PackageNotFoundError:
        return None


def traceparent_of(ctx: otel_context.Context | None = None) -> str | None:
    """The W3C ``traceparent`` of the span current in ``ctx`` (the current context by default)."""
    carrier: dict[str, str] = {}
    _PROPAGATOR.inject(carrier, context=ctx)
    return carrier.get("traceparent")


def span_context_of(traceparent: str) -> otel_context.Context:
    """A context whose current span is the (remote) span ``traceparent`` names."""
    return _PROPAGATOR.extract({"traceparent": traceparent})


class Telemetry:
    """The tracer, the meter and tether's instruments (see docs/observability.md for each)."""

    def __init__(self, tracer_provider: Any = None, meter_provider: Any = None) -> None:
        version = _version()
        self.tracer = trace.get_tracer(_SCOPE, version, tracer_provider)
        meter = metrics.get_meter(_SCOPE, version or "", meter_provider=meter_provider)
        self.meter = meter
        self.runs = meter.create_counter("tether.runs", "{run}", "Runs of tasks begun (attribute tether.run.resumed)")
        self.run_duration = meter.create_histogram(
            "tether.run.duration", "s", "How long runs held their task", explicit_bucket_boundaries_advisory=_SECONDS
        )
        self.tasks = meter.create_counter(
            "tether.tasks", "{task}", "Runs ended, by the status they left the task in (tether.task.status)"
        )
        # The global provider is one key whatever it is now: before set_meter_provider it is a proxy,
        # which hands the first tally's callback on to the provider set later; a tally keyed on that
        # provider by a later instrument() would be a second callback, never read.
        self.calls = _CallTally.of(meter_provider if meter_provider is not None else _GLOBAL, meter)
        self.retries = meter.create_counter(
            "tether.call.retries", "{retry}", "Attempts of calls retried after an error"
        )
        self.failures = meter.create_counter("tether.failures", "{failure}", "Tasks failed, by exception type")
        self.waits = meter.create_counter("tether.waits.answered", "{wait}", "Waits for input whose answer a run took")
        self.takeovers = meter.create_counter("tether.lease.takeovers", "{takeover}", "Leases taken from dead holders")
        self.commit_duration = meter.create_histogram(
            "tether.commit.duration",
            "s",
            "How long a run's record took to commit to the store",
            explicit_bucket_boundaries_advisory=_SECONDS,
        )
        self.appends = meter.create_counter(
            "tether.conversation.appends", "{message}", "Messages appended to conversations"
        )
        self.compactions = meter.create_counter("tether.conversation.compactions", "{compaction}", "Compactions")
        self.tokens = meter.create_histogram(
            "gen_ai.client.token.usage",
            "{token}",
            "Tokens used by model calls recorded live (GenAI conventions)",
            explicit_bucket_boundaries_advisory=_TOKENS,
        )

    def run(self, state: TaskState, worker_id: str, attempt: int, resumed: bool) -> RunTrace:
        """The span of a run of ``state``'s task: in the trace its runs share (the caller's, kept with
        the task; else the first run's), linked to the span of the run before it."""
        stored = state.trace
        links: list[Link] = []
        parent: otel_context.Context | None = None  # the caller's context: an in-process app.run
        if stored is not None:
            parent = span_context_of(stored["origin"])
            if "run" in stored:
                before = trace.get_current_span(span_context_of(stored["run"])).get_span_context()
                links.append(Link(before, {"tether.link": "resumes"}))
        attributes: dict[str, Any] = {
            "tether.task.id": state.task_id,
            "tether.task.type": state.type,
            "tether.tenant": state.tenant,
            "tether.run.attempt": attempt,
            "tether.run.resumed": resumed,
            "tether.worker.id": worker_id,
        }
        if state.session_id is not None:
            attributes["gen_ai.conversation.id"] = state.session_id
        span = self.tracer.start_span(f"run {state.type}", parent, SpanKind.INTERNAL, attributes, links)
        self.runs.add(1, {"tether.task.type": state.type, "tether.run.resumed": resumed})
        return RunTrace(self, span, state, stored["origin"] if stored is not None else None)

    def takeover(self, task_id: str, owner: str, worker_id: str) -> None:
        """A lease taken from a holder that died: an instant span and a count."""
        span = self.tracer.start_span(
            "tether.lease.takeover",
            attributes={"tether.task.id": task_id, "tether.lease.previous_owner": owner, "tether.worker.id": worker_id},
        )
        span.end()
        self.takeovers.add(1)


class RunTrace:
    """One run's spans: the run's own, and its calls', waits' and sleeps' as its children."""

    __slots__ = ("_compensating", "_origin", "context", "span", "started", "telemetry", "type")

    def __init__(self, telemetry: Telemetry, span: Span, state: TaskState, origin: str | None) -> None:
        self.telemetry = telemetry
        self.span = span
        self.type = state.type
        self.context = trace.set_span_in_context(span)
        self.started = time.perf_counter()
        self._origin = origin
        self._compensating: Span | None = None

    def traced(self) -> RunTraced | None:
        """What the run records as it begins: the trace the task's runs join, and this run's span
        (nothing when the span is not sampled: there is no trace to join)."""
        run = traceparent_of(self.context)
        return RunTraced(origin=self._origin or run, run=run) if run is not None else None

    def call(self, n: int, tool: str, key: str, attempt: int, kind: str) -> CallSpan:
        """A call's span (``execute_tool``), current while its tool runs: a span the tool opens is its child."""
        shared = self.telemetry.calls.tool(tool)
        attributes: Attributes = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": tool,
            "gen_ai.tool.call.id": key,
            "gen_ai.tool.type": "function",
            "tether.call.n": n,
            "tether.call.attempt": attempt,
            "tether.call.kind": kind,
            "tether.replayed": False,
        }
        span = self.telemetry.tracer.start_span(shared.span_name, self.context, SpanKind.INTERNAL, attributes)
        token = otel_context.attach(trace.set_span_in_context(span))
        return CallSpan(self, span, shared, token)

    def replayed(self, n: int, tool: str, key: str, kind: str, result: Any) -> None:
        """A call served from the record: a span marked ``tether.replayed``, counted apart from live calls."""
        shared = self.telemetry.calls.tool(tool)
        attributes: Attributes = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": tool,
            "gen_ai.tool.call.id": key,
            "tether.call.n": n,
            "tether.call.kind": kind,
            "tether.replayed": True,
        }
        span = self.telemetry.tracer.start_span(shared.span_name, self.context, SpanKind.INTERNAL, attributes)
        _model_call(span, result, None)
        span.end()
        with shared.lock:
            shared.replayed += 1

    def retry(self, tool: str, attempt: int, backoff: float, error_type: str) -> None:
        """Attempt ``attempt`` of a call failed with ``error_type`` and is retried after ``backoff`` seconds."""
        attributes: Attributes = {
            "gen_ai.tool.name": tool,
            "tether.call.attempt": attempt,
            "tether.retry.backoff_s": backoff,
            "error.type": error_type,
        }
        self.telemetry.tracer.start_span(f"retry {tool}", self.context, attributes=attributes).end()
        self.telemetry.retries.add(1, {"gen_ai.tool.name": tool})

    def wait(self, key: str, outcome: str, asked_at: float | None = None) -> None:
        """A wait for input: the run ``suspended`` on it, or took its ``answered`` answer."""
        attributes: dict[str, Any] = {"tether.wait.key": key, "tether.wait.outcome": outcome}
        if asked_at is not None:
            attributes["tether.wait.seconds"] = max(0.0, time.time() - asked_at)
        self.telemetry.tracer.start_span(f"wait {key}", self.context, attributes=attributes).end()
        if outcome == "answered":
            self.telemetry.waits.add(1, {"tether.task.type": self.type})

    def sleep(self, seconds: float, durable: bool, retry: bool) -> Callable[[], None]:
        """A sleep (``ctx.sleep``, or a call's retry backoff): here, or durable (the run lets go and a
        later one wakes the task). Returns what ends its span."""
        attributes = {"tether.sleep.seconds": seconds, "tether.sleep.durable": durable, "tether.sleep.retry": retry}
        span = self.telemetry.tracer.start_span("sleep", self.context, attributes=attributes)
        if durable:
            span.end()
        return span.end

    def compensating(self, due: int) -> None:
        """The compensations of a failed or cancelled task begin: their calls become this span's children."""
        if due and self._compensating is None:
            span = self.telemetry.tracer.start_span(
                "compensate", self.context, attributes={"tether.compensations": due}
            )
            self._compensating = span
            self.context = trace.set_span_in_context(span)

    def committed(self, seconds: float) -> None:
        self.telemetry.commit_duration.record(seconds)

    def ended(self, state: TaskState | None, error: BaseException | None) -> None:
        """The run's end: the status it left the task in (or what stopped it), its duration."""
        if self._compensating is not None:
            self._compensating.end()
        span, tel = self.span, self.telemetry
        status = state.status.value if state is not None and error is None else "interrupted"
        span.set_attribute("tether.task.status", status)
        if error is not None:
            span.set_status(StatusCode.ERROR, f"{type(error).__name__}: {error}")
            span.set_attribute("error.type", type(error).__name__)
        elif state is not None and state.failure is not None and status == "failed":
            span.set_status(StatusCode.ERROR, state.failure.message)
            span.set_attribute("error.type", state.failure.exception_type)
            tel.failures.add(1, {"error.type": state.failure.exception_type, "tether.task.type": self.type})
        span.end()
        attributes = {"tether.task.type": self.type, "tether.task.status": status}
        tel.tasks.add(1, attributes)
        tel.run_duration.record(time.perf_counter() - self.started, attributes)


class _CallTally:
    """The ``tether.calls`` counter: each tool's calls so far, live and replayed, tallied as they
    happen and observed at each collection, never added to per call (the SDK's ``Counter.add`` costs
    a live call microseconds, a tally's increment a fraction of one). The counts are in this process
    until a collection reads them, as a synchronous counter's sums were: a process killed loses
    what it counted since its reader's last collection, a run that stops loses nothing.

    One per meter provider, kept across :func:`~tether.telemetry.instrument` calls: the SDK keeps the
    first callback an instrument of a name was created with, so a second tally would never be read."""

    def __init__(self, meter: metrics.Meter) -> None:
        self._tools: dict[str, _Tool] = {}
        self._lock = threading.Lock()
        meter.create_observable_counter(
            "tether.calls", [self._observe], "{call}", "Recorded calls: run live or served from the record"
        )

    @classmethod
    def of(cls, provider: Any, meter: metrics.Meter) -> _CallTally:
        """The tally of ``provider``'s ``tether.calls`` counter (on ``meter``, its tether meter)."""
        with _TALLIES_LOCK:
            found = _TALLIES.get(provider)
            if found is None:
                found = _TALLIES[provider] = cls(meter)
            return found

    def tool(self, name: str) -> _Tool:
        """What the spans and counts of the tool ``name`` share, made at its first call."""
        found = self._tools.get(name)
        if found is None:
            with self._lock:
                found = self._tools.setdefault(name, _Tool(name))
        return found

    def _observe(self, options: CallbackOptions) -> Iterable[Observation]:
        with self._lock:
            tools = list(self._tools.values())
        out: list[Observation] = []
        for tool in tools:
            with tool.lock:
                live, replayed = tool.live, tool.replayed
            if live:
                out.append(Observation(live, tool.live_attributes))
            if replayed:
                out.append(Observation(replayed, tool.replayed_attributes))
        return out


class _GlobalProvider:
    """The key of the tally of OpenTelemetry's global meter provider (whichever it is at the time)."""


_GLOBAL = _GlobalProvider()
_TALLIES: weakref.WeakKeyDictionary[Any, _CallTally] = weakref.WeakKeyDictionary()  # by meter provider
_TALLIES_LOCK = threading.Lock()


class _Tool:
    """One tool as its spans and the ``tether.calls`` counter see it: its span name and counter
    attributes, made once, and its calls so far (a plain tally the counter observes)."""

    __slots__ = ("live", "live_attributes", "lock", "name", "replayed", "replayed_attributes", "span_name")

    def __init__(self, name: str) -> None:
        self.name = name
        self.span_name = f"execute_tool {name}"
        self.live_attributes: Attributes = {"gen_ai.tool.name": name, "tether.replayed": False}
        self.replayed_attributes: Attributes = {"gen_ai.tool.name": name, "tether.replayed": True}
        self.live = 0
        self.replayed = 0
        self.lock = threading.Lock()  # parallel calls of one tool end in threads of their own


class CallSpan:
    """A live call attempt's span, current from before its tool runs until :meth:`ended`."""

    __slots__ = ("_token", "run", "span", "tool")

    def __init__(self, run: RunTrace, span: Span, tool: _Tool, token: object) -> None:
        self.run = run
        self.span = span
        self.tool = tool
        self._token = token

    def ended(self, ok: bool, value: Any) -> None:
        """The attempt's end: its result (a model call's usage read from it) or its error."""
        span, tel = self.span, self.run.telemetry
        try:
            otel_context.detach(self._token)  # type: ignore[arg-type]
        except Exception:  # detached in another context (a branch moved threads): the span still ends
            pass
        if ok:
            _model_call(span, value, tel)
        else:
            span.set_status(StatusCode.ERROR, f"{type(value).__name__}: {value}")
            span.set_attribute("error.type", type(value).__name__)
        span.end()
        tool = self.tool
        with tool.lock:
            tool.live += 1


def _model_call(span: Span, value: Any, tel: Telemetry | None) -> None:
    """Make a call's span a model call's (``chat``) when its result carries usage; count its tokens
    (``tel``, for a call run live: a replayed one spent nothing)."""
    if type(value) is not dict:
        if value is None or isinstance(value, str | int | float | bool | list):
            return
        from tether.canonical import as_json

        try:
            value = as_json(value)
        except Exception:
            return
    found = usage_of(value)
    if found is None:
        return
    usage, model, provider = found
    span.update_name(f"chat {model}" if model else "chat")
    span.set_attribute("gen_ai.operation.name", "chat")
    span.set_attribute("gen_ai.provider.name", provider)
    span.set_attribute("gen_ai.usage.input_tokens", usage.input_tokens)
    span.set_attribute("gen_ai.usage.output_tokens", usage.output_tokens)
    attributes = {"gen_ai.operation.name": "chat", "gen_ai.provider.name": provider}
    if model:
        span.set_attribute("gen_ai.response.model", model)
        attributes["gen_ai.response.model"] = model
    if tel is not None:
        tel.tokens.record(usage.input_tokens, {**attributes, "gen_ai.token.type": "input"})
        tel.tokens.record(usage.output_tokens, {**attributes, "gen_ai.token.type": "output"})
