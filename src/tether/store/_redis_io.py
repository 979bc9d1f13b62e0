"""The Redis backend's connection policy: the client it opens, what the server promises about
persistence (and whether that is enough for the store's ``durability``), error translation, and the
pub/sub listener that wakes waiting workers."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import redis
from redis.backoff import ExponentialBackoff
from redis.exceptions import BusyLoadingError, ResponseError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.retry import Retry

from tether.errors import ConfigurationError, StoreUnavailableError
from tether.store.base import ChangeSignal

__all__ = ["PERSISTENCE", "Listener", "check_durability", "connect", "read_persistence", "unavailable"]

log = logging.getLogger("tether")
T = TypeVar("T")

PERSISTENCE = {
    "always": "every write is fsynced to the AOF before Redis replies: a crash loses nothing acknowledged",
    "everysec": "the AOF is fsynced once a second: a crash of the machine can lose about a second of "
    "acknowledged writes",
    "no": "the AOF is fsynced when the OS decides (often 30 s): a crash of the machine can lose that much",
    "off": "no AOF (appendonly no): a crash loses everything since the last RDB snapshot, if any",
    "unknown": "the server refuses CONFIG GET, so what it keeps after a crash cannot be checked",
}
"""What a Redis crash can lose, by the server's persistence (``appendfsync``, or ``off``/``unknown``)."""
_RANK = {"always": 3, "everysec": 2, "no": 1, "off": 0}

# A restarted server refuses connections, then answers LOADING while it reads its AOF: commands are
# retried through both (about 15 s in all), then the store reports itself unavailable.
_RETRIES = 40
_RETRY_ERRORS = [RedisConnectionError, RedisTimeoutError, BusyLoadingError]


def connect(url: str) -> redis.Redis:
    """A thread-safe client (one pool) on the server ``url`` names; raw bytes in and out."""
    return redis.Redis.from_url(
        url,
        decode_responses=False,
        socket_connect_timeout=5,
        socket_timeout=30,  # no tether command blocks on the server: a silent socket is a dead one
        health_check_interval=30,
        retry=Retry(ExponentialBackoff(cap=0.5, base=0.02), _RETRIES),
        retry_on_error=_RETRY_ERRORS,
    )


@contextmanager
def unavailable(where: str) -> Iterator[None]:
    """Redis's connection faults, once its retries are spent, as :class:`StoreUnavailableError`."""
    try:
        yield
    except (RedisConnectionError, RedisTimeoutError) as exc:
        raise StoreUnavailableError(f"Redis at {where} is unavailable: {exc}") from exc


def read_persistence(client: redis.Redis) -> str:
    """The server's persistence as one word of :data:`PERSISTENCE`."""
    try:
        config = client.config_get("append*")
    except ResponseError:  # CONFIG renamed or disabled (managed services often do)
        return "unknown"
    values = {
        k.decode() if isinstance(k, bytes) else k: v.decode() if isinstance(v, bytes) else v for k, v in config.items()
    }
    if values.get("appendonly") != "yes":
        return "off"
    return str(values.get("appendfsync", "unknown"))


def check_durability(durability: str, persistence: str, accept: str | None, where: str) -> None:
    """Refuse ``durability="full"`` on a server that does not fsync every write, unless the user
    accepted what it keeps (``accept_durability``: that word of :data:`PERSISTENCE`, or a weaker one)."""
    if durability not in ("normal", "full"):
        raise ConfigurationError(f"durability must be 'normal' or 'full', got {durability!r}")
    if accept is not None and accept not in PERSISTENCE:
        raise ConfigurationError(f"Redis option accept_durability={accept!r} is not one of {', '.join(PERSISTENCE)}")
    if durability != "full" or persistence == "always":
        return
    if accept is not None and (accept == persistence or _RANK.get(persistence, -1) >= _RANK.get(accept, 99)):
        log.info(
            "tether: Redis at %s keeps %s (%s), accepted by accept_durability=%s",
            where,
            persistence,
            PERSISTENCE[persistence],
            accept,
        )
        return
    if persistence == "unknown":
        fix = (
            "enable CONFIG for this client, or open with ?accept_durability=unknown once you know the server "
            "fsyncs every write"
        )
    else:
        fix = (
            "run CONFIG SET appendonly yes and CONFIG SET appendfsync always (and put both in redis.conf), "
            f"or open with ?accept_durability={persistence} to accept what the server keeps"
        )
    raise ConfigurationError(
        f"durability='full' needs a Redis server that fsyncs every write (appendonly yes, appendfsync always), "
        f"but {where} has persistence '{persistence}': {PERSISTENCE[persistence]}. Fix: {fix}"
    )


