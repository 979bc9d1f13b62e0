"""What the SQLite backend needs around its queries: how its files are created (owner-only by
default), a connection that cannot change the file, and the translation of SQLite's faults about
the file (full disk, damaged page, I/O) into tether errors at the store boundary.
"""

from __future__ import annotations

import functools
import inspect
import logging
import os
import sqlite3
import urllib.parse
from collections.abc import Callable
from typing import Any, TypeVar

from tether.errors import (
    ConfigurationError,
    InvalidInputError,
    StoreCorruptError,
    StoreFullError,
    StoreUnavailableError,
    TetherError,
)
from tether.store.base import Store

__all__ = ["connect_readonly", "create_private", "file_mode", "rollback", "translate_errors"]

log = logging.getLogger("tether")
S = TypeVar("S", bound=type)


def connect_readonly(path: str, busy_timeout: float) -> sqlite3.Connection:
    """A connection that cannot change the file: ``mode=ro``, and no pragma that writes (the journal
    mode stays what it is; a WAL database is read through its WAL as usual)."""
    uri = "file:" + urllib.parse.quote(os.path.abspath(path)) + "?mode=ro"
    conn = sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False, timeout=busy_timeout)
    conn.execute(f"PRAGMA busy_timeout={int(busy_timeout * 1000)}")
    return conn


def file_mode(mode: int | str) -> int:
    """The permission bits for tether's files: an int, or octal text from a URL (``?mode=0640``)."""
    try:
        bits = int(mode, 8) if isinstance(mode, str) else mode
    except ValueError:
        bits = -1
    if not isinstance(bits, int) or isinstance(bits, bool) or not 0 <= bits <= 0o777 or not bits & 0o600 == 0o600:
        raise ConfigurationError(
            f"store option mode must be octal permission bits that let the owner read and write "
            f"(e.g. 0600, 0640, 0660), got {mode!r}"
        )
    return bits


def create_private(path: str, mode: int, *, keep: bool = False) -> int:
    """Create ``path`` with exactly ``mode`` if it does not exist (the umask may only narrow it, so
    it is set again); an existing file keeps its mode. Returns the open descriptor with ``keep``."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, mode)
    except FileExistsError:
        if not keep:
            return -1
        return os.open(path, os.O_RDWR)
    except OSError as exc:
        raise ConfigurationError(f"cannot create {path!r}: {exc.strerror}") from exc
    os.fchmod(fd, mode)
    if keep:
        return fd
    os.close(fd)
    return -1


def rollback(conn: sqlite3.Connection) -> None:
    """Roll back if a transaction is still open (SQLite ends some by itself on a full disk or an I/O
    error; a second ROLLBACK would hide the first error behind 'no transaction is active')."""
    if conn.in_transaction:
        try:
            conn.execute("ROLLBACK")
        except sqlite3.Error as exc:
            log.warning("rollback failed: %s", exc)


# SQLite's primary result codes that say what went wrong with the file, not with the query.
_FULL = {13}  # SQLITE_FULL
_CORRUPT = {11, 26}  # SQLITE_CORRUPT, SQLITE_NOTADB
_UNAVAILABLE = {5, 6, 8, 10, 14, 15}  # BUSY, LOCKED, READONLY, IOERR, CANTOPEN, PROTOCOL


def _store_error(path: str, exc: sqlite3.Error) -> TetherError:
    """A tether error for what SQLite raised: about its file (full, damaged, unavailable), about a
    value it cannot hold (InvalidInputError), or else a refused statement (TetherError)."""
    code = getattr(exc, "sqlite_errorcode", None)
    primary = code & 0xFF if isinstance(code, int) else None
    text = str(exc)
    if primary in _FULL or "disk is full" in text:
        return StoreFullError(
            f"SQLite database {path!r} cannot grow: the disk is full ({text}). Nothing was written; "
            "the task stays as it was and resumes once space is freed",
            path=path,
        )
    if primary in _CORRUPT or "malformed" in text:
        return StoreCorruptError(
            f"SQLite database {path!r} is damaged ({text}). Check it with "
            f"`sqlite3 {path} 'PRAGMA integrity_check'` and restore it from a backup "
            "(or `.recover` it into a new file)",
            path=path,
        )
    if primary in _UNAVAILABLE or isinstance(exc, sqlite3.OperationalError):
        return StoreUnavailableError(f"SQLite database {path!r} cannot be used right now: {text}")
    if isinstance(exc, sqlite3.DataError | sqlite3.IntegrityError | sqlite3.InterfaceError):
        return InvalidInputError(f"SQLite cannot store this value: {text}")
    return TetherError(f"SQLite refused the statement: {text}")


def translate_errors(cls: S) -> S:
    """Wrap the store's public methods so that no sqlite3 error crosses the store boundary: one about
    the file becomes :class:`StoreFullError`, :class:`StoreCorruptError` or
    :class:`StoreUnavailableError`, which stop a run without failing its task; a value SQLite cannot
    hold becomes :class:`InvalidInputError`."""

    for name in _STORE_METHODS:
        setattr(cls, name, _guarded(getattr(cls, name)))
    return cls


def _guarded(method: Callable[..., Any]) -> Callable[..., Any]:
    """``method`` with sqlite3's errors translated, taking the same parameters (a wrapper of
    ``*args, **kwargs`` packs a tuple and a dict on every call, and a call's two appends pay for it):
    its source is made from the method's own parameter names, its defaults are the method's."""
    params = inspect.signature(method).parameters.values()
    positional = [p.name for p in params if p.kind is p.POSITIONAL_OR_KEYWORD]
    keywords = [p.name for p in params if p.kind is p.KEYWORD_ONLY]
    if len(positional) + len(keywords) != len(params) or positional[:1] != ["self"]:
        raise TypeError(f"{method.__qualname__}: a store method takes self, then named parameters")
    signature = ", ".join(positional + (["*", *keywords] if keywords else []))
    arguments = ", ".join(positional + [f"{name}={name}" for name in keywords])
    source = (
        f"def guarded({signature}):\n"
        f"    try:\n"
        f"        return method({arguments})\n"
        f"    except sqlite3.Error as exc:\n"
        f"        raise store_error(self.path, exc) from exc\n"
    )
    namespace: dict[str, Any] = {"method": method, "sqlite3": sqlite3, "store_error": _store_error}
    exec(source, namespace)  # the names are the method's own parameters: identifiers
    guarded = namespace["guarded"]
    guarded.__defaults__ = method.__defaults__
    guarded.__kwdefaults__ = method.__kwdefaults__
    return functools.wraps(method)(guarded)


_STORE_METHODS = tuple(
    name for name, member in vars(Store).items() if callable(member) and not name.startswith("_") and name != "close"
)
"""Every method of the store protocol (``close`` aside): a method added to it is guarded too."""
