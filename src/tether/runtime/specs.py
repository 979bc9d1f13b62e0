"""Declarations: what ``@app.task`` and ``@app.tool`` learn about a function, once."""

from __future__ import annotations

import dataclasses
import datetime
import decimal
import enum
import functools
import inspect
import typing
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, TypeAdapter

from tether.errors import InvalidInputError, TaskDefinitionError, TetherError
from tether.model.status import Phases
from tether.runtime._flow import CURRENT_CALL, RUNNING_TASK
from tether.runtime.ledger import OnUnknown, check_on_unknown
from tether.runtime.retry import NO_RETRY, Retry

__all__ = ["START_OPTIONS", "Registry", "TaskSpec", "ToolSpec"]

START_OPTIONS = frozenset({"task_id", "user_id", "session_id"})
"""Keyword arguments of ``app.run``/``app.start`` that a task's own parameters may not use."""


def _hints(fn: Callable[..., Any]) -> dict[str, Any]:
    """Resolved annotations; a function defined inside another also sees the names it closes over."""
    code = getattr(fn, "__code__", None)
    closure = getattr(fn, "__closure__", None) or ()
    local = {}
    if code is not None:
        for name, cell in zip(code.co_freevars, closure, strict=False):
            try:
                local[name] = cell.cell_contents
            except ValueError:  # an empty cell
                continue
    try:
        return typing.get_type_hints(fn, localns=local)
    except Exception:  # unresolvable forward references: rehydration is a convenience, not a must
        return {}


_RICH = (BaseModel, datetime.date, datetime.time, datetime.timedelta, uuid.UUID, decimal.Decimal, enum.Enum)


def _rich(annotation: Any) -> bool:
    """Whether values of this type come back from JSON as something else (a model, a datetime...)."""
    if isinstance(annotation, type):
        return issubclass(annotation, _RICH) or dataclasses.is_dataclass(annotation) or annotation in (set, frozenset)
    return any(_rich(arg) for arg in typing.get_args(annotation))


def _adapter(annotation: Any) -> TypeAdapter[Any] | None:
    """A validator for values that come back from JSON as something richer (a pydantic model, a
    dataclass, a datetime, ... or a container of them), so replay returns what the live run did."""
    if annotation is None or not _rich(annotation):
        return None
    try:
        return TypeAdapter(annotation)
    except Exception:  # a type pydantic cannot build: the JSON form is returned as is
        return None


def guarded(fn: Callable[..., Any], name: str) -> Callable[..., Any]:
    """``fn`` as ``@app.tool`` returns it: the same function, refusing to run unrecorded inside a task."""

    def refuse() -> None:
        task = RUNNING_TASK.get()
        if task is not None and CURRENT_CALL.get() is None:
            raise TetherError(
                f"tool {name!r} was called directly inside task {task!r}, so it ran unrecorded: on resume "
                f"it would run again. Call it as ctx.call({name}, ...)"
            )

    if inspect.iscoroutinefunction(fn):

        @functools.wraps(fn)
        async def guarded_async(*args: Any, **kwargs: Any) -> Any:
            refuse()
            return await fn(*args, **kwargs)

        return guarded_async

    @functools.wraps(fn)
    def guarded_sync(*args: Any, **kwargs: Any) -> Any:
        refuse()
        return fn(*args, **kwargs)

    return guarded_sync


ReplayCheck = Literal["args", "name"]


