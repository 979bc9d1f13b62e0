from __future__ import annotations

import os
from pathlib import Path

from tests.crash.conftest import make_url  # noqa: F401 - a fixture: a fresh SQLite file or PostgreSQL schema

HERE = Path(__file__).parent
CHILD_ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE.parent.parent / "src"), str(HERE.parent.parent)])}
"""What a child process needs to import tether (this checkout) and the tests' helper modules."""
