"""The SQLite backend's connection policy (WAL, synchronous, busy_timeout: each line with its
reason) and its checkpoints, which copy the WAL back into the database on a thread of their own."""

from __future__ import annotations

import fcntl
import logging
import os
import sqlite3
import threading
import time
from typing import Literal

from tether.errors import ConfigurationError

__all__ = ["Checkpointer", "Durability", "connect", "wait_for_commit"]

log = logging.getLogger("tether")

Durability = Literal["normal", "full"]


def connect(path: str, durability: Durability, busy_timeout: float) -> sqlite3.Connection:
    """Open a connection with tether's policy. Each line says why.

    * ``isolation_level=None``: we issue ``BEGIN IMMEDIATE`` ourselves. A deferred
      transaction that reads and then writes can fail with SQLITE_BUSY_SNAPSHOT
      without waiting when another process committed in between; taking the write
      lock up front makes the busy handler apply.
    * ``check_same_thread=False``: a worker's heartbeat thread shares the store; every
      use is serialised by the store's own lock.
    """
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=busy_timeout)
    # WAL: readers never block the writer and the writer never blocks readers, across processes.
    mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
    if mode.lower() != "wal" and path != ":memory:":
        conn.close()
        raise ConfigurationError(f"could not put {path!r} in WAL mode (got {mode!r}); is it on a network file system?")
    # NORMAL: a commit survives a process crash; only an OS crash or power loss can lose the last
    # commits. FULL: fsync on every commit, survives power loss, at the cost of that fsync each time.
    conn.execute(f"PRAGMA synchronous={'FULL' if durability == 'full' else 'NORMAL'}")
    # Wait for the write lock instead of failing at once when another process holds it.
    conn.execute(f"PRAGMA busy_timeout={int(busy_timeout * 1000)}")
    if path != ":memory:" and durability == "normal":
        # Commits do not copy the WAL back into the database themselves: Checkpointer does, on
        # its own thread and connection, so no append pays for a checkpoint. SQLite's own
        # checkpoint stays as a net, far above where ours runs: a process that writes too little
        # to poke its checkpointer still keeps the WAL bounded when others leave it growing.
        # (At "full", SQLite's own checkpoint runs at its default threshold: see Checkpointer.)
        conn.execute(f"PRAGMA wal_autocheckpoint={Checkpointer.NET_FRAMES}")
    return conn


class Checkpointer:
    """Copies the WAL back into the database on a thread of its own, off every commit's path.

    With SQLite's automatic checkpoints, the commit that crosses 1,000 WAL pages copies them
    back (and fsyncs twice) before it returns: a cost every commit has its share of, paid in
    lumps by the one that crosses. Here the writer only counts its commits and pokes this thread, which runs
    ``wal_checkpoint(PASSIVE)`` on its own connection while writers go on writing (SQLite
    lets a checkpoint run beside a writer).

    A checkpoint that runs beside a busy writer never quite catches up, and the WAL restarts
    from its beginning only once it is wholly copied. So when the WAL has grown past
    :attr:`GATED_FRAMES`, the thread checkpoints once more holding the writers' lock file:
    with no writer in the way that pass copies the few frames left, and the next commit
    starts the WAL over. The WAL stays bounded however long writers write without a pause.

    Every connection keeps SQLite's automatic checkpoint at :attr:`NET_FRAMES`, well above
    where this thread acts: it only fires when nobody's checkpointer was poked in time (many
    processes that each write a little while the WAL grows).

    Only at ``durability="normal"``. At ``"full"`` every commit waits for an fsync of the WAL, and
    an fsync that also extends the file (a WAL that has not yet restarted, growing while this
    thread catches up) costs more than one that overwrites frames already written; fsyncs of the
    database beside it compete with the writer's. There SQLite checkpoints inline at its default
    (1,000 frames), under the writers' lock file, so each pass completes and the WAL restarts
    small, and a commit there costs less than beside this thread (``docs/store.md`` has the
    figures).
    """

    EVERY = 1000  # commits between pokes: each writes a page or more, as SQLite's own threshold counts
    GATED_FRAMES = 2000  # about 8 MB of 4 KB pages: twice SQLite's automatic threshold
    NET_FRAMES = 10000  # SQLite's automatic checkpoint, as a net (about 40 MB)

    def __init__(self, path: str, durability: Durability, busy_timeout: float) -> None:
        self._path = path
        self._durability: Durability = durability
        self._busy_timeout = busy_timeout
        self._wake = threading.Event()
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._pid = 0
        self._commits = 0  # since the last poke
        self.passes = 0  # checkpoints run, for tests and curious users
        self.gated = 0

    def committed(self) -> None:
        """A writer's connection committed: every :attr:`EVERY` commits, :meth:`poke`."""
        self._commits += 1
        if self._commits >= self.EVERY:
            self._commits = 0
            self.poke()

    def poke(self) -> None:
        thread = self._thread
        # None yet, one that died (it logged why), or we are a forked child that has none.
        if thread is None or self._pid != os.getpid() or not thread.is_alive():
            self._pid = os.getpid()
            self._thread = threading.Thread(target=self._run, name="tether-sqlite-checkpoint", daemon=True)
            self._thread.start()
        self._wake.set()

    def _run(self) -> None:
        gate: int | None = None
        try:
            gate = os.open(self._path + "-lock", os.O_RDWR | os.O_CREAT, 0o600)
            conn = connect(self._path, self._durability, self._busy_timeout)  # the store's own policy
        except (sqlite3.Error, OSError, ConfigurationError) as exc:  # the next poke starts a thread that tries again
            log.warning("checkpoints of %s cannot start: %s", self._path, exc)
            if gate is not None:
                os.close(gate)
            return
        try:
            while True:
                self._wake.wait()
                self._wake.clear()
                if self._stopping:
                    return
                try:
                    _, frames, _ = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
                    self.passes += 1
                    if frames >= self.GATED_FRAMES:
                        fcntl.flock(gate, fcntl.LOCK_EX)
                        try:
                            conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
                        finally:
                            fcntl.flock(gate, fcntl.LOCK_UN)
                        self.gated += 1
                except (sqlite3.Error, OSError) as exc:  # a checkpoint that fails is tried again at the next poke
                    log.warning("checkpoint of %s failed: %s", self._path, exc)
        finally:
            conn.close()
            os.close(gate)

    def stop(self) -> None:
        thread = self._thread
        if thread is not None and self._pid == os.getpid():
            self._stopping = True
            self._wake.set()
            thread.join()
        self._thread = None


def wait_for_commit(
    conn: sqlite3.Connection, lock: threading.RLock, timeout: float, interrupt: threading.Event | None
) -> bool:
    """Block until another connection commits (``True``), ``timeout`` passes or ``interrupt`` is set.

    ``PRAGMA data_version`` changes when another connection commits; it reads only the WAL index
    header, so looking every few milliseconds costs next to nothing. ``lock`` guards ``conn``.
    """
    deadline = time.monotonic() + timeout
    with lock:
        start = conn.execute("PRAGMA data_version").fetchone()[0]
    while True:
        if interrupt is not None and interrupt.is_set():
            return False
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False
        time.sleep(min(0.005, remaining))
        with lock:
            if conn.execute("PRAGMA data_version").fetchone()[0] != start:
                return True
