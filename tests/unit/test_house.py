"""The shape of the house, read from the source with ``ast``: a layout that shows the architecture,
imports that go one way, no room reaching into another's private parts, modules and functions of a
size a reader takes in, and user docs about tether rather than about its making.

The rules, as these tests apply them to every module of ``src/tether``:

* **Rooms.** A room is a package directly under ``tether`` (``tether.log``, ``tether.runtime``)
  or a module loose at the root (``tether.errors``). At most :data:`ROOT_MODULES` modules lie
  loose at the root; every folder of modules is a package (has its ``__init__.py``).
* **Attributes.** ``x._name`` (one leading underscore, not a dunder) is read or written only
  on ``self`` or ``cls`` (or ``super()``), or on a class defined in the same module (a class
  naming its own helper). Anything else reaches into another object's insides: give the thing a
  public name on its owner instead. Two exceptions by rule: the public API of named tuples
  (``_replace``, ``_asdict``, ``_fields``, ``_make``), whose underscore only keeps it apart from
  field names; and the short :data:`ALLOWED` list below, each with its reason.
* **Private parts stay in their room.** A module or a name with a leading underscore is imported
  only from inside its own room. What another room needs has a public name.
* **Import direction.** The imports of the whole package form no circle — those at module level,
  those inside functions and those under ``if TYPE_CHECKING:`` alike (a type named across a
  circle is a circle all the same). ``from package import module`` imports that module (its
  package runs first in any case).
* **Size.** A module is at most :data:`MODULE_LINES` lines; a function or method at most 60, from
  its ``def`` to its last line (its docstring and nested functions included): a longer one is split
  along the parts it has, each with a name. The exceptions are in :data:`LONG_FUNCTIONS`, each with
  its reason.
* **Docs.** The README and ``docs/`` speak to users: no line narrates the project's making (a
  session's, an issue's or a target's number, a "second pass", an unmet target).
"""

from __future__ import annotations

import ast
import functools
import re
import textwrap
from collections.abc import Iterator
from pathlib import Path

import tether

SRC = Path(tether.__file__).parent
NAMEDTUPLE_API = frozenset({"_replace", "_asdict", "_fields", "_make", "_field_defaults"})

# (module path under src/tether, the expression as written) -> why it is allowed.
ALLOWED: dict[tuple[str, str], str] = {
    ("integrations/adk.py", "session._storage_update_marker"): (
        "ADK's own Session field: its storage services stamp it so a stale session is refused on "
        "append, and it has no public setter; a tether session service must set it as theirs do"
    ),
    ("integrations/openai_agents.py", "original._agent_ref"): (
        "the Agents SDK's Handoff field, not an init field, so dataclasses.replace() drops it"
    ),
    ("integrations/openai_agents.py", "copy._agent_ref"): "the same field, carried to the copy",
}

ROOT_MODULES = 8
"""How many modules may lie loose at the root of the package (``__init__`` counted)."""

MODULE_LINES = 800
"""The house's ceiling for a module: past it, split by concept (a module that holds one idea may be longer
than ~600 lines, never than this)."""

FUNCTION_LINES = 60
# (module path under src/tether, the function's qualified name) -> why it may be longer.
LONG_FUNCTIONS: dict[tuple[str, str], str] = {
    ("cli/demo.py", "build_app"): (
        "the demo's script: its four tools and the nine-step task that calls them, read top to bottom "
        "as the story the demo tells"
    ),
}


@functools.cache
def _parsed() -> tuple[tuple[str, ast.Module], ...]:
    return tuple(
        (path.relative_to(SRC).as_posix(), ast.parse(path.read_text(encoding="utf-8"), str(path)))
        for path in sorted(SRC.rglob("*.py"))
    )


def _modules() -> Iterator[tuple[str, ast.Module]]:
    yield from _parsed()


def _module_name(rel: str) -> str:
    parts = ["tether", *rel.removesuffix(".py").split("/")]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _package_of(rel: str) -> str:
    """The package a module belongs to (a package's ``__init__`` belongs to that package)."""
    name = _module_name(rel)
    return name if rel.endswith("__init__.py") else name.rpartition(".")[0]


def _is_package(module: str) -> bool:
    return (SRC.parent / module.replace(".", "/") / "__init__.py").is_file()


def _is_module(module: str) -> bool:
    return _is_package(module) or (SRC.parent / (module.replace(".", "/") + ".py")).is_file()


def long_functions(rel: str, tree: ast.Module, limit: int = FUNCTION_LINES) -> list[str]:
    """Functions and methods longer than ``limit`` lines, by qualified name, not in :data:`LONG_FUNCTIONS`."""
    found = []
    for name, node in _functions(tree):
        lines = (node.end_lineno or node.lineno) - node.lineno + 1
        if lines > limit and (rel, name) not in LONG_FUNCTIONS:
            found.append(f"{rel}:{node.lineno}: {name} is {lines} lines")
    return found


