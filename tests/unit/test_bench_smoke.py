"""The benchmarks run (in their quick mode) and end with one line of JSON: they do not rot.

No timing is asserted here; the benchmarks print ratios for people to read.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).parents[2] / "bench"


@pytest.mark.parametrize("script", ["store.py", "calls.py", "timetravel.py", "conversation.py", "adk.py"])
def test_bench_runs_and_reports(script: str) -> None:
    done = subprocess.run([sys.executable, str(BENCH / script), "--quick"], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert "pass" in report
