"""What every command shares: the group, the one app (and store) a command opens, the options,
task ids given by prefix, and errors as one line or as a JSON body with the error's code."""

from __future__ import annotations

import functools
import getpass
import os
import shlex
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import click
import orjson

import tether
from tether.checks import MAX_LIMIT
from tether.errors import ConfigurationError, InvalidInputError, TaskNotFoundError, TetherError
from tether.store import Store, TaskFilter, resolve_url

if TYPE_CHECKING:
    from click.shell_completion import CompletionItem

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}

# Commands in the order a user meets them, whichever module defines them.
ORDER = (
    "demo",
    "tasks",
    "show",
    "history",
    "logs",
    "state",
    "diff",
    "fork",
    "replay",
    "check",
    "resume",
    "retry",
    "send",
    "rewind",
    "cancel",
    "worker",
    "serve",
    "keys",
    "langgraph",
)
# Command groups that live with an optional integration, imported only when run (or asked for help),
# so the core install runs every other command without them: name -> (module, group, extra, help).
LAZY = {
    "langgraph": (
        "tether.integrations.langgraph_cli",
        "cli",
        "langgraph",
        "LangGraph threads kept by TetherSaver: list them, show one's state, list its events.",
    ),
}
_APP = "tether.app"  # where a command keeps the app it opened, for the error handler to reuse


class _Command(click.Command):
    """A command whose arguments click refuses (a missing option, a value out of range) answers a
    ``--json`` caller in JSON too: code ``invalid_input``, exit status 2."""

    def make_context(
        self, info_name: str | None, args: list[str], parent: click.Context | None = None, **extra: Any
    ) -> click.Context:
        as_json = "--json" in args
        try:
            return super().make_context(info_name, args, parent=parent, **extra)
        except click.UsageError as exc:
            if not as_json:
                raise
            _emit_error({"code": InvalidInputError.code, "message": exc.format_message()}, exc.exit_code)


class _Group(click.Group):
    command_class = _Command


class _InOrder(_Group):
    """Commands listed in the order a user meets them, not alphabetically; the :data:`LAZY` groups
    imported when first used."""

    group_class = _Group

    def list_commands(self, ctx: click.Context) -> list[str]:
        rank = {name: i for i, name in enumerate(ORDER)}
        names = [*self.commands, *(name for name in LAZY if name not in self.commands)]
        return sorted(names, key=lambda name: rank.get(name, len(rank)))  # stable: the rest as defined

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.commands or cmd_name not in LAZY:
            return super().get_command(ctx, cmd_name)
        return _lazy_group(cmd_name)


def _lazy_group(name: str) -> click.Command:
    """The group ``name`` from its integration, or — the integration's extra not installed — a
    stand-in whose help says so and whose every use fails with the install command."""
    import importlib

    module_name, attribute, extra, summary = LAZY[name]
    try:
        group: click.Command = getattr(importlib.import_module(module_name), attribute)
    except ImportError as exc:
        missing = f"tether {name} needs the {extra!r} extra ({exc}): pip install 'tether[{extra}]'"

        @click.command(
            name, context_settings={**CONTEXT, "ignore_unknown_options": True}, help=f"{summary} ({missing})"
        )
        @click.argument("args", nargs=-1, type=click.UNPROCESSED)
        def unavailable(args: tuple[str, ...]) -> None:
            raise click.ClickException(missing)

        return unavailable
    return group


@click.group(cls=_InOrder, context_settings=CONTEXT)
@click.version_option(tether.__version__, "-V", "--version")
def main() -> None:
    """tether: durable state for AI agents. Inspect tasks, their history and their state."""


def store_url(db: str | None) -> str:
    """The store ``--db`` names: ``--db``, else ``$TETHER_URL``, else ``./tether.db`` — the order
    ``tether.App()`` follows (:func:`tether.store.resolve_url`)."""
    return resolve_url(db)


def existing_url(db: str | None) -> str:
    """:func:`store_url`, refused when it names a SQLite file that does not exist: no command but
    ``demo`` creates a database (a typo in ``--db`` would leave an empty one behind)."""
    url = store_url(db)
    path = url[len("sqlite:///") :].partition("?")[0] if url.startswith("sqlite:///") else None
    if path is not None and not Path(path).exists():
        raise ConfigurationError(
            f"no database at {path!r}; run `tether demo` or your app to create one, "
            "or point --db (or TETHER_URL) at yours"
        )
    return url


