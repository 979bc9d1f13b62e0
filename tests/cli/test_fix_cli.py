"""Fix and upgrade through the real console script: tether retry, tether check, tether send, tether show."""

from __future__ import annotations

import os
import subprocess
import textwrap
from pathlib import Path

from tests.cli._console import python as python_c
from tests.cli._console import run_tether
from tests.cli.test_cli import pythonpath

AGENT = """
import tether

app = tether.App("sqlite:///agent.db")
BROKEN = {broken}

@app.tool
def draft(topic: str) -> str:
    return "about " + topic

@app.tool
def check_tone(text: str) -> str:
    return text + " (polite)"

@app.tool
def send(text: str) -> str:
    if BROKEN:
        raise ValueError("mail server says no")
    return "sent " + text

@app.task(name="mail")
def mail(ctx: tether.TaskContext) -> str:
    text = ctx.call(draft, "tether")
    {change}
    ctx.wait_for_input("approve", schema={{"type": "boolean"}})
    return ctx.call(send, text)
"""


def write(folder: Path, *, broken: bool, change: str = "") -> None:
    (folder / "agent.py").write_text(textwrap.dedent(AGENT.format(broken=broken, change=change)))
    for cached in (folder / "__pycache__").glob("agent*"):
        cached.unlink()


def tether_cli(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TETHER_URL": "", "COLUMNS": "200", "PYTHONPATH": pythonpath(folder)}
    return run_tether(*args, cwd=folder, env=env)


def python(folder: Path, code: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": pythonpath(folder)}
    return python_c(code, cwd=folder, env=env)


def test_send_retry_show_and_check_from_the_shell(tmp_path: Path) -> None:
    write(tmp_path, broken=True)
    started = python(tmp_path, "from agent import app; print(app.run('mail', task_id='m1').status.value)")
    assert started.stdout.strip() == "awaiting_input", started.stderr
    typo = tether_cli(tmp_path, "send", "m1", "aprove", "true", "--db", "agent.db")
    assert typo.returncode != 0 and "waits for input 'approve', not 'aprove'" in typo.stdout + typo.stderr
    bad = tether_cli(tmp_path, "send", "m1", "approve", '"yes"', "--db", "agent.db")
    assert bad.returncode != 0 and "schema" in bad.stdout + bad.stderr
    assert tether_cli(tmp_path, "send", "m1", "approve", "true", "--db", "agent.db").returncode == 0
    failed = tether_cli(tmp_path, "resume", "m1", "--app", "agent:app")
    assert failed.returncode == 1 and "mail server says no" in failed.stdout and "tether retry m1" in failed.stdout
    shown = tether_cli(tmp_path, "show", "m1", "--db", "agent.db")
    assert shown.returncode == 0 and "ValueError" in shown.stdout and "tether retry m1" in shown.stdout
    refused = tether_cli(tmp_path, "retry", "m1", "--app", "agent:app")
    assert refused.returncode == 1  # still broken: it fails again, and says so
    write(tmp_path, broken=False)
    fixed = tether_cli(tmp_path, "retry", "m1", "--app", "agent:app", "--actor", "ops")
    assert fixed.returncode == 0 and "completed" in fixed.stdout, fixed.stdout + fixed.stderr
    again = tether_cli(tmp_path, "retry", "m1", "--app", "agent:app")
    assert again.returncode != 0 and "only a failed task can be retried" in again.stdout + again.stderr
    history = tether_cli(tmp_path, "history", "m1", "--db", "agent.db", "--json")
    assert "RetryRequested" in history.stdout and "ops" in history.stdout


def test_check_exits_one_when_stored_tasks_would_diverge(tmp_path: Path) -> None:
    write(tmp_path, broken=False)
    started = python(tmp_path, "from agent import app; app.run('mail', task_id='old')")
    assert started.returncode == 0, started.stderr
    clean = tether_cli(tmp_path, "check", "--app", "agent:app")
    assert clean.returncode == 0 and "1 task(s) checked: 1 replay cleanly, 0 diverge" in clean.stdout
    # A call inserted before recorded work (the draft) shifts its ordinal: the old task cannot replay.
    source = (tmp_path / "agent.py").read_text()
    drafted = '    text = ctx.call(draft, "tether")'
    (tmp_path / "agent.py").write_text(source.replace(drafted, '    ctx.call(check_tone, "first")\n' + drafted))
    diverging = tether_cli(tmp_path, "check", "--app", "agent:app")
    assert diverging.returncode == 1, diverging.stdout + diverging.stderr
    assert "old" in diverging.stdout and "call #1 draft" in diverging.stdout and "check_tone" in diverging.stdout
    as_json = tether_cli(tmp_path, "check", "--app", "agent:app", "--json")
    assert as_json.returncode == 1 and '"task_id": "old"' in as_json.stdout.replace('":"', '": "')
