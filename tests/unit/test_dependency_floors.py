"""tether on the oldest versions of its dependencies that pyproject.toml admits: the conformance kit
on SQLite and ``tether demo`` run in a virtualenv of exactly those versions (tests/_prepare.py makes
it, with the other test dependencies), so a floor set too low fails here, not on a user's machine."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from packaging.version import Version

from tests._prepare import Missing, floor_pins, floors


@pytest.fixture(scope="module")
def python() -> str:
    try:
        return str(floors())
    except Missing as exc:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true but the dependency floors' virtualenv could not be made: {exc}")
        pytest.skip(f"the dependency floors' virtualenv could not be made: {exc}")


def _env() -> dict[str, str]:
    """The environment of a user's shell: none of this test run's own settings."""
    return {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST", "TETHER_", "PYTHONPATH", "COV"))}


def test_the_virtualenv_holds_exactly_the_floors(python: str) -> None:
    pins = dict(pin.split("==") for pin in floor_pins())
    code = f"import importlib.metadata as m, json; print(json.dumps({{d: m.version(d) for d in {sorted(pins)!r}}}))"
    found = json.loads(subprocess.run([python, "-c", code], capture_output=True, text=True, check=True).stdout)
    assert {name: Version(found[name]) for name in pins} == {name: Version(floor) for name, floor in pins.items()}


@pytest.mark.timeout(900)
def test_the_conformance_kit_passes_on_the_floors(python: str, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'kit.db'}"
    kit = [python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--pyargs", "tether.testing", f"--tether-url={url}"]
    done = subprocess.run(kit, cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=880)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
    assert " passed" in done.stdout and " failed" not in done.stdout


@pytest.mark.timeout(300)
def test_the_demo_runs_on_the_floors(python: str, tmp_path: Path) -> None:
    done = subprocess.run(
        [python, "-m", "tether.cli", "demo"], cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=280
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "calendar invites sent: 1" in done.stdout
