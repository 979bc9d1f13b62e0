"""The ``tether`` console script and ``python -c``, each run in a process of its own that starts with
tether imported.

``run_tether(...)`` runs the console script pip installed (``.venv/bin/tether``, the file a shell runs) as
``__main__`` in a child forked from a server that has imported tether and its CLI
(tests/_forkserver.py), in the test's folder and environment: its own process, pid, exit status,
stdout and stderr, as ``subprocess.run([TETHER, ...], capture_output=True, text=True)`` gives them,
without the ~0.5 s of CPU each fresh interpreter spends importing tether (the CLI tests run a few
hundred). ``python(code, ...)`` runs ``code`` the same way. The server starts on first use, one per
test process, and serves one child at a time. ``tests/cli/test_cli.py``'s help test still runs the
script in a fresh interpreter, as a shell does.
"""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Mapping
from pathlib import Path

from tests._forkserver import ForkServer

TETHER = shutil.which("tether", path=os.path.dirname(sys.executable)) or "tether"
SRC = Path(__file__).parents[2] / "src"
# tether's CLI and what its commands import when they run (the SQLite store, the schema check of an
# answer, diff's JSON patch, the tables).
PRELOAD = ("tether", "tether.cli", "tether.store.sqlite", "jsonschema", "jsonpatch", "rich.console", "rich.table")

_lock = threading.Lock()
_server: list[ForkServer] = []


def _forked(
    script: str, args: tuple[str, ...], cwd: Path, env: Mapping[str, str], timeout: float
) -> subprocess.CompletedProcess[str]:
    with _lock:
        if not _server:
            _server.append(ForkServer(PRELOAD, {**os.environ, "PYTHONPATH": str(SRC)}))
            atexit.register(_server[0].close)
        return _server[0].run(script, *args, timeout=timeout, cwd=cwd, env=env)


def run_tether(*args: str, cwd: Path, env: Mapping[str, str], timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """``tether ARGS`` in ``cwd`` with ``env``; the completed process (``returncode`` -9 if it was killed)."""
    done = _forked(TETHER, args, cwd, env, timeout)
    return subprocess.CompletedProcess(["tether", *args], done.returncode, done.stdout, done.stderr)


def python(code: str, *, cwd: Path, env: Mapping[str, str], timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """``python -c CODE`` in ``cwd`` with ``env`` (``cwd`` first on ``sys.path``, as ``-c`` puts it)."""
    with tempfile.TemporaryDirectory() as folder:
        script = Path(folder) / "code.py"
        script.write_text(f"import sys\nsys.path.insert(0, {str(cwd)!r})\n{code}\n")
        done = _forked(str(script), (), cwd, env, timeout)
    return subprocess.CompletedProcess([sys.executable, "-c", code], done.returncode, done.stdout, done.stderr)
