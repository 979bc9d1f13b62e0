"""Where a crash test's child process kills itself (SIGKILL): the ``at``-th time it reaches the point
``kind``, given as ``"kind:at"`` (``"none:0"``: never, and the run counts how often it reaches each)."""

from __future__ import annotations

import os
import signal
from pathlib import Path


class KillPoints:
    """Called at each point a child may die at; says where it died in ``work/killed``."""

    def __init__(self, work: Path, at: str) -> None:
        self.work = work
        self.kind, _, self.at = at.partition(":")
        self.hits: dict[str, int] = {}
        """How often each point was reached."""

    def __call__(self, where: str) -> None:
        self.hits[where] = self.hits.get(where, 0) + 1
        if where == self.kind and self.hits[where] == int(self.at):
            (self.work / "killed").write_text(where)
            os.kill(os.getpid(), signal.SIGKILL)
