"""Exception classes found again from what a failed call's record says of them (its type's name, its
message and its traceback), for the adapters that raise a recorded failure again on replay.

Only a module this process has already imported is looked in: nothing is imported because a record
names it."""

from __future__ import annotations

import re
import sys
from typing import Any

__all__ = ["find", "raised_class"]


def find(module: str, qualname: str) -> Any:
    """What ``qualname`` names in ``module``, if this process has imported it (``None`` otherwise,
    and for a class defined inside a function)."""
    found: Any = sys.modules.get(module)
    for part in qualname.split("."):
        if found is None or part == "<locals>":
            return None
        found = getattr(found, part, None)
    return found


def raised_class(error_type: str, message: str, traceback: str | None) -> type[BaseException] | None:
    """The exception class a recorded traceback ends with (``package.module.Class: message``;
    builtins and ``__main__`` name the class alone), if it can be found again as named there."""
    if not traceback:
        return None
    tail = f": {message}" if message else ""
    names = re.findall(rf"^((?:[\w<>]+\.)*{re.escape(error_type)}){re.escape(tail)}$", traceback, re.MULTILINE)
    if not names:
        return None
    parts = names[-1].split(".")
    for split in range(len(parts) - 1, -1, -1):
        modules = [".".join(parts[:split])] if split else ["builtins", "__main__"]
        for module in modules:
            found = find(module, ".".join(parts[split:]))
            if isinstance(found, type) and issubclass(found, BaseException) and found.__name__ == error_type:
                return found
    return None
