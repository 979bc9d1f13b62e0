"""The README's example is complete: it runs as printed, and the commands it names work after it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

README = Path(__file__).parents[2] / "README.md"
TETHER = [sys.executable, "-m", "tether.cli"]


def test_readme_example_runs_and_its_commands_work(tmp_path: Path) -> None:
    example = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)[0]
    (tmp_path / "trip.py").write_text(example)
    env = {k: v for k, v in os.environ.items() if k != "TETHER_URL"}
    env["PYTHONPATH"] = str(README.parent / "src")
    first = subprocess.run([sys.executable, "trip.py"], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert first.returncode == 0, first.stderr
    assert "BA117" in first.stdout and "trip-42:2:send_invite:" in first.stdout
    again = subprocess.run([sys.executable, "trip.py"], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert again.stdout == first.stdout  # done: returned as it is, not run again
    for command in (["tasks"], ["show", "trip-42"], ["history", "trip-42"]):
        done = subprocess.run([*TETHER, *command], cwd=tmp_path, env=env, capture_output=True, text=True)
        assert done.returncode == 0, (command, done.stderr)
        assert "trip-42" in done.stdout or command == ["history", "trip-42"], done.stdout


def test_readme_retry_command_works_after_a_fix(tmp_path: Path) -> None:
    example = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)[0]
    broken = example.replace('return [{"id": "BA117"', 'return [{"id": undefined_name')
    assert broken != example
    (tmp_path / "trip.py").write_text(broken)
    env = {k: v for k, v in os.environ.items() if k != "TETHER_URL"}
    env["PYTHONPATH"] = os.pathsep.join([str(README.parent / "src"), str(tmp_path)])
    failed = subprocess.run([sys.executable, "trip.py"], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert failed.returncode != 0 and "TaskFailedError" in failed.stderr and "tether retry trip-42" in failed.stderr
    (tmp_path / "trip.py").write_text(example)  # fixed: the README's file as printed (`--app` imports it)
    retried = subprocess.run(
        [*TETHER, "retry", "trip-42", "--app", "trip:app"], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert retried.returncode == 0, retried.stderr + retried.stdout
    assert "completed" in retried.stdout