def _functions(tree: ast.AST, prefix: str = "") -> Iterator[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
    """Every function and method, nested ones too, with its qualified name (``Class.method``)."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            yield prefix + node.name, node
            yield from _functions(node, f"{prefix}{node.name}.")
        elif isinstance(node, ast.ClassDef):
            yield from _functions(node, f"{prefix}{node.name}.")
        else:
            yield from _functions(node, prefix)


def private_reaches(rel: str, tree: ast.Module) -> list[str]:
    """``x._name`` where ``x`` is not ``self``/``cls``/``super()`` nor a class of this module."""
    classes = {node.name for node in ast.walk(tree) if isinstance(node, ast.ClassDef)}
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute):
            continue
        name = node.attr
        if not name.startswith("_") or name.startswith("__") or name in NAMEDTUPLE_API:
            continue
        owner = node.value
        if isinstance(owner, ast.Name) and (owner.id in ("self", "cls") or owner.id in classes):
            continue
        if isinstance(owner, ast.Call) and isinstance(owner.func, ast.Name) and owner.func.id == "super":
            continue
        text = ast.unparse(node)
        if (rel, text) not in ALLOWED:
            found.append(f"{rel}:{node.lineno}: {text}")
    return found


def _room(module: str) -> str:
    """The room of a module: the package directly under ``tether``, or the root module itself."""
    return ".".join(module.split(".")[:2])


def _is_private(module: str) -> bool:
    return any(part.startswith("_") and not part.startswith("__") for part in module.split("."))


def private_imports(rel: str, tree: ast.Module) -> list[str]:
    """Private modules, and private names, imported from another room."""
    here = _room(_module_name(rel))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [(alias.name, None) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level:
            targets = [(node.module or "", alias.name) for alias in node.names]
        else:
            continue
        for module, name in targets:
            if not module.startswith("tether") or _room(module) == here:
                continue
            if _is_private(module) or (name is not None and name.startswith("_") and not name.startswith("__")):
                found.append(f"{rel}:{node.lineno}: {ast.unparse(node)}")
                break
    return found


def imports_of(tree: ast.Module) -> Iterator[str]:
    """Every tether module a module imports: at module level, inside functions, and under ``if
    TYPE_CHECKING:``. ``from package import module`` imports the module, not the package's names."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names if alias.name.startswith("tether"))
        elif isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").startswith("tether"):
            module = node.module or ""
            submodules = [alias.name for alias in node.names if _is_module(f"{module}.{alias.name}")]
            if len(submodules) < len(node.names):
                yield module
            yield from (f"{module}.{name}" for name in submodules)


def import_graph() -> dict[str, set[str]]:
    """Which tether modules each module of tether imports."""
    members = {_module_name(rel): tree for rel, tree in _modules()}
    return {name: {m for m in imports_of(tree) if m in members and m != name} for name, tree in members.items()}


def find_circle(graph: dict[str, set[str]]) -> list[str] | None:
    """One circle of the graph, as the path around it, or ``None``."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state and (circle := visit(nxt)) is not None:
                return circle
        path.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (circle := visit(start)) is not None:
            return circle
    return None


# ------------------------------------------------------------------ the tests


def test_no_module_reaches_into_another_objects_private_attributes() -> None:
    found = [line for rel, tree in _modules() for line in private_reaches(rel, tree)]
    assert found == [], "private attributes reached from outside their object:\n" + "\n".join(found)


def test_the_allow_list_has_no_stale_entries() -> None:
    seen = {
        (rel, ast.unparse(node))
        for rel, tree in _modules()
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
    }
    assert set(ALLOWED) <= seen, set(ALLOWED) - seen


def test_private_names_are_imported_only_within_their_package() -> None:
    found = [line for rel, tree in _modules() for line in private_imports(rel, tree)]
    assert found == [], "private names imported from another package's module:\n" + "\n".join(found)


def test_no_import_circle() -> None:
    circle = find_circle(import_graph())
    assert circle is None, f"an import circle: {' -> '.join(circle or [])}"


def test_the_imports_are_read_as_a_graph() -> None:
    """The circle check sees every kind of import (so it cannot pass by reading nothing)."""
    graph = import_graph()
    assert "tether.runtime.claimed" in graph["tether.runtime.worker"]  # at module level
    assert "tether.runtime.worker" in graph["tether.runtime.app"]  # inside a function
    assert "tether.runtime.engine" in graph["tether.runtime._recording"]  # for type hints only
    assert "tether.store.sqlite" in graph["tether.store"]  # the store's URL factory, inside open_store
    assert "tether.runtime.app" not in graph["tether.runtime.worker"]  # the worker takes the engine


def host_stubs(rel: str, tree: ast.Module) -> list[str]:
    """Classes that declare attributes under ``if TYPE_CHECKING:`` in their body: a mixin naming the
    state of the class it is mixed into. A part the host holds (composition) takes what it needs."""
    return [
        f"{rel}:{node.lineno}: {node.name}"
        for node in ast.walk(tree)
        if isinstance(node, ast.ClassDef)
        for stmt in node.body
        if isinstance(stmt, ast.If) and "TYPE_CHECKING" in ast.unparse(stmt.test)
    ]


def test_no_mixin_declares_its_hosts_state() -> None:
    found = [line for rel, tree in _modules() for line in host_stubs(rel, tree)]
    assert found == [], "classes declaring their host's attributes for type checkers:\n" + "\n".join(found)


def test_at_most_eight_modules_lie_at_the_root() -> None:
    loose = sorted(path.name for path in SRC.glob("*.py"))
    assert len(loose) <= ROOT_MODULES, f"{len(loose)} modules at the root of tether (at most {ROOT_MODULES}): {loose}"


def test_every_folder_of_modules_is_a_package() -> None:
    folders = {path.parent for path in SRC.rglob("*.py")}
    missing = sorted(str(f.relative_to(SRC)) for f in folders if not (f / "__init__.py").is_file())
    assert missing == [], f"folders of modules without an __init__.py: {missing}"


MAKING = re.compile(
    r"\b(session|issue|target|stop)s? #?[0-9]+\b|\bnot met\b|\bunmet\b"
    r"|\b(second|third|fourth|fifth|sixth|seventh|another) (pass|look)\b|\bbefore (the|this) change\b",
    re.IGNORECASE,
)
"""What a line about the project's making looks like (a user reads the docs for tether, not its story)."""


def making_lines(text: str) -> list[int]:
    return [n for n, line in enumerate(text.splitlines(), 1) if MAKING.search(line)]


def test_no_docs_line_narrates_the_making() -> None:
    root = SRC.parent.parent
    pages = [root / "README.md", *sorted((root / "docs").rglob("*.md"))]
    found = [f"{p.relative_to(root)}:{n}" for p in pages if p.is_file() for n in making_lines(p.read_text())]
    assert found == [], "docs lines about the project's making (say what tether does, for users):\n" + "\n".join(found)


def test_the_checks_catch_what_they_are_for() -> None:
    """Each check on a one-line example of what it refuses, and of what it lets through."""
    reach = ast.parse("def f(ctx):\n    return ctx._append([])\n")
    assert private_reaches("runtime/run.py", reach) == ["runtime/run.py:2: ctx._append"]
    chained = ast.parse("class A:\n    def f(self):\n        return self._app._tool_spec\n")
    assert private_reaches("runtime/calls.py", chained) == ["runtime/calls.py:3: self._app._tool_spec"]
    fine = ast.parse(
        "class A:\n    def f(self, p):\n        A._x\n        super()._y\n        return p._replace(a=1), self._z\n"
    )
    assert private_reaches("x.py", fine) == []
    crossing = ast.parse(
        "from tether.cli._render import console\nfrom tether.runtime._flow import _tuple_new\n"
        "from tether.events import _fold\nimport tether.store._sql\nfrom tether.log import _x\n"
    )
    assert private_imports("runtime/calls.py", crossing) == [
        "runtime/calls.py:1: from tether.cli._render import console",
        "runtime/calls.py:3: from tether.events import _fold",
        "runtime/calls.py:4: import tether.store._sql",
        "runtime/calls.py:5: from tether.log import _x",
    ]
    typed = ast.parse("if TYPE_CHECKING:\n    from tether.runtime.app import App\ndef f():\n    import tether.log\n")
    assert list(imports_of(typed)) == ["tether.runtime.app", "tether.log"]
    stub = ast.parse("class M:\n    if TYPE_CHECKING:\n        _memory: int\n")
    assert host_stubs("log/x.py", stub) == ["log/x.py:1: M"]
    assert making_lines("fine\nA second pass at it\nissue 12 said\nthree sessions, 2 users\n") == [2, 3]
    assert find_circle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_circle({"a": {"b"}, "b": {"c"}, "c": set()}) is None
    sixty = "".join(f"    x = {n}\n" for n in range(60))  # with its def, a function of 61 lines
    method = ast.parse("class A:\n    def f(self):\n" + textwrap.indent(sixty, "    "))
    assert long_functions("x.py", method) == ["x.py:2: A.f is 61 lines"]
    assert long_functions("x.py", ast.parse("def g():\n" + sixty), limit=61) == []
    assert long_functions("cli/demo.py", ast.parse("def build_app():\n" + sixty)) == []  # allowed


def test_no_module_is_over_800_lines() -> None:
    over = {}
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        lines = len(path.read_text(encoding="utf-8").splitlines())
        if lines > MODULE_LINES:
            over[rel] = lines
    assert over == {}, f"modules past {MODULE_LINES} lines (split them by concept): {over}"


def test_no_function_is_over_60_lines() -> None:
    found = [line for rel, tree in _modules() for line in long_functions(rel, tree)]
    assert found == [], f"functions past {FUNCTION_LINES} lines (split them where the parts have names):\n" + "\n".join(
        found
    )


def test_the_long_functions_list_has_no_stale_entries() -> None:
    """Each allowed function exists and is still long: one split since is taken off the list."""
    lengths = {
        (rel, name): (node.end_lineno or node.lineno) - node.lineno + 1
        for rel, tree in _modules()
        for name, node in _functions(tree)
    }
    stale = {key for key in LONG_FUNCTIONS if lengths.get(key, 0) <= FUNCTION_LINES}
    assert stale == set(), stale
