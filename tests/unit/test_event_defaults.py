"""Every event's declared defaults, pinned. An event is stored without the fields at their default
(tether.log.encoding), so a default is part of what a stored record means: changed in place, it
would change every record written since that left the field out. This fails on such a change; the
way to make it is a new version of the event with an upcaster that fills the old default in, then
``python tests/unit/test_event_defaults.py`` to write the new table."""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

from tether.events import EVENT_TYPES

PINNED = Path(__file__).parent.parent / "fixtures" / "event_defaults.json"


def declared() -> dict[str, Any]:
    """Each event type's version and the defaults of its fields (``repr``s; a factory by its name)."""
    table: dict[str, Any] = {}
    for name, cls in sorted(EVENT_TYPES.items()):
        if not cls.__module__.startswith("tether."):
            continue  # an event a test or an application defines (registered once imported) is its own
        defaults = {}
        for f in dataclasses.fields(cls):
            if f.default is not dataclasses.MISSING:
                defaults[f.name] = repr(f.default)
            elif f.default_factory is not dataclasses.MISSING:
                defaults[f.name] = f"{f.default_factory.__name__}()"
        table[name] = {"version": cls.version, "defaults": defaults}
    return table


def test_no_default_changes_without_a_new_version_of_its_event() -> None:
    pinned = json.loads(PINNED.read_text())
    now = declared()
    changed = [
        f"{name}: version {pinned[name]['version']} {pinned[name]['defaults']} -> "
        f"version {now[name]['version']} {now[name]['defaults']}"
        for name in sorted(set(pinned) & set(now))
        if now[name]["defaults"] != pinned[name]["defaults"] and now[name]["version"] == pinned[name]["version"]
    ]
    assert not changed, (
        "defaults changed without a new version of the event (see this file's docstring):\n" + "\n".join(changed)
    )
    unpinned = sorted(set(now) - set(pinned))  # (the types registered depend on what is imported)
    assert not unpinned, f"event types not pinned: {unpinned}; run python {__file__}"


if __name__ == "__main__":
    import tether.serve.keys  # noqa: F401  (registers the keys' events, as a run of the suite does)

    PINNED.write_text(json.dumps(declared(), indent=1, sort_keys=True) + "\n")
    print(f"wrote {PINNED}", file=sys.stderr)
