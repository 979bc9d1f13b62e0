"""Child processes that start with their heavy imports already done.

A crash test runs a child script many times: once for reference, then, for every kill point, a child
that SIGKILLs itself and fresh children that resume it. Each ``python child.py`` spends most of its
life importing (an agent SDK takes 1.5-3.5 s; the run itself a fraction of a second). ``ForkServer``
starts one process that imports the named modules and then does nothing but fork: every run is
``os.fork()`` of that process followed by the script run as ``__main__``, so it is still a process of
its own, with its own pid, memory, database connections, file locks and exit, and a SIGKILL kills it
and nothing else. It begins where a fresh ``python child.py`` is once those imports are done: the
server opens no database, starts no thread (checked before every fork), and runs nothing of the
script's. Its exit status comes back as ``subprocess.run`` gives it (``-9`` for SIGKILL).

Before each fork the server moves everything it holds into the collector's permanent generation
(``gc.freeze()``, as CPython's documentation advises before a fork without exec): the child's
collections, and the one the interpreter makes at exit, then leave those objects alone. Without it, a
child's exit walked the server's whole heap, every object a page it had to copy, and took 0.5-0.7 s
of a run that otherwise takes 0.1-0.3 s. The child's own objects are collected as usual; the
server's are import-time objects only (it opens nothing and runs nothing of a script's).

What forked runs share is the server's hash seed, which fresh interpreters would each draw anew. A
test that kills a child and resumes it elsewhere uses two servers, so the resuming process hashes
strings differently from the killed one, as a fresh process would.

Run as a script, this file is the server: ``python _forkserver.py MODULE...`` imports the modules,
then reads one JSON request a line on stdin (``{"argv": [script, arg...], "timeout": seconds}``, and
optionally the child's ``"cwd"`` and ``"env"``) and
answers each with one JSON line (``returncode``, ``stdout``, ``stderr``, ``timed_out``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

ForkServers = Callable[[Sequence[str], Mapping[str, str]], "tuple[ForkServer, ForkServer]"]
"""The ``fork_servers`` fixture (tests/conftest.py): ``(preload, env) -> (first_lives, next_lives)``."""


class ForkServer:
    """A server process with ``preload`` imported; ``run`` forks a child from it per call."""

    def __init__(self, preload: Sequence[str], env: Mapping[str, str]) -> None:
        self._proc = subprocess.Popen(
            [sys.executable, __file__, *preload],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=dict(env),
            text=True,
        )
        self._first = True

    def run(
        self,
        script: Path | str,
        *args: str,
        timeout: float = 120,
        cwd: Path | str | None = None,
        env: Mapping[str, str] | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """Runs ``python script args...`` in a child forked from the server, as ``subprocess.run``
        with ``capture_output=True, text=True`` would; raises ``subprocess.TimeoutExpired`` after
        killing a child that outlives ``timeout`` (the server's imports do not count against the first).
        ``cwd`` and ``env``, as ``subprocess.run`` takes them, are the child's own (by default the
        server's): the child moves there and takes that environment before the script runs, and the
        folders of its ``PYTHONPATH`` go first on ``sys.path``, as a fresh interpreter would put them."""
        argv = [str(script), *args]
        request: dict[str, Any] = {"argv": argv, "timeout": timeout}
        if cwd is not None:
            request["cwd"] = str(cwd)
        if env is not None:
            request["env"] = dict(env)
        assert self._proc.stdin is not None and self._proc.stdout is not None
        self._proc.stdin.write(json.dumps(request) + "\n")
        self._proc.stdin.flush()
        line = self._proc.stdout.readline()
        if not line:
            self._proc.wait(timeout=10)
            raise RuntimeError(f"the fork server exited with {self._proc.returncode} (its stderr is above)")
        reply = json.loads(line)
        if reply["timed_out"]:
            raise subprocess.TimeoutExpired(argv, timeout, reply["stdout"], reply["stderr"])
        return subprocess.CompletedProcess(argv, reply["returncode"], reply["stdout"], reply["stderr"])

    def close(self) -> None:
        assert self._proc.stdin is not None and self._proc.stdout is not None
        self._proc.stdin.close()
        self._proc.wait(timeout=30)
        self._proc.stdout.close()


def _serve(preload: Sequence[str]) -> tuple[dict[str, Any], IO[bytes], IO[bytes]]:
    """The server's loop; returns only in a forked child, with the request it is to run."""
    import gc
    import importlib
    import signal
    import threading

    requests = os.fdopen(os.dup(0), "r")
    replies = os.fdopen(os.dup(1), "w")
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)  # a child reads nothing it was not given, as under subprocess.run
    os.dup2(2, 1)  # and nothing the server's imports print reaches the reply channel
    os.close(devnull)
    del sys.path[0]  # this file's folder: each child gets its own script's, as `python script.py` does
    for name in preload:
        importlib.import_module(name)
    for line in requests:
        request = json.loads(line)
        if threading.active_count() != 1:
            raise RuntimeError(f"a thread started in the fork server: {threading.enumerate()}; forking is unsafe")
        out, err = tempfile.TemporaryFile(), tempfile.TemporaryFile()
        sys.stdout.flush()
        sys.stderr.flush()
        gc.freeze()  # what the server holds stays out of the child's collections (see the module docstring)
        pid = os.fork()
        if pid == 0:
            requests.close()
            replies.close()
            return request, out, err
        deadline = time.monotonic() + request["timeout"]
        pause, timed_out = 0.001, False
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            if time.monotonic() > deadline:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                timed_out, status = True, 0
                break
            time.sleep(pause)
            pause = min(pause * 2, 0.01)
        out.seek(0)
        err.seek(0)
        reply = {
            "returncode": os.waitstatus_to_exitcode(status),
            "stdout": out.read().decode(errors="replace"),
            "stderr": err.read().decode(errors="replace"),
            "timed_out": timed_out,
        }
        out.close()
        err.close()
        replies.write(json.dumps(reply) + "\n")
        replies.flush()
    sys.exit(0)


def _become(request: dict[str, Any], out: IO[bytes], err: IO[bytes]) -> Any:
    """In the forked child: stdout and stderr to the server's capture files, the request's folder and
    environment, then the script as ``__main__``. Its exit (an exception's traceback and status 1,
    ``sys.exit``, or the end of the script) is the interpreter's own, atexit handlers and all."""
    import runpy

    os.dup2(out.fileno(), 1)
    os.dup2(err.fileno(), 2)
    out.close()
    err.close()
    if "cwd" in request:
        os.chdir(request["cwd"])
    if "env" in request:
        os.environ.clear()
        os.environ.update(request["env"])
        paths = [os.path.abspath(p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
        sys.path[:0] = [p for p in paths if p not in sys.path]
    argv = request["argv"]
    sys.argv = list(argv)
    sys.path.insert(0, os.path.dirname(os.path.abspath(argv[0])))
    return runpy.run_path(argv[0], run_name="__main__")


if __name__ == "__main__":
    child_request, child_out, child_err = _serve(sys.argv[1:])
    _become(child_request, child_out, child_err)
