"""tether's metrics in the Prometheus text exposition format (version 0.0.4), read from an
OpenTelemetry SDK metric reader on demand (a scrape), so ``/metrics`` shows the same metrics an
OTLP exporter sends.

Names follow OpenTelemetry's Prometheus compatibility rules: dots become underscores, a unit in
seconds adds ``_seconds``, a monotonic sum adds ``_total``; annotations in braces (``{run}``) are
not units and add nothing."""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["PullReader", "exposition", "gauge_lines", "metric_name"]

_INVALID = re.compile(r"[^a-zA-Z0-9_:]")
_UNITS = {"s": "seconds", "ms": "milliseconds", "By": "bytes"}


def metric_name(name: str, unit: str, *, total: bool) -> str:
    """The Prometheus name of an OpenTelemetry instrument."""
    out = _INVALID.sub("_", name)
    suffix = _UNITS.get(unit)
    if suffix and not out.endswith(suffix):
        out += "_" + suffix
    if total and not out.endswith("_total"):
        out += "_total"
    return out


def _labels(attributes: Mapping[str, Any], extra: Mapping[str, str] | None = None) -> str:
    pairs = [(_INVALID.sub("_", k), v) for k, v in attributes.items()]
    if extra:
        pairs.extend(extra.items())
    if not pairs:
        return ""
    body = ",".join(f'{k}="{_escape(v)}"' for k, v in sorted(pairs))
    return "{" + body + "}"


def _escape(value: Any) -> str:
    text = str(value).lower() if isinstance(value, bool) else str(value)
    return text.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _number(value: float) -> str:
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value)) if isinstance(value, float) else str(value)


def gauge_lines(name: str, help_text: str, values: Iterable[tuple[Mapping[str, Any], float]]) -> list[str]:
    """A gauge's lines (its HELP, TYPE and one line per labelled value)."""
    lines = [f"# HELP {name} {help_text}", f"# TYPE {name} gauge"]
    lines.extend(f"{name}{_labels(labels)} {_number(value)}" for labels, value in values)
    return lines


def exposition(data: Any) -> list[str]:
    """The lines of an SDK ``MetricsData`` (cumulative), one family per instrument."""
    lines: list[str] = []
    for resource in getattr(data, "resource_metrics", ()) or ():
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                lines.extend(_family(metric))
    return lines


def _family(metric: Any) -> list[str]:
    points = metric.data.data_points
    kind = type(metric.data).__name__
    description = (metric.description or metric.name).replace("\n", " ")
    if kind == "Histogram":
        name = metric_name(metric.name, metric.unit, total=False)
        lines = [f"# HELP {name} {description}", f"# TYPE {name} histogram"]
        for p in points:
            cumulative = 0
            for bound, count in zip([*p.explicit_bounds, math.inf], p.bucket_counts, strict=True):
                cumulative += count
                lines.append(f"{name}_bucket{_labels(p.attributes, {'le': _number(float(bound))})} {cumulative}")
            lines.append(f"{name}_sum{_labels(p.attributes)} {_number(p.sum)}")
            lines.append(f"{name}_count{_labels(p.attributes)} {p.count}")
        return lines
    monotonic = kind == "Sum" and getattr(metric.data, "is_monotonic", False)
    name = metric_name(metric.name, metric.unit, total=monotonic)
    lines = [f"# HELP {name} {description}", f"# TYPE {name} {'counter' if monotonic else 'gauge'}"]
    lines.extend(f"{name}{_labels(p.attributes)} {_number(p.value)}" for p in points)
    return lines


class PullReader:
    """An SDK meter provider whose metrics are read when scraped, and turns tether's telemetry on with
    it (spans go to the global tracer provider). Needs ``opentelemetry-sdk``."""

    def __init__(self) -> None:
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import InMemoryMetricReader

        from tether.telemetry.hooks import instrument

        self._reader = InMemoryMetricReader()
        self.provider = MeterProvider(metric_readers=[self._reader])
        instrument(meter_provider=self.provider)

    def lines(self) -> list[str]:
        return exposition(self._reader.get_metrics_data())
