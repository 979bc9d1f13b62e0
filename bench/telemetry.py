"""Telemetry benchmark: what tether's OpenTelemetry spans cost a recorded call, and what the hooks
cost when telemetry is not configured.

Run: ``python bench/telemetry.py`` (``--quick`` for a short run, ``--smoke`` for the shortest run through
every path, whose figures mean nothing). Prints one line of JSON.

* ``sdk_ratio``: seconds per ``ctx.call`` (a ~500-byte result, SQLite) with tether's telemetry on,
  an SDK ``TracerProvider`` and a ``BatchSpanProcessor`` over an exporter that drops what it is
  given, against the same call with telemetry off, in this process, rounds interleaved, best of
  each. Targets: readonly ≤ 1.15, side-effecting ≤ 1.1. ``sdk_metrics_ratio`` adds the SDK's
  ``MeterProvider`` (with a reader) for the metrics, for information.
* ``unconfigured_ratio``: telemetry never configured, against the tether of the commit before the
  hooks went in (``git archive`` of it into a temporary folder; ``--baseline-src`` names another
  ``src``), each in processes of its own, interleaved. Target ≤ 1.02. A timing on shared cores moves
  by a few percent with the neighbours' load: ``bench/call_instructions.py --src`` counts the
  instructions instead, which do not move (see docs/observability.md).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).parent
TARGETS = {"readonly": 1.15, "side_effecting": 1.1}
UNCONFIGURED_TARGET = 1.02
KINDS = (("readonly", True), ("side_effecting", False))


def child(src: str, kinds: str, calls: int) -> None:
    """Print the seconds per call of each kind in ``kinds`` ("1": readonly, "0": side-effecting), a line each."""
    sys.path.insert(0, src)
    import tether  # noqa: F401  (from ``src``, before _common puts this checkout's first)

    sys.path.insert(1, str(HERE))
    from _common import MESSAGE, recorded_call

    with tempfile.TemporaryDirectory() as folder:
        for i, kind in enumerate(kinds):
            print(recorded_call(f"sqlite:///{folder}/c{i}.db", calls, readonly=kind == "1", result=MESSAGE))


def in_child(src: str, readonly: list[bool], calls: int) -> list[float]:
    kinds = "".join("1" if r else "0" for r in readonly)
    argv = [sys.executable, __file__, "--child", kinds, str(calls), "--baseline-src", src]
    done = subprocess.run(argv, capture_output=True, text=True, check=True)
    return [float(line) for line in done.stdout.strip().splitlines()[-len(readonly) :]]


def in_process(calls: int, rounds: int) -> dict[str, dict[str, float]]:
    """Best-of-``rounds`` seconds per call for each kind, telemetry off and on."""
    sys.path.insert(0, str(HERE.parent / "src"))
    sys.path.insert(0, str(HERE))
    from _common import MESSAGE, recorded_call, sdk_telemetry

    import tether.telemetry

    best: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as folder:
        for r in range(rounds):
            for mode in ("off", "sdk", "sdk_metrics"):
                if mode == "off":
                    tether.telemetry.uninstrument()
                else:
                    sdk_telemetry(metrics=mode == "sdk_metrics")
                for kind, readonly in KINDS:
                    url = f"sqlite:///{folder}/{mode}{kind}{r}.db"
                    took = recorded_call(url, calls, readonly=readonly, result=MESSAGE)
                    row = best.setdefault(mode, {})
                    row[kind] = min(row.get(kind, took), took)
        tether.telemetry.uninstrument()
    return best


def baseline_src(folder: str) -> str | None:
    """The ``src`` of the commit before tether.telemetry's hooks went in, written into ``folder``."""
    repo = str(HERE.parent)
    try:
        added = subprocess.run(
            ["git", "-C", repo, "log", "--diff-filter=A", "--format=%H", "--", "src/tether/telemetry/hooks.py"],
            capture_output=True, text=True, check=True,
        ).stdout.split()  # fmt: skip
        if not added:
            return None
        archive = subprocess.run(
            ["git", "-C", repo, "archive", f"{added[-1]}~1", "src"], capture_output=True, check=True
        )
        subprocess.run(["tar", "-x", "-C", folder], input=archive.stdout, check=True)
    except (OSError, subprocess.CalledProcessError):
        return None
    return os.path.join(folder, "src")


def unconfigured(calls: int, rounds: int, baseline: str | None, shared: bool) -> dict[str, float] | None:
    """``shared``: both kinds in one process for each src (the shortest run), else a process each."""
    with tempfile.TemporaryDirectory() as folder:
        before = baseline or baseline_src(folder)
        if before is None:
            return None
        now = str(HERE.parent / "src")
        best: dict[str, dict[str, float]] = {}
        for _ in range(rounds):
            for label, src in (("before", before), ("now", now)):
                groups = [list(KINDS)] if shared else [[k] for k in KINDS]
                for group in groups:
                    times = in_child(src, [readonly for _, readonly in group], calls)
                    for (kind, _), took in zip(group, times, strict=True):
                        row = best.setdefault(label, {})
                        row[kind] = min(row.get(kind, took), took)
    return {kind: round(best["now"][kind] / best["before"][kind], 4) for kind, _ in KINDS}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer calls and rounds")
    parser.add_argument("--smoke", action="store_true", help="5 calls, one round: figures mean nothing")
    parser.add_argument("--baseline-src", default=None, help="the src without telemetry to compare against")
    parser.add_argument("--child", nargs=2, metavar=("READONLY", "CALLS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.baseline_src, args.child[0], int(args.child[1]))
        return
    calls, rounds = (5, 1) if args.smoke else (300, 3) if args.quick else (2000, 5)
    best = in_process(calls, rounds)
    result: dict[str, object] = {"calls": calls, "rounds": rounds, "targets": TARGETS}
    passed = True
    for kind, _ in KINDS:
        off = best["off"][kind]
        result[f"{kind}_off_us"] = round(off * 1e6, 2)
        result[f"{kind}_sdk_ratio"] = ratio = round(best["sdk"][kind] / off, 4)
        result[f"{kind}_sdk_metrics_ratio"] = round(best["sdk_metrics"][kind] / off, 4)
        passed = passed and ratio <= TARGETS[kind]
    ratios = unconfigured(calls, rounds, args.baseline_src, shared=args.smoke)
    result["unconfigured_ratio"] = ratios
    if ratios is not None:
        passed = passed and all(r <= UNCONFIGURED_TARGET for r in ratios.values())
    result["pass"] = passed
    print(json.dumps(result))


if __name__ == "__main__":
    main()
