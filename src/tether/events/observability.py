"""What telemetry keeps in a task's record: the tokens and cost its code reported for a call, and
where its runs' traces are (so that a run in another process joins the same trace)."""

from __future__ import annotations

from tether.events.base import Event, define_event

__all__ = ["RunTraced", "UsageRecorded"]


@define_event
class UsageRecorded(Event):
    """Tokens and cost the task's code reported (``ctx.usage``) for call ``call`` (its ordinal; 0
    when the code had issued none yet). It stands beside whatever usage the call's result carries:
    where both exist, this one is the call's usage."""

    call: int
    input_tokens: int | None = None
    output_tokens: int | None = None
    cost: float | None = None
    model: str | None = None

    def describe(self) -> str:
        counted = ((self.input_tokens, "in"), (self.output_tokens, "out"))
        tokens = [f"{n} {what}" for n, what in counted if n is not None]
        parts = [f"{', '.join(tokens)} tokens"] if tokens else []
        parts += [f"cost {self.cost:g}"] if self.cost is not None else []
        of = f"call #{self.call}" if self.call else "the task"
        model = f" ({self.model})" if self.model else ""
        return f"usage of {of}{model}" + (": " + ", ".join(parts) if parts else "")


@define_event
class RunTraced(Event):
    """A run's place in OpenTelemetry, written as the run begins (only while telemetry is on): the
    trace every run of the task joins (``origin``, a W3C ``traceparent``) and this run's own span
    (``run``), which the next run links to."""

    origin: str
    run: str

    def describe(self) -> str:
        trace = self.origin.split("-")[1] if self.origin.count("-") == 3 else self.origin
        return f"run traced in trace {trace}"
