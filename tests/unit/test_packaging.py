"""What a package index and an installer read: the licence, the metadata, every imported package
declared, plain psycopg in the extra, the token counter an explicit choice, framework extras open to
the next minor with a check at import that names the tested range."""

from __future__ import annotations

import ast
import sys
import tomllib
import warnings
from pathlib import Path

import pytest

import tether
from tether.conversation import EstimateCounter, TiktokenCounter, default_counter
from tether.errors import ConfigurationError
from tether.integrations import _versions

ROOT = Path(__file__).parents[2]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
# import name -> distribution, where they differ
DISTRIBUTIONS = {
    "agents": "openai-agents",
    "google": "google-adk",
    "pydantic_ai": "pydantic-ai-slim",
    "pydantic_core": "pydantic-core",
    "langchain_core": "langchain-core",
    "opentelemetry": "opentelemetry-api",
    "psycopg_pool": "psycopg_pool",
}


def _name(requirement: str) -> str:
    for stop in "<>=![; ":
        requirement = requirement.split(stop)[0]
    return requirement.strip().lower().replace("_", "-")


def test_licence_file_matches_the_declared_licence() -> None:
    assert PROJECT["license"] == "MIT" and PROJECT["license-files"] == ["LICENSE"]
    text = (ROOT / "LICENSE").read_text()
    assert text.startswith("MIT License") and "WITHOUT WARRANTY OF ANY KIND" in text


def test_metadata_a_package_index_shows() -> None:
    assert len(PROJECT["keywords"]) >= 5
    classifiers = PROJECT["classifiers"]
    assert "Typing :: Typed" in classifiers and "Programming Language :: Python :: 3.11" in classifiers
    assert PROJECT["dynamic"] == ["version"] and "version" not in PROJECT
    assert f'__version__ = "{tether.__version__}"' in (ROOT / "src/tether/__init__.py").read_text()


def test_every_imported_third_party_package_is_declared() -> None:
    declared = {_name(r) for r in PROJECT["dependencies"]}
    for requirements in PROJECT["optional-dependencies"].values():
        declared |= {_name(r) for r in requirements if not r.startswith("tether[")}
    imported: set[str] = set()
    for path in (ROOT / "src/tether").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                imported |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                imported.add(node.module.split(".")[0])
    third_party = imported - set(sys.stdlib_module_names) - {"tether"}
    missing = sorted(m for m in third_party if _name(DISTRIBUTIONS.get(m, m)) not in declared)
    assert missing == []


def test_the_postgres_extra_leaves_the_psycopg_build_to_the_application() -> None:
    extras = PROJECT["optional-dependencies"]
    assert "psycopg>=3.2" in extras["postgres"] and not any("[binary]" in r for r in extras["postgres"])
    assert any(r.startswith("psycopg[binary]") for r in extras["test"])  # the tests' install keeps working


def test_a_session_counts_with_the_estimate_whatever_is_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    class FakeTiktoken:
        @staticmethod
        def get_encoding(name: str) -> object:
            raise AssertionError("tiktoken was used without being chosen")

    monkeypatch.setitem(sys.modules, "tiktoken", FakeTiktoken)
    assert isinstance(default_counter(), EstimateCounter)
    monkeypatch.setitem(sys.modules, "tiktoken", None)  # not installed
    with pytest.raises(ConfigurationError, match=r"pip install 'tether\[tiktoken\]'"):
        TiktokenCounter.of("cl100k_base")
    assert PROJECT["optional-dependencies"]["tiktoken"] == ["tiktoken>=0.7"]


def test_framework_extras_admit_the_next_minor_and_the_adapters_say_when_untested(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    extras = PROJECT["optional-dependencies"]
    for extra, distribution in (
        ("openai-agents", "openai-agents"),
        ("pydantic-ai", "pydantic-ai-slim"),
        ("adk", "google-adk"),
        ("langgraph", "langgraph"),
        ("langgraph", "langgraph-checkpoint"),
    ):
        first, series = _versions.TESTED[distribution]
        major, minor = (int(p) for p in series.split("."))
        [requirement] = [r for r in extras[extra] if _name(r) == distribution]
        assert requirement.endswith(f",<{major}.{minor + 2}"), requirement  # the tested minor and the next
        assert _versions.tested_range(distribution) == f">={first},<{major}.{minor + 1}"
    versions = {"openai-agents": "0.24.3"}
    monkeypatch.setattr(_versions.metadata, "version", lambda name: versions[name])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _versions.check_tested("openai-agents", "tether.integrations.openai_agents")  # tested: silent
    versions["openai-agents"] = "0.25.0"
    with pytest.warns(_versions.UntestedVersionWarning, match=r"tested with openai-agents>=0\.24\.0,<0\.25; 0\.25\.0"):
        _versions.check_tested("openai-agents", "tether.integrations.openai_agents")
    versions["openai-agents"] = "0.23.9"
    with pytest.warns(_versions.UntestedVersionWarning):
        _versions.check_tested("openai-agents", "tether.integrations.openai_agents")


def test_framework_floors_are_the_first_tested_versions_and_the_suite_runs_on_them() -> None:
    """A framework extra's floor is its tested series' first version, and the test extra pins exactly
    that version, so the suite itself proves each framework floor (the floors' virtualenv of
    tests/unit/test_dependency_floors.py leaves them out)."""
    from packaging.requirements import Requirement
    from packaging.version import Version

    extras = PROJECT["optional-dependencies"]
    declared = {_name(r): r for extra in ("langgraph", "openai-agents", "pydantic-ai", "adk") for r in extras[extra]}
    pinned = {_name(r): r for r in extras["test"] if "==" in r}
    for distribution, (first, _series) in _versions.TESTED.items():
        floors = [s.version for s in Requirement(declared[distribution]).specifier if s.operator == ">="]
        assert [Version(v) for v in floors] == [Version(first)], (declared[distribution], first)
        assert pinned[distribution] == f"{distribution}=={first}", (pinned.get(distribution), first)
