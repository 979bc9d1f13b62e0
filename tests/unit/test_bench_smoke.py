"""The benchmarks run (in their quick mode) and end with one line of JSON: they do not rot.

Timing targets are ratios against a floor measured in the same run; on these shared 2-core
machines a quick run's ratio is noise for the benchmarks whose margin is a few tens of
percent, so for those the test checks the report is whole (every ratio a positive finite
number), and asserts the benchmark's own verdict only where the margin is wide.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

BENCH = Path(__file__).parents[2] / "bench"
# script -> whether its own pass/fail verdict is asserted in the quick run
SMOKE = {
    "store.py": False,
    "calls.py": False,
    "timetravel.py": False,
    "conversation.py": False,
    "agent_loop.py": False,
    "check.py": True,  # ~0.5 ms per task against a 10 ms target
    "peers.py": False,
    "task_reads.py": False,
    "serve.py": False,
    "langgraph_saver.py": False,
    "adk.py": False,
}


def _numbers(value: object) -> Iterator[float]:
    if isinstance(value, dict):
        for item in value.values():
            yield from _numbers(item)
    elif isinstance(value, list):
        for item in value:
            yield from _numbers(item)
    elif isinstance(value, int | float) and not isinstance(value, bool):
        yield float(value)


@pytest.mark.parametrize("script", sorted(SMOKE))
def test_bench_runs_and_reports(script: str) -> None:
    done = subprocess.run(
        [sys.executable, str(BENCH / script), "--quick"], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["pass"] in (True, False, None)  # None: the verdict is for sizes a quick run does not reach
    numbers = list(_numbers(report))
    assert numbers and all(math.isfinite(x) and x >= 0 for x in numbers), report
    if SMOKE[script]:
        assert report["pass"], report
