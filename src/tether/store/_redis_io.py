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
    """One pub/sub connection per store, started by the first wait: each message on the store's
    channel bumps the signal that waiting workers block on. A dropped connection is reopened, and
    the signal bumped once it is (a commit may have passed unseen meanwhile)."""

    def __init__(self, client: redis.Redis, channel: str) -> None:
        self.signal = ChangeSignal()
        self._client = client
        self._channel = channel
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()

    def start(self) -> None:
        with self._lock:
            if self._thread is not None or self._stop.is_set():
                return
            self._thread = threading.Thread(target=self._run, name="tether-redis-listener", daemon=True)
            self._thread.start()
        self._ready.wait(5)  # subscribed before the first wait counts: a commit after it is seen

    def _run(self) -> None:
        while not self._stop.is_set():
            pubsub = self._client.pubsub(ignore_subscribe_messages=True)  # type: ignore[no-untyped-call]
            try:
                pubsub.subscribe(self._channel)
                pubsub.get_message(timeout=1.0, ignore_subscribe_messages=False)  # the confirmation
                if self._ready.is_set():
                    self.signal.bump()
                self._ready.set()
                self._listen(pubsub)
            except (RedisConnectionError, RedisTimeoutError, OSError):
                self._stop.wait(0.2)
            finally:
                _quietly(pubsub.close)

    def _listen(self, pubsub: Any) -> None:
        while not self._stop.is_set():
            message = pubsub.get_message(timeout=0.2)
            if message is not None and message.get("type") == "message":
                self.signal.bump()

    def stop(self) -> None:
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(2)


def _quietly(fn: Callable[[], object]) -> None:
    try:
        fn()
    except Exception:  # closing a connection that is already gone
        log.debug("tether: closing a Redis pub/sub connection failed", exc_info=True)