@dataclass(eq=False)
class ToolSpec:
    """A callable as tether runs it: its name, retry policy, compensation and argument binding."""

    fn: Callable[..., Any]
    name: str
    retry: Retry = NO_RETRY
    readonly: bool = False
    compensate: Callable[..., Any] | None = None
    on_unknown: OnUnknown = "retry"
    replay_check: ReplayCheck = "args"
    """What a replay compares with the record: the tool and its arguments, or the tool's name only."""
    _positional: tuple[str, ...] | None = field(default=None, repr=False)
    _signature: inspect.Signature | None = field(default=None, repr=False)
    _returns: TypeAdapter[Any] | None = field(default=None, repr=False)

    @classmethod
    def of(
        cls,
        fn: Callable[..., Any],
        *,
        name: str | None = None,
        retry: Retry | None = None,
        readonly: bool = False,
        compensate: Callable[..., Any] | None = None,
        on_unknown: OnUnknown = "retry",
        replay_check: ReplayCheck = "args",
    ) -> ToolSpec:
        if not callable(fn):
            raise TaskDefinitionError(f"a tool must be callable, got {type(fn).__name__}")
        if replay_check not in ("args", "name"):
            raise TaskDefinitionError(f"replay_check= takes 'args' or 'name', got {replay_check!r}")
        check_on_unknown(on_unknown)
        if compensate is not None and not callable(compensate):
            raise TaskDefinitionError(f"compensate= must be callable, got {type(compensate).__name__}")
        try:
            signature: inspect.Signature | None = inspect.signature(fn)
        except (TypeError, ValueError):
            signature = None
        positional: tuple[str, ...] | None = None
        if signature is not None:
            kinds = [p.kind for p in signature.parameters.values()]
            if all(k is inspect.Parameter.POSITIONAL_OR_KEYWORD for k in kinds):
                positional = tuple(signature.parameters)  # the fast path: zip names with values
        returns = _adapter(_hints(fn).get("return"))
        return cls(
            fn=fn,
            name=name or getattr(fn, "__name__", None) or repr(fn),
            retry=retry or NO_RETRY,
            readonly=readonly,
            compensate=compensate,
            on_unknown=on_unknown,
            replay_check=replay_check,
            _positional=positional,
            _signature=signature,
            _returns=returns,
        )

    def bind(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        """The call's arguments by parameter name: what is recorded and hashed into the key."""
        names = self._positional
        if names is not None and len(args) <= len(names):
            bound = dict(zip(names, args)) if args else {}  # noqa: B905 (fewer args than names: the rest by name)
            if kwargs:
                for key in kwargs:
                    if key in bound:
                        raise InvalidInputError(f"{self.name}() got multiple values for argument {key!r}")
                bound.update(kwargs)
            return bound
        if self._signature is None:
            return {"args": list(args), "kwargs": kwargs}
        try:
            ba = self._signature.bind(*args, **kwargs)
        except TypeError as exc:
            raise InvalidInputError(f"{self.name}(): {exc}") from None
        return dict(ba.arguments)

    def rehydrate(self, result: Any) -> Any:
        """A recorded result as the tool's return annotation promises (a model from its JSON)."""
        if self._returns is None or result is None:
            return result
        return self._returns.validate_python(result)


@dataclass(eq=False)
class TaskSpec:
    """A task function: its name, parameters, typed data model and phase machine."""

    fn: Callable[..., Any]
    name: str
    is_async: bool
    params: tuple[str, ...]
    state: type[BaseModel] | None = None
    upcast: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = field(default_factory=dict)
    phases: Phases | None = None
    _adapters: dict[str, TypeAdapter[Any]] = field(default_factory=dict, repr=False)
    _signature: inspect.Signature = field(init=False, repr=False)
    """``fn``'s, worked out once: :meth:`bind` runs at every start of a run."""

    def __post_init__(self) -> None:
        self._signature = inspect.signature(self.fn)

    @classmethod
    def of(
        cls,
        fn: Callable[..., Any],
        *,
        name: str | None = None,
        state: type[BaseModel] | None = None,
        upcast: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] | None = None,
        phases: Phases | None = None,
    ) -> TaskSpec:
        label = str(name or getattr(fn, "__name__", repr(fn)))
        if not callable(fn):
            raise TaskDefinitionError(f"a task must be a function, got {type(fn).__name__}")
        parameters = list(inspect.signature(fn).parameters.values())
        if not parameters:
            raise TaskDefinitionError(f"task {label!r} must take the context as its first parameter (ctx)")
        own = parameters[1:]
        clash = sorted(START_OPTIONS & {p.name for p in own})
        if clash:
            raise TaskDefinitionError(
                f"task {label!r} has parameter(s) {', '.join(clash)}, which app.run() uses for itself "
                f"({', '.join(sorted(START_OPTIONS))}); rename them"
            )
        for p in own:
            if p.kind not in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY):
                raise TaskDefinitionError(
                    f"task {label!r}: parameter {p.name!r} is {p.kind.description}; a task's inputs are "
                    "recorded by name, so use ordinary or keyword-only parameters"
                )
        if state is not None and not (isinstance(state, type) and issubclass(state, BaseModel)):
            raise TaskDefinitionError(f"task {label!r}: state= must be a pydantic model class, got {state!r}")
        if upcast and state is None:
            raise TaskDefinitionError(f"task {label!r}: upcast= needs state= (a model with schema_version)")
        hints = _hints(fn)
        adapters = {p.name: a for p in own if (a := _adapter(hints.get(p.name))) is not None}
        return cls(
            fn=fn,
            name=label,
            is_async=inspect.iscoroutinefunction(fn),
            params=tuple(p.name for p in own),
            state=state,
            upcast=dict(upcast or {}),
            phases=phases,
            _adapters=adapters,
        )

    @property
    def data_version(self) -> int | None:
        if self.state is None:
            return None
        field_info = self.state.model_fields.get("schema_version")
        if field_info is None:
            return None
        return int(field_info.get_default(call_default_factory=True))

    def bind(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        """The task's inputs by name (without the context)."""
        signature = self._signature
        try:
            ba = signature.bind(None, *args, **kwargs)
        except TypeError as exc:
            raise InvalidInputError(f"task {self.name!r}: {exc}") from None
        ba.apply_defaults()
        arguments = dict(ba.arguments)
        arguments.pop(next(iter(signature.parameters)))
        return arguments

    def inputs_for_call(self, inputs: dict[str, Any]) -> dict[str, Any]:
        """Recorded inputs as the function's annotations promise (models rebuilt from JSON)."""
        return {
            name: self._adapters[name].validate_python(value) if name in self._adapters else value
            for name, value in inputs.items()
        }


class Registry:
    """What an app has registered: its tasks, by name and by function, and its tools. Any other
    callable a task calls becomes a tool (with the defaults) the first time it is called.

    Example:
        >>> import tether
        >>> app = tether.App("memory://")
        >>> @app.tool(readonly=True)
        ... def lookup(q: str) -> str:
        ...     return q
        >>> app.registry.tool(lookup).readonly
        True
    """

    def __init__(self) -> None:
        self._tasks: dict[str, TaskSpec] = {}
        self._task_fns: dict[Callable[..., Any], TaskSpec] = {}
        self._tools: dict[Callable[..., Any], ToolSpec] = {}

    def add_task(self, spec: TaskSpec) -> None:
        existing = self._tasks.get(spec.name)
        if existing is not None and existing.fn is not spec.fn:
            raise TaskDefinitionError(f"a different task is already registered as {spec.name!r}")
        self._tasks[spec.name] = spec
        self._task_fns[spec.fn] = spec

    def add_tool(self, spec: ToolSpec, *fns: Callable[..., Any]) -> None:
        """Register ``spec`` under each of ``fns`` (the function and the wrapper ``@app.tool`` returns)."""
        for fn in fns:
            self._tools[fn] = spec

    def tool(self, fn: Callable[..., Any]) -> ToolSpec:
        """The tool ``fn`` is: as registered, or learnt now (any callable can be a recorded call)."""
        spec = self._tools.get(fn)
        if spec is None:
            spec = self._tools[fn] = ToolSpec.of(fn)
        return spec

    def task(self, task: Callable[..., Any] | str) -> TaskSpec:
        """The task registered under this name or as this function; refused, naming the known ones."""
        spec = self._tasks.get(task) if isinstance(task, str) else self._task_fns.get(task)
        if spec is None:
            label = task if isinstance(task, str) else getattr(task, "__qualname__", repr(task))
            known = ", ".join(sorted(self._tasks)) or "none"
            raise TaskDefinitionError(f"{label!r} is not a task of this app (registered: {known}); use @app.task")
        return spec
