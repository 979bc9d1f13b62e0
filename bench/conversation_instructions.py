"""Instructions a read of a conversation runs, counted (not timed) under valgrind's callgrind.

Run: ``python bench/conversation_instructions.py [--src PATH] [--store-src PATH]`` (needs
``valgrind``; ~3-5 minutes). Timings on shared cores move with the neighbours' load; an instruction
count does not. A session of 1,000 OpenAI Responses items (250 turns of a user message, a function
call, its output and the answer, ~500 bytes each, as the Agents SDK stores them) is stored once;
then, on an open App, each of

* ``raw``: the floor, the session's rows fetched with the stdlib's ``sqlite3`` and nothing done with them;
* ``messages``: ``app.session(id).messages()``, every item read into a message;

runs once and four times, each in a process of its own under callgrind; the difference over three
reads is what one costs. ``--src`` counts another checkout's ``src``; ``--store-src`` stores the
session with another checkout's (its records as that version writes them: to count how records
an older tether wrote read). Prints one line of JSON with each count and the ratio to the floor.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).parent
MODES = ("raw", "messages")
QUERY = "SELECT seq, type, schema, at, data, fence FROM events WHERE task = ? AND seq > 0 ORDER BY seq"
TEXT = "x" * 480


def turn(i: int) -> list[dict[str, object]]:
    """One turn's items, as the Agents SDK adds them to its session."""
    return [
        {"role": "user", "content": f"{i}: {TEXT}"},
        {"type": "function_call", "call_id": f"c{i}", "name": "lookup", "arguments": json.dumps({"q": TEXT[:200]})},
        {"type": "function_call_output", "call_id": f"c{i}", "output": TEXT},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": TEXT, "annotations": []}]},
    ]


def store(src: str, path: str) -> None:
    sys.path.insert(0, src)
    import tether  # from ``src``

    session = tether.App(f"sqlite:///{path}").session("chat")
    for i in range(250):
        session.add_many(turn(i), format="openai_responses")


def child(src: str, path: str, mode: str, reads: int) -> None:
    sys.path.insert(0, src)
    import tether  # from ``src``

    app = tether.App(f"sqlite:///{path}")
    conn = sqlite3.connect(path)
    (task,) = conn.execute("SELECT id FROM tasks WHERE task_id LIKE '%chat'").fetchone()
    for _ in range(reads):
        if mode == "raw":
            conn.execute(QUERY, (task,)).fetchall()
        else:
            assert len(app.session("chat").messages()) == 1_000


def count(src: str, path: str, mode: str, reads: int) -> int:
    from _common import callgrind_instructions

    return callgrind_instructions([__file__, "--child", mode, str(reads), "--src", src, "--db", path])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--src", default=str(HERE.parent / "src"), help="the src directory to count")
    parser.add_argument("--store-src", help="the src directory that stores the session (default: --src)")
    parser.add_argument("--db", help=argparse.SUPPRESS)
    parser.add_argument("--store", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--child", nargs=2, metavar=("MODE", "READS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.store:
        store(args.src, args.db)
        return
    if args.child:
        child(args.src, args.db, args.child[0], int(args.child[1]))
        return
    sys.path.insert(0, str(HERE))
    path = os.path.join(tempfile.mkdtemp(prefix="tether-bench-"), "conversation.db")
    stored_by = args.store_src or args.src
    subprocess.run([sys.executable, __file__, "--store", "--src", stored_by, "--db", path], check=True)
    per_read = {mode: (count(args.src, path, mode, 4) - count(args.src, path, mode, 1)) // 3 for mode in MODES}
    result: dict[str, object] = {"src": args.src, "store_src": stored_by}
    result |= {f"{mode}_instructions": n for mode, n in per_read.items()}
    result["messages_vs_raw"] = round(per_read["messages"] / per_read["raw"], 2)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
