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

``run`` waits for the child as ``subprocess.run`` does; ``start`` returns at once with a handle that
waits, polls and signals it as ``subprocess.Popen``'s does (a test that kills a process from outside,
or races two), and can send its stdout to a path of the test's (a FIFO it reads line by line). A
server runs any number of children at once.

Run as a script, this file is the server: ``python _forkserver.py MODULE...`` imports the modules,
then reads one JSON request a line on stdin (``{"id": n, "argv": [script, arg...], "timeout":
seconds}``, and optionally the child's ``"cwd"``, ``"env"`` and ``"stdout"`` path, and ``"stderr":
"stdout"``). For each it answers with one JSON line once the child is forked (``id``, ``pid``) and
one when it has exited (``id``, ``returncode``, ``stdout``, ``stderr``, ``timed_out``). At the end of
its input it kills the children still running.
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

ForkServers = Callable[[Sequence[str], Mapping[str, str]], "tuple[ForkServer, ForkServer]"]
"""The ``fork_servers`` fixture (tests/conftest.py): ``(preload, env) -> (first_lives, next_lives)``."""


class ForkServer:
    """A server process with ``preload`` imported; ``run`` and ``start`` fork a child from it per call.
    The process starts with the first request: a test process that uses only one server of a pair
    never pays for the other's imports."""

    def __init__(self, preload: Sequence[str], env: Mapping[str, str]) -> None:
        self._argv = [sys.executable, __file__, *preload]
        self._env = dict(env)
        self._proc: subprocess.Popen[str] | None = None
        self._ids = itertools.count()
        self._changed = threading.Condition()
        self._pids: dict[int, int] = {}
        self._exits: dict[int, dict[str, Any]] = {}
        self._gone = False
        self._reader = threading.Thread(target=self._read_replies, name="fork-server-replies", daemon=True)

    def _server(self) -> subprocess.Popen[str]:
        """The server process, started on first use (called holding ``_changed``)."""
        if self._proc is None:
            self._proc = subprocess.Popen(
                self._argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=self._env, text=True
            )
            self._reader.start()
        return self._proc

    def _read_replies(self) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        for line in self._proc.stdout:
            reply = json.loads(line)
            with self._changed:
                if "returncode" in reply:
                    self._exits[reply["id"]] = reply
                else:
                    self._pids[reply["id"]] = reply["pid"]
                self._changed.notify_all()
        self._proc.stdout.close()
        with self._changed:
            self._gone = True
            self._changed.notify_all()

    def _await(self, table: dict[int, Any], request_id: int, timeout: float | None) -> Any:
        """What the server said of ``request_id`` in ``table``; None if ``timeout`` passed first."""
        with self._changed:
            if not self._changed.wait_for(lambda: request_id in table or self._gone, timeout):
                return None
            if request_id not in table:
                assert self._proc is not None
                self._proc.wait(timeout=10)
                raise RuntimeError(f"the fork server exited with {self._proc.returncode} (its stderr is above)")
            return table.pop(request_id)

    def start(
        self,
        script: Path | str,
        *args: str,
        timeout: float = 120,
        cwd: Path | str | None = None,
        env: Mapping[str, str] | None = None,
        stdout: Path | str | None = None,
        stderr_to_stdout: bool = False,
    ) -> ForkedProcess:
        """Starts ``python script args...`` in a child forked from the server and returns at once. The
        server SIGKILLs a child that outlives ``timeout``. ``cwd`` and ``env``, as ``subprocess.run``
        takes them, are the child's own (by default the server's): the child moves there and takes
        that environment before the script runs, and the folders of its ``PYTHONPATH`` go first on
        ``sys.path``, as a fresh interpreter would put them. ``stdout``: a path the child writes its
        output to (opened for writing: a FIFO blocks the child until the test opens it to read).
        ``stderr_to_stdout``: its stderr goes where its stdout goes, as ``stderr=subprocess.STDOUT``."""
        argv = [str(script), *args]
        request_id = next(self._ids)
        request: dict[str, Any] = {"id": request_id, "argv": argv, "timeout": timeout}
        for name, value in (("cwd", cwd), ("stdout", stdout), ("stderr", "stdout" if stderr_to_stdout else None)):
            if value is not None:
                request[name] = str(value)
        if env is not None:
            request["env"] = dict(env)
        with self._changed:
            server = self._server()
            assert server.stdin is not None
            server.stdin.write(json.dumps(request) + "\n")
            server.stdin.flush()
        return ForkedProcess(self, request_id, self._await(self._pids, request_id, None), argv, timeout)

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
        ``cwd`` and ``env`` as for :meth:`start`."""
        return self.start(script, *args, timeout=timeout, cwd=cwd, env=env).result()

    def close(self) -> None:
        if self._proc is None:
            return  # never used, never started
        assert self._proc.stdin is not None
        self._proc.stdin.close()
        self._proc.wait(timeout=30)
        self._reader.join(timeout=30)


class ForkedProcess:
    """A child :meth:`ForkServer.start` forked: waited, polled and signalled as a ``subprocess.Popen``."""

    def __init__(self, server: ForkServer, request_id: int, pid: int, argv: list[str], timeout: float) -> None:
        self._server, self._id, self.pid, self.args, self._timeout = server, request_id, pid, argv, timeout
        self._exit: dict[str, Any] | None = None
        self.returncode: int | None = None

    def _exited(self, timeout: float | None) -> bool:
        if self._exit is None:
            self._exit = self._server._await(self._server._exits, self._id, timeout)
            if self._exit is None:
                return False
            self.returncode = self._exit["returncode"]
        return True

    def poll(self) -> int | None:
        """Its exit status if it has exited, else None."""
        self._exited(0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        """Its exit status (``-9`` for SIGKILL); ``subprocess.TimeoutExpired`` if ``timeout`` passes first."""
        if not self._exited(timeout):
            raise subprocess.TimeoutExpired(self.args, timeout or 0)
        assert self.returncode is not None
        return self.returncode

    def result(self) -> subprocess.CompletedProcess[str]:
        """Waits for it; what it printed, as ``subprocess.run(capture_output=True, text=True)`` gives it."""
        self.wait()
        assert self._exit is not None
        if self._exit["timed_out"]:
            raise subprocess.TimeoutExpired(self.args, self._timeout, self._exit["stdout"], self._exit["stderr"])
        return subprocess.CompletedProcess(
            self.args, self._exit["returncode"], self._exit["stdout"], self._exit["stderr"]
        )

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, sig)

    def kill(self) -> None:
        self.send_signal(9)

    def terminate(self) -> None:
        self.send_signal(15)


def _serve(preload: Sequence[str]) -> tuple[dict[str, Any], IO[bytes], IO[bytes]]:
    """The server's loop; returns only in a forked child, with the request it is to run."""
    import gc
    import importlib
    import select
    import signal

    requests = os.dup(0)
    replies = os.fdopen(os.dup(1), "w")
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)  # a child reads nothing it was not given, as under subprocess.run
    os.dup2(2, 1)  # and nothing the server's imports print reaches the reply channel
    os.close(devnull)
    del sys.path[0]  # this file's folder: each child gets its own script's, as `python script.py` does
    for name in preload:
        importlib.import_module(name)

    def answer(reply: dict[str, Any]) -> None:
        replies.write(json.dumps(reply) + "\n")
        replies.flush()

    running: dict[int, tuple[int, IO[bytes], IO[bytes], float]] = {}  # pid -> id, captures, deadline
    unread, reading, pause = b"", True, 0.001
    while reading or running:
        ready, _, _ = select.select([requests] if reading else [], [], [], pause if running else None)
        if ready:
            chunk = os.read(requests, 1 << 16)
            if not chunk:  # the client is gone: so are the children it left running
                reading = False
                for pid in running:
                    os.kill(pid, signal.SIGKILL)
            unread += chunk
        while b"\n" in unread:
            line, _, unread = unread.partition(b"\n")
            request = json.loads(line)
            if threading.active_count() != 1:
                raise RuntimeError(f"a thread started in the fork server: {threading.enumerate()}; forking is unsafe")
            out, err = tempfile.TemporaryFile(), tempfile.TemporaryFile()
            sys.stdout.flush()
            sys.stderr.flush()
            gc.freeze()  # what the server holds stays out of the child's collections (see the module docstring)
            pid = os.fork()
            if pid == 0:
                os.close(requests)
                replies.close()
                for _, *captures, _ in running.values():
                    for capture in captures:
                        capture.close()
                return request, out, err
            running[pid] = (request["id"], out, err, time.monotonic() + request["timeout"])
            answer({"id": request["id"], "pid": pid})
            pause = 0.001
        for pid, (request_id, out, err, deadline) in list(running.items()):
            done, status = os.waitpid(pid, os.WNOHANG)
            timed_out = False
            if not done:
                if time.monotonic() <= deadline:
                    continue
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                timed_out, status = True, 0
            del running[pid]
            out.seek(0)
            err.seek(0)
            answer(
                {
                    "id": request_id,
                    "returncode": os.waitstatus_to_exitcode(status),
                    "stdout": out.read().decode(errors="replace"),
                    "stderr": err.read().decode(errors="replace"),
                    "timed_out": timed_out,
                }
            )
            out.close()
            err.close()
        pause = min(pause * 2, 0.01)
    sys.exit(0)


def _become(request: dict[str, Any], out: IO[bytes], err: IO[bytes]) -> Any:
    """In the forked child: stdout and stderr to the server's capture files (stdout to the request's
    path if it names one), the request's folder and environment, then the script as ``__main__``. Its
    exit (an exception's traceback and status 1, ``sys.exit``, or the end of the script) is the
    interpreter's own, atexit handlers and all."""
    import runpy

    if "stdout" in request:
        to = os.open(request["stdout"], os.O_WRONLY)
        os.dup2(to, 1)
        os.close(to)
    else:
        os.dup2(out.fileno(), 1)
    os.dup2(1 if request.get("stderr") == "stdout" else err.fileno(), 2)
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
