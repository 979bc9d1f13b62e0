"""One conflict-retry loop: :func:`tether.log.conflicts.retry_on_conflict` is the only code in
``src/tether`` that catches :class:`ConflictError` inside a loop, read from the source with ``ast``.
A read-decide-write that another writer may beat passes its attempt to that loop, which holds the
policy once: how many tries, that a lost lease is never retried, and the error raised at the end."""

from __future__ import annotations

import ast
import gc
import textwrap
import weakref
from pathlib import Path

import pytest

import tether
from tether.errors import ConflictError, LeaseLostError
from tether.log.conflicts import retry_on_conflict

SRC = Path(tether.__file__).parent
THE_LOOP = ("log/conflicts.py", "retry_on_conflict")


def _caught(handler: ast.ExceptHandler) -> set[str]:
    """The names an ``except`` clause catches (``ConflictError``, ``errors.ConflictError``, tuples)."""
    found: set[str] = set()
    for node in ast.walk(handler.type) if handler.type is not None else ():
        if isinstance(node, ast.Name):
            found.add(node.id)
        elif isinstance(node, ast.Attribute):
            found.add(node.attr)
    return found


_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)
_LOOPS = (ast.For, ast.AsyncFor, ast.While)


def _retry_loops(source: str) -> list[tuple[str, int]]:
    """Each function (by qualified name) with an ``except ConflictError`` inside a ``for`` or ``while``
    of its own (a nested function's loop belongs to that function), and the line of its ``try``."""
    found: list[tuple[str, int]] = []

    def walk(node: ast.AST, names: tuple[str, ...], in_loop: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, _SCOPES):
                walk(child, (*names, getattr(child, "name", "<lambda>")), False)
                continue
            if isinstance(child, ast.Try | ast.TryStar) and in_loop:
                if any("ConflictError" in _caught(h) for h in child.handlers):
                    found.append((".".join(names), child.lineno))
            walk(child, names, in_loop or isinstance(child, _LOOPS))

    walk(ast.parse(source), (), False)
    return found


def test_the_check_finds_a_hand_written_retry_loop() -> None:
    source = textwrap.dedent(
        """
        class Keys:
            def _append(self, event):
                for _ in range(20):
                    try:
                        return self._stream.append([event], self._stream.version())
                    except (errors.ConflictError, TaskNotFoundError):
                        continue

        def fine(stream):
            try:
                return stream.append([])
            except ConflictError:
                return None

        def outer():
            while True:
                def inner():  # its try is not inside a loop of its own
                    try:
                        pass
                    except ConflictError:
                        pass
        """
    )
    assert _retry_loops(source) == [("Keys._append", 5)]


def test_retry_on_conflict_is_the_only_conflict_retry_loop() -> None:
    found = []
    for path in sorted(SRC.rglob("*.py")):
        if path.name.startswith("test_"):
            continue  # the conformance kit's checks (tether.testing): they race writers to see conflicts happen
        module = path.relative_to(SRC).as_posix()
        for function, line in _retry_loops(path.read_text(encoding="utf-8")):
            if (module, function) != THE_LOOP:
                found.append(f"{module}:{line} {function}")
    assert not found, (
        "these catch ConflictError inside a loop of their own; pass the attempt to "
        f"tether.log.conflicts.retry_on_conflict instead: {found}"
    )
    module, function = THE_LOOP
    assert [f for f, _ in _retry_loops((SRC / module).read_text(encoding="utf-8"))] == [function]


def _conflict(expected: int = 1) -> ConflictError:
    return ConflictError("s", expected=expected, actual=expected + 1)


def test_on_conflict_runs_between_tries_and_may_stop_them() -> None:
    seen: list[int] = []
    tries = iter(range(10))

    def attempt() -> int:
        n = next(tries)
        if n < 3:
            raise _conflict(n)
        return n

    assert retry_on_conflict(attempt, stream="s", on_conflict=lambda c: seen.append(c.expected or 0)) == 3
    assert seen == [0, 1, 2]

    between: list[int] = []
    with pytest.raises(ConflictError) as raised:
        retry_on_conflict(lambda: (_ for _ in ()).throw(_conflict(7)), stream="s", tries=3, on_conflict=between.append)
    assert len(between) == 2  # before the second and the third try, never after the last
    assert (raised.value.task_id, raised.value.expected, raised.value.actual) == ("s", 7, 8)


def test_no_limit_of_its_own_and_a_lost_lease_is_never_retried() -> None:
    count = 0

    def attempt() -> None:
        nonlocal count
        count += 1
        raise _conflict()

    def enough(conflict: ConflictError) -> None:
        if count == 500:
            raise conflict

    with pytest.raises(ConflictError):
        retry_on_conflict(attempt, stream="s", tries=None, on_conflict=enough)
    assert count == 500  # past TRIES: only on_conflict stopped it

    lost: list[int] = []

    def leased() -> None:
        lost.append(1)
        raise LeaseLostError("s", token=1, current=2)

    with pytest.raises(LeaseLostError):
        retry_on_conflict(leased, stream="s", tries=None, on_conflict=lambda _: None)
    assert lost == [1]


def test_a_retry_after_a_conflict_stops_at_a_lost_lease_and_tries_count_the_first() -> None:
    outcomes: list[Exception] = [_conflict(), LeaseLostError("s", token=1, current=2)]
    tried: list[Exception] = []

    def attempt() -> None:
        tried.append(outcomes[len(tried)])
        raise tried[-1]

    with pytest.raises(LeaseLostError):
        retry_on_conflict(attempt, stream="s", tries=None)
    assert len(tried) == 2  # the conflict tried again once; the lost lease never

    once: list[int] = []
    with pytest.raises(ConflictError):
        retry_on_conflict(lambda: once.append(1) or (_ for _ in ()).throw(_conflict()), stream="s", tries=1)
    assert once == [1]


def test_a_conflict_met_on_the_way_keeps_no_frame_alive() -> None:
    """A conflict's traceback holds the frames it passed through: kept in the loop's frame after it
    returns, it would keep the caller's locals (a run's context) until the collector ran."""

    class Held:
        pass

    def caller() -> weakref.ref[Held]:
        held = Held()
        first = [True]

        def attempt() -> int:
            if first.pop() if first else False:
                raise _conflict()
            return 1

        assert retry_on_conflict(attempt, stream="s") == 1
        return weakref.ref(held)

    gc.disable()
    try:
        assert caller()() is None  # freed by reference counting alone
    finally:
        gc.enable()


def test_a_run_that_meets_a_foreign_append_raises_its_conflict_alone() -> None:
    """A run's append tried again after a conflict raises what stopped it (here, another writer's
    record in its task), not chained onto the first, internal conflict ("During handling...")."""
    from tether.events import ObservationRecorded

    app = tether.App("memory://")
    other = tether.App(app.store)

    @app.tool
    def first() -> str:
        other.log.append("t", [ObservationRecorded(key="price", value=1)], other.state("t").version)
        return "one"

    @app.task
    def job(ctx: tether.TaskContext) -> str:
        return str(ctx.call(first))

    with pytest.raises(ConflictError) as raised:
        app.run("job", task_id="t")
    assert raised.value.__context__ is None and raised.value.__cause__ is None
