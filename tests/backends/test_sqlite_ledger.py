"""The ledger on SQLite survives a real SIGKILL between an effect and its result: the effect ran once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import tether


def test_ledger_survives_a_real_sigkill(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 't.db'}"
    script = textwrap.dedent(f"""
        import os, signal, tether
        app = tether.App({url!r})
        def effect():
            open({str(tmp_path / "effects")!r}, 'a').write('x')
            os.kill(os.getpid(), signal.SIGKILL)
        app.ledger.once('pay:7', effect)
    """)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[2] / "src")}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, timeout=60)
    assert done.returncode == -signal.SIGKILL
    app = tether.App(url)
    with pytest.raises(tether.OutcomeUnknownError):
        app.ledger.once("pay:7", lambda: "no", on_unknown="raise")
    assert app.ledger.once("pay:7", lambda: "again", on_unknown="retry") == "again"
    assert (tmp_path / "effects").read_text() == "x"
