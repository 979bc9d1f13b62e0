"""What the suite needs before it runs: tether's and the tests' bytecode, compiled once; and from
outside the virtualenv, fetched once: Debian's chromium (the inspector's
browser tests), the sdist of the installed ``openai-agents`` (the SDK's own session tests), and a
virtualenv of the dependency floors of the core and of the extras it runs on (tests/unit/test_dependency_floors.py).

``make test`` runs ``python -m tests._prepare`` before pytest, so both are installed with the other
test dependencies; the tests' fixtures call the same functions, so a bare ``pytest`` run fetches
what is missing itself. Each function raises :class:`Missing` with what went wrong.
"""

from __future__ import annotations

import fcntl
import importlib.metadata
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

__all__ = ["CHROMIUM", "FLOORS", "FLOOR_EXTRAS", "Missing", "agents_sdist", "chromium", "floor_pins", "floors"]

CHROMIUM = "/usr/bin/chromium"
SDIST_CACHE = Path(sys.prefix) / ".cache" / "openai-agents-sdist"  # inside the virtualenv: `make clean` removes it
FLOORS = Path(sys.prefix) / ".cache" / "floors"
"""A virtualenv with each dependency of the core, of the kit (pytest, hypothesis) and of the extras in
:data:`FLOOR_EXTRAS` at its declared floor."""
FLOOR_EXTRAS = ("testing", "postgres", "redis", "serve")
"""The extras whose floors are installed together. The framework extras are not: each admits one tested
minor series whose first version is its floor, and the suite itself runs on those versions (the test
extra pins them; tests/unit/test_packaging.py checks the floors are TESTED's)."""
ROOT = Path(__file__).resolve().parent.parent


class Missing(Exception):  # noqa: N818 (a thing missing, not an error of the code)
    """A test dependency that could not be had, and why."""


def chromium() -> str:
    """Debian's chromium, installed with apt-get when it is missing."""
    if os.path.exists(CHROMIUM):
        return CHROMIUM
    if shutil.which("apt-get") is None:
        raise Missing(f"{CHROMIUM} is missing and there is no apt-get to install it")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run(["apt-get", "update", "-q"], check=False, env=env, capture_output=True, timeout=600)
    done = subprocess.run(
        ["apt-get", "install", "-y", "-q", "chromium"], env=env, capture_output=True, text=True, timeout=1200
    )
    if done.returncode != 0 or not os.path.exists(CHROMIUM):
        raise Missing(f"could not install chromium: {done.stderr[-2000:]}")
    return CHROMIUM


def agents_sdist() -> Path:
    """The sdist of the installed openai-agents, downloaded once per version (a lock keeps
    concurrent test processes to one download)."""
    version = importlib.metadata.version("openai-agents")
    SDIST_CACHE.mkdir(parents=True, exist_ok=True)
    archive = SDIST_CACHE / f"openai_agents-{version}.tar.gz"
    with open(SDIST_CACHE / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if archive.exists():
            return archive
        into = SDIST_CACHE / f"download-{version}"
        shutil.rmtree(into, ignore_errors=True)
        fetch = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
                 f"openai-agents=={version}", "-d", str(into), "--quiet"]
        done = subprocess.run(fetch, capture_output=True, text=True)
        found = sorted(into.glob("*.tar.gz"))
        if done.returncode != 0 or len(found) != 1:
            raise Missing(f"the sdist of openai-agents {version} could not be downloaded: {done.stderr[-2000:]}")
        found[0].replace(archive)
        shutil.rmtree(into, ignore_errors=True)
    return archive


def floor_pins() -> list[str]:
    """``name==floor`` for each dependency of the core and of the extras in :data:`FLOOR_EXTRAS`, as
    pyproject.toml declares them (``name>=floor``): what a user with the oldest versions tether admits runs."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    pins = []
    for requirement in [*project["dependencies"], *(r for extra in FLOOR_EXTRAS for r in extras[extra])]:
        name, found, floor = requirement.partition(">=")
        if not found or "," in floor or ";" in floor:
            raise Missing(f"pyproject.toml: {requirement!r} is not of the form name>=floor")
        pins.append(f"{name.strip()}=={floor.strip()}")
    return pins


def floors() -> Path:
    """The floors' virtualenv (its python), made again when the pins change; tether installed in it
    from this checkout, without its dependencies (they are the pins)."""
    python = FLOORS / "bin" / "python"
    pins = floor_pins()
    stamp = FLOORS / ".pins"
    FLOORS.parent.mkdir(parents=True, exist_ok=True)
    with open(FLOORS.parent / ".floors.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if python.exists() and stamp.exists() and stamp.read_text() == "\n".join(pins):
            return python
        shutil.rmtree(FLOORS, ignore_errors=True)
        steps = [
            [sys.executable, "-m", "venv", str(FLOORS)],
            [str(python), "-m", "pip", "install", "--quiet", *pins],
            [str(python), "-m", "pip", "install", "--quiet", "--no-deps", "-e", str(ROOT)],
        ]
        for step in steps:
            done = subprocess.run(step, capture_output=True, text=True, timeout=900)
            if done.returncode != 0:
                raise Missing(f"could not make the floors' virtualenv ({' '.join(step[:4])}): {done.stderr[-2000:]}")
        stamp.write_text("\n".join(pins))
    return python


def bytecode() -> None:
    """Compile tether's modules, as pip does for a package it installs (not for an editable one): every
    process of the suite imports them, the floors' virtualenv too (it installs this same tree). Then
    the test modules and plugins as pytest loads them (its assertion rewriting, which it caches beside
    them), by a collection that runs no test: once here, where each of the suite's four processes
    would otherwise compile all of them at the same time."""
    import compileall

    if not compileall.compile_dir(ROOT / "src", quiet=1, workers=0):
        raise Missing("some of tether's modules do not compile")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    collect = [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider"]
    done = subprocess.run(collect, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise Missing(f"the suite does not collect: {done.stdout[-3000:]}{done.stderr[-2000:]}")


def main() -> int:
    """Fetch each; say what could not be had (the tests then fail or skip, each with the reason)."""
    steps = [("bytecode", bytecode), ("chromium", chromium), ("openai-agents sdist", agents_sdist)]
    for name, fetch in [*steps, ("dependency floors", floors)]:
        try:
            fetch()
        except Missing as exc:
            print(f"tests/_prepare.py: {name}: {exc}", file=sys.stderr)
        except importlib.metadata.PackageNotFoundError as exc:
            print(f"tests/_prepare.py: {name}: {exc} is not installed", file=sys.stderr)
        except (subprocess.SubprocessError, OSError) as exc:  # e.g. a step that ran out of time
            print(f"tests/_prepare.py: {name}: {exc}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