class Listener:
    """One pub/sub connection per store, opened by the first wait and subscribed to the channels its
    waiters asked for: ``<prefix>:chg`` carries every commit, ``<prefix>:run`` only those that may
    have made a task claimable (what a worker with nothing to run waits for), so that a store whose
    waiters are workers is not sent every append of every run. Each message bumps the signal of its
    channel's waiters. A dropped connection is reopened, and each signal bumped once its channel is
    subscribed again (a commit may have passed unseen meanwhile)."""

    def __init__(self, client: redis.Redis, prefix: str) -> None:
        self._client = client
        self._every, self._claimable = f"{prefix}:chg".encode(), f"{prefix}:run".encode()
        self._signals = {self._every: ChangeSignal(), self._claimable: ChangeSignal()}
        self._wanted: list[bytes] = []  # the channels waiters asked for, in the order they asked
        self._joined: set[bytes] = set()  # the channels the server confirmed, on this connection or a past one
        self._cond = threading.Condition()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def wait(self, timeout: float, interrupt: threading.Event | None, *, claimable: bool) -> bool:
        """Block until the next commit (``claimable``: the next that may have made a task claimable),
        ``timeout`` or ``interrupt``; ``True`` when it came."""
        channel = self._claimable if claimable else self._every
        self._join(channel)
        return self._signals[channel].wait(timeout, interrupt)

    def _join(self, channel: bytes) -> None:
        """Have the listening thread subscribe to ``channel`` (starting it), and wait until the server
        has confirmed it (at most 5 s), so that a commit after the first wait begins is seen."""
        with self._cond:
            if channel in self._joined or self._stop.is_set():
                return
            if channel not in self._wanted:
                self._wanted.append(channel)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="tether-redis-listener", daemon=True)
                self._thread.start()
            self._cond.wait_for(lambda: channel in self._joined or self._stop.is_set(), 5)

    def _run(self) -> None:
        while not self._stop.is_set():
            pubsub = self._client.pubsub()  # type: ignore[no-untyped-call]
            try:
                self._listen(pubsub)
            except (RedisConnectionError, RedisTimeoutError, OSError):
                self._stop.wait(0.2)
            finally:
                _quietly(pubsub.close)

    def _listen(self, pubsub: Any) -> None:
        asked = 0  # how many of the wanted channels this connection subscribed (redis-py renews them on a reconnect)
        while not self._stop.is_set():
            if len(self._wanted) > asked:  # only grows: a channel asked for meanwhile joins here
                with self._cond:
                    new = self._wanted[asked:]
                pubsub.subscribe(*new)
                asked += len(new)
            message = pubsub.get_message(timeout=0.2)
            if message is None:
                continue
            if message["type"] == "message":
                self._signals[message["channel"]].bump()
            elif message["type"] == "subscribe":
                self._confirmed(message["channel"])

    def _confirmed(self, channel: bytes) -> None:
        with self._cond:
            again = channel in self._joined
            self._joined.add(channel)
            self._cond.notify_all()
        if again:  # subscribed anew after a dropped connection: a commit may have passed unseen
            self._signals[channel].bump()

    def stop(self) -> None:
        self._stop.set()
        with self._cond:
            self._cond.notify_all()  # a first wait still waiting for its subscription ends now
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(2)


def _quietly(fn: Callable[[], object]) -> None:
    try:
        fn()
    except Exception:  # closing a connection that is already gone
        log.debug("tether: closing a Redis pub/sub connection failed", exc_info=True)
