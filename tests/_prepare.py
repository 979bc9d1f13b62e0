"""What the suite needs from outside the virtualenv, fetched once: Debian's chromium (the inspector's
browser tests) and the sdist of the installed ``openai-agents`` (the SDK's own session tests).

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
from pathlib import Path

__all__ = ["CHROMIUM", "Missing", "agents_sdist", "chromium"]

CHROMIUM = "/usr/bin/chromium"
SDIST_CACHE = Path(sys.prefix) / ".cache" / "openai-agents-sdist"  # inside the virtualenv: `make clean` removes it


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


def main() -> int:
    """Fetch both; say what could not be had (the tests then fail or skip, each with the reason)."""
    for name, fetch in (("chromium", chromium), ("openai-agents sdist", agents_sdist)):
        try:
            fetch()
        except Missing as exc:
            print(f"tests/_prepare.py: {name}: {exc}", file=sys.stderr)
        except importlib.metadata.PackageNotFoundError as exc:
            print(f"tests/_prepare.py: {name}: {exc} is not installed", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
