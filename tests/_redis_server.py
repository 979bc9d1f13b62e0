"""A redis-server of the test session's own: a free port on 127.0.0.1, its AOF on (``appendfsync
always``) in a folder of its own, so a test may SIGKILL it and start it again on the same files."""

from __future__ import annotations

import ctypes
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

__all__ = ["BINARY", "RedisServer", "problem"]

BINARY = shutil.which("redis-server")


def problem() -> str | None:
    """Why the session cannot start a redis-server, or ``None``."""
    if BINARY is None:
        return "no redis-server binary on PATH (apt install redis-server)"
    try:
        import redis  # noqa: F401
    except ImportError:
        return "redis-py is not installed (pip install 'tether[redis]')"
    return None


try:
    _PRCTL = ctypes.CDLL(None).prctl  # bound here: the child calls it between fork and exec, imports nothing
except (OSError, AttributeError):  # not Linux: stop_session() and atexit still stop the server
    _PRCTL = None


def _die_with_parent() -> None:
    """In the server's child process: SIGKILLed by the kernel when the test process that started it
    ends, however it ends (an xdist worker's interpreter may exit without running atexit)."""
    if _PRCTL is not None:
        _PRCTL(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class RedisServer:
    """One redis-server process; :meth:`kill` and :meth:`start` again keep its port and its files."""

    def __init__(self, folder: Path | None = None, *, appendfsync: str = "always") -> None:
        self.folder = folder or Path(tempfile.mkdtemp(prefix="tether-redis-"))
        self.port = _free_port()
        self.appendfsync = appendfsync
        self.process: subprocess.Popen[bytes] | None = None
        self.extra: list[str] = []
        """More redis-server arguments (``["--rename-command", "CONFIG", ""]``)."""

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> RedisServer:
        assert BINARY is not None, problem()
        args = [BINARY, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.folder)]
        args += ["--appendonly", "yes", "--appendfsync", self.appendfsync, "--save", ""]
        args += ["--logfile", str(self.folder / "redis.log"), "--protected-mode", "no", *self.extra]
        self.process = subprocess.Popen(
            args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, preexec_fn=_die_with_parent
        )
        self._wait_ready()
        return self

    def _wait_ready(self, timeout: float = 30.0) -> None:
        import redis

        client = redis.Redis(port=self.port, socket_connect_timeout=1)
        deadline = time.monotonic() + timeout
        try:
            while True:
                assert self.process is not None and self.process.poll() is None, self._log_tail()
                try:
                    if client.ping():
                        return
                except (redis.ConnectionError, redis.exceptions.BusyLoadingError):
                    pass
                if time.monotonic() > deadline:
                    raise TimeoutError(f"redis-server on port {self.port} did not answer: {self._log_tail()}")
                time.sleep(0.02)
        finally:
            client.close()

    def _log_tail(self) -> str:
        log = self.folder / "redis.log"
        return log.read_text()[-2000:] if log.exists() else "(no log)"

    def kill(self) -> None:
        """SIGKILL: nothing flushed, nothing said to the clients."""
        if self.process is not None and self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGKILL)
            self.process.wait()

    def stop(self) -> None:
        self.kill()
        shutil.rmtree(self.folder, ignore_errors=True)


SESSION_URL = "redis://127.0.0.1:0/0?prefix=k"
"""The kit's Redis target in ``make test``: a placeholder for the server the session starts on first use."""
_session: RedisServer | None = None


def session_server() -> RedisServer:
    """This test process's own redis-server (one per xdist worker), started on first use and stopped
    when the process ends."""
    global _session
    if _session is None:
        import atexit

        _session = RedisServer().start()
        atexit.register(_session.stop)
    return _session


def stop_session() -> None:
    """Stop this process's session server, if it started one (at the end of the test session)."""
    global _session
    if _session is not None:
        _session.stop()
        _session = None


def session_backend(url: str) -> object:
    """The kit's :class:`~tether.testing.RedisBackend` for :data:`SESSION_URL`: its namespaces live on
    :func:`session_server` (imported here, not at the top: pytest rewrites the kit's asserts only if it
    imports the kit first)."""
    from contextlib import contextmanager

    from tether.testing.backends import RedisBackend

    class SessionRedisBackend(RedisBackend):
        @contextmanager
        def namespace(self, tmp_path: Path, label: str = ""):  # type: ignore[no-untyped-def]
            self.server = session_server().url
            with super().namespace(tmp_path, label) as made:
                yield made

        def dump(self, url: str, store: object = None) -> object:
            self.server = session_server().url
            return super().dump(url, store)  # type: ignore[arg-type]

    return SessionRedisBackend(url)
