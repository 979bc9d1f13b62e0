"""examples/agent_loop.py runs offline as a user would run it, twice, and the CLI reads what it wrote."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parents[2]


def test_agent_loop_example_runs_then_finds_its_task_done(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "TETHER_URL": f"sqlite:///{tmp_path / 'agent_loop.db'}"}
    example = str(ROOT / "examples" / "agent_loop.py")
    first = subprocess.run([sys.executable, example], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert first.returncode == 0, first.stderr
    assert "waits for 'approve_refund'" in first.stdout
    assert "ticket-1001 is completed: Refunded 49.99 (reference rf-1)" in first.stdout
    transcript = [line.split(":")[0].strip() for line in first.stdout.splitlines() if line.startswith("  ")]
    assert transcript == ["system", "user", "assistant", "tool", "tool", "assistant", "tool", "assistant"]
    second = subprocess.run([sys.executable, example], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert second.returncode == 0, second.stderr
    assert "waits for" not in second.stdout  # done: returned as it is
    assert second.stdout.splitlines()[-8:] == first.stdout.splitlines()[-8:]  # nothing appended twice
    for command in (["show", "ticket-1001"], ["history", "ticket-1001"]):
        shown = subprocess.run(
            [sys.executable, "-m", "tether.cli", *command], cwd=tmp_path, env=env, capture_output=True, text=True
        )
        assert shown.returncode == 0, shown.stderr
        assert "ticket-1001" in shown.stdout or "conversation" in shown.stdout