def open_existing(db: str | None) -> Store:
    """The store ``--db`` names, which must exist (:func:`existing_url`), closed when the command ends."""
    store = tether.open_store(existing_url(db))
    click.get_current_context().call_on_close(store.close)
    return store


def where_option(db: str | None) -> str:
    """`` --db DB`` to repeat in a hint, when the command was given one."""
    return f" --db {shlex.quote(db)}" if db else ""


def _open(db: str | None, *, write: bool = False) -> tether.App:
    """The app over the store ``--db`` names, in the tenant ``--tenant`` names, opened once per
    command (and closed when it ends).

    Verbs that only read open SQLite read-only: they never create, migrate or re-configure a file
    (not even its journal mode). Only verbs that write (``fork``, ``send``) may.
    """
    url = existing_url(db)
    if not write and not url.startswith("memory:"):
        app = tether.App(tether.open_store(url, readonly=True), tenant=current_tenant())
    else:
        app = tether.App(url, tenant=current_tenant())
    ctx = click.get_current_context()
    ctx.meta[_APP] = app
    ctx.call_on_close(app.close)
    return app


def current_tenant() -> str:
    return str(click.get_current_context().meta.get("tether.tenant") or "default")


def _remember_tenant(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    ctx.meta["tether.tenant"] = value
    return value


def db_option(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``--db`` and ``--tenant``: which store, and whose tasks in it."""
    fn = click.option(
        "--tenant",
        metavar="NAME",
        envvar="TETHER_TENANT",
        expose_value=False,
        callback=_remember_tenant,
        help="the tenant to look in (default: $TETHER_TENANT, then 'default')",
    )(fn)
    return click.option(
        "--db", metavar="URL", help="store URL or SQLite path (default: $TETHER_URL, then ./tether.db)"
    )(fn)


def complete_task_id(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[CompletionItem]:
    """Shell completion of a task id: the ids in the store ``--db`` (or ``$TETHER_URL``) names that
    start with what is typed, newest first, each with its type and status. Completion never fails:
    no store, or one that cannot be read, completes nothing."""
    from click.shell_completion import CompletionItem

    db = ctx.params.get("db")
    try:
        url = existing_url(db if isinstance(db, str) else None)
        store = tether.open_store(url, **({} if url.startswith("memory:") else {"readonly": True}))
        try:
            tenant = str(ctx.meta.get("tether.tenant") or os.environ.get("TETHER_TENANT") or "default")
            rows = store.list_tasks(tenant, TaskFilter(id_prefix=incomplete or None), limit=50)
        finally:
            store.close()
    except Exception:  # a completion must not print a traceback into the user's shell
        return []
    return [CompletionItem(row.task_id, help=f"{row.type} {row.status}") for row in rows]


def task_argument(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``TASK_ID``: a task's id or any unique prefix of it, completed by the shell from the store."""
    return click.argument("task_id", shell_complete=complete_task_id)(fn)


def json_option(fn: Callable[..., Any]) -> Callable[..., Any]:
    return click.option("--json", "as_json", is_flag=True, help="machine-readable JSON on stdout")(fn)


def _os_user() -> str | None:
    """Who runs this command, by the OS's account name; ``None`` where the OS cannot say."""
    try:
        return getpass.getuser() or None
    except (OSError, KeyError, ImportError):  # no login name in the environment and no passwd entry
        return None


def actor_option(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``--actor``: who does a write action, recorded in the task's history (default: the OS user)."""
    return click.option(
        "--actor", default=_os_user, show_default="your OS user name", help="who does this (recorded in the history)"
    )(fn)


def app_option(fn: Callable[..., Any]) -> Callable[..., Any]:
    return click.option(
        "--app",
        "app_spec",
        required=True,
        metavar="MODULE:APP",
        help="where your tasks are registered, e.g. myagent:app",
    )(fn)


def errors_as_messages(fn: Callable[..., Any]) -> Callable[..., Any]:
    """A TetherError becomes a one-line message, or with ``--json`` its JSON body on stdout (its
    stable ``code``, message and fields), exit status 1; never a traceback. A value the command
    itself refuses (a usage error) is ``invalid_input`` in JSON, exit status 2."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        as_json = bool(kwargs.get("as_json"))
        try:
            return fn(*args, **kwargs)
        except TetherError as exc:
            _fail(exc, as_json)
        except click.UsageError as exc:
            if not as_json:
                raise
            _emit_error({"code": InvalidInputError.code, "message": exc.format_message()}, exc.exit_code)

    return wrapper


def _fail(exc: TetherError, as_json: bool) -> NoReturn:
    body = exc.to_dict()
    hint = ""
    if isinstance(exc, TaskNotFoundError):
        similar = _similar(exc.task_id)
        if similar is not None:
            body["did_you_mean"] = similar
            hint = f"; did you mean {', '.join(similar)}?" if similar else "; `tether tasks` lists the tasks"
    if as_json:
        _emit_error(body, 1)
    raise click.ClickException(f"{exc}{hint}") from None


def _emit_error(body: dict[str, Any], status: int) -> NoReturn:
    click.echo(orjson.dumps(body, default=str).decode())
    sys.exit(status)


def _similar(task_id: str) -> list[str] | None:
    """Task ids like ``task_id`` in the store the command opened (None: it opened none)."""
    import difflib

    app: tether.App | None = click.get_current_context().meta.get(_APP)
    if app is None:
        return None
    try:
        ids = [row.task_id for row in app.log.list(limit=1000)]
    except TetherError:
        return None
    close = difflib.get_close_matches(task_id, ids, n=3, cutoff=0.5)
    prefixed = [i for i in ids if i.startswith(task_id)][:3]
    return list(dict.fromkeys(prefixed + close))


class AmbiguousTaskIdError(InvalidInputError):
    """A task id prefix that starts more than one task's id (``code`` stays ``invalid_input``)."""

    def __init__(self, prefix: str, matches: list[str], total: int) -> None:
        shown = "\n  ".join(matches[:10]) + (f"\n  … and {total - 10:,} more" if total > 10 else "")
        super().__init__(f"{prefix!r} is the start of {total:,} task ids:\n  {shown}")
        self.prefix = prefix
        self.matches = matches[:10]


def _tid(app: tether.App, text: str) -> str:
    """The task ``text`` names: its id, or the one task whose id starts with it. An ambiguous
    prefix is refused, listing the matches; no match is left for the verb to report."""
    if not text:
        return text
    try:
        app.log.get(text)
        return text
    except TaskNotFoundError:
        pass
    starting = TaskFilter(id_prefix=text)  # every task, not the newest 10,000 as once
    matches = [r.task_id for r in app.store.list_tasks(app.tenant, starting, limit=10)]
    if len(matches) == 1:
        return matches[0]
    if matches:
        raise AmbiguousTaskIdError(text, matches, app.store.count_tasks(app.tenant, starting, cap=MAX_LIMIT))
    return text


def _app_hint() -> str:
    """How the command names the app: ``--app``, or the worker's MODULE:APP argument."""
    command = click.get_current_context().command
    return (
        "--app" if any(p.name == "app_spec" and isinstance(p, click.Option) for p in command.params) else "MODULE:APP"
    )


def _meant(module_name: str, module: Any) -> str:
    """``; did you mean support:app?``, naming the tether.App objects ``module`` holds, or ``""``."""
    apps = sorted(name for name, value in vars(module).items() if isinstance(value, tether.App))
    return f"; did you mean {' or '.join(f'{module_name}:{name}' for name in apps)}?" if apps else ""


def _load_app(spec: str) -> tether.App:
    """``module:attribute`` → the App object (the current directory is importable); the command's
    one app, whose store it uses for everything."""
    import importlib

    module_name, _, attribute = spec.partition(":")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    if not module_name or not attribute:
        expected = f"expected module:app (e.g. myagent:app), got {spec!r}"
        try:  # a module named alone: say which of its apps was meant
            meant = _meant(module_name, importlib.import_module(module_name)) if module_name else ""
        except ImportError:
            meant = ""
        raise click.BadParameter(expected + meant, param_hint=_app_hint())
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise click.BadParameter(f"cannot import {module_name!r}: {exc}", param_hint=_app_hint()) from None
    app = getattr(module, attribute, None)
    if not isinstance(app, tether.App):
        found = (
            f"has no attribute {attribute!r}"
            if not hasattr(module, attribute)
            else f"has {attribute!r}, a {type(app).__name__}, not a tether.App"
        )
        there = _meant(module_name, module) or "; it defines no tether.App (make one: app = tether.App(...))"
        raise click.BadParameter(f"module {module_name!r} ({module.__file__}) {found}{there}", param_hint=_app_hint())
    click.get_current_context().meta[_APP] = app
    return app
