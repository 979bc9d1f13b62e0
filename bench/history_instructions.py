"""Instructions ``app.history`` runs, counted (not timed) under valgrind's callgrind.

Run: ``python bench/history_instructions.py [--src PATH]`` (needs ``valgrind``; ~2-4 minutes).
Timings on shared cores move with the neighbours' load; an instruction count does not. A task of
1,000 steps, each a step with one readonly call returning ~500 bytes (3,004 events, as
``bench/timetravel.py --only history`` times it), is stored once; then, on an open App, each of

* ``raw``: the floor, its rows fetched with the stdlib's ``sqlite3`` and nothing done with them;
* ``history``: ``app.history`` (the listing);
* ``summaries``: ``app.history`` and every entry's summary read, as ``tether history`` prints them

runs once and four times, each in a process of its own under callgrind; the difference over three
reads is what one costs. ``--src`` counts another checkout's ``src`` (to compare two versions
in one run; the task is stored by this checkout). Prints one line of JSON with each count and the
history's ratios to the floor.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).parent
MODES = ("raw", "history", "summaries")
QUERY = "SELECT seq, type, schema, at, data, fence FROM events WHERE task = ? AND seq > 0 ORDER BY seq"


def store(path: str) -> None:
    """The 1,000-step task, as task ``t`` of the SQLite file at ``path``."""
    sys.path.insert(0, str(HERE))
    from timetravel import store_research  # here: the child imports ``src``'s tether first

    store_research(f"sqlite:///{path}", 1_000, task_id="t")


def child(src: str, path: str, mode: str, reads: int) -> None:
    sys.path.insert(0, src)
    import tether  # from ``src``

    app = tether.App(f"sqlite:///{path}")
    conn = sqlite3.connect(path)
    (task,) = conn.execute("SELECT id FROM tasks WHERE task_id = 't'").fetchone()
    for _ in range(reads):
        if mode == "raw":
            conn.execute(QUERY, (task,)).fetchall()
        elif mode == "history":
            app.history("t")
        else:
            [entry.summary for entry in app.history("t")]


def count(src: str, path: str, mode: str, reads: int) -> int:
    from _common import callgrind_instructions

    return callgrind_instructions([__file__, "--child", mode, str(reads), "--src", src, "--db", path])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--src", default=str(HERE.parent / "src"), help="the src directory to count")
    parser.add_argument("--db", help=argparse.SUPPRESS)
    parser.add_argument("--child", nargs=2, metavar=("MODE", "READS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.src, args.db, args.child[0], int(args.child[1]))
        return
    path = os.path.join(tempfile.mkdtemp(prefix="tether-bench-"), "history.db")
    store(path)
    per_read = {mode: (count(args.src, path, mode, 4) - count(args.src, path, mode, 1)) // 3 for mode in MODES}
    result: dict[str, object] = {"src": args.src, **{f"{mode}_instructions": n for mode, n in per_read.items()}}
    result["history_vs_raw"] = round(per_read["history"] / per_read["raw"], 2)
    result["summaries_vs_raw"] = round(per_read["summaries"] / per_read["raw"], 2)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
