"""Instructions a recorded call runs in Python, counted (not timed) under valgrind's callgrind.

Run: ``python bench/call_instructions.py [--src PATH]`` (needs ``valgrind``; ~1-2 minutes). Timings
on shared cores move with the neighbours' load; an instruction count does not. Each kind of call
(readonly, side-effecting; a ~500-byte result) runs as a task of 300 and of 900 calls with the
store's SQLite INSERT replaced by a statement that does nothing; the difference of the two
counts over 600 calls is what one call costs besides the INSERT: the flow, the event's encoding,
the log's checks, the store's lock file. The same for an async task's calls (a lone run: its
records written on its loop), whose tool is a coroutine function. ``--src`` counts another
checkout's ``src`` (to compare before and after in one run). ``--telemetry sdk`` counts them with
tether's telemetry on, spans to the OpenTelemetry SDK (a ``BatchSpanProcessor``, an exporter that
drops them); ``sdk_metrics`` adds the SDK's ``MeterProvider``. Prints one line of JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).parent
SIZES = (300, 900)


def child(src: str, kind: str, calls: int, telemetry: str) -> None:
    """Run ``calls`` recorded calls with the INSERT stubbed, then leave at once (no end-of-run fold)."""
    sys.path.insert(0, src)
    import tether  # from ``src``: imported before _common puts this checkout's first

    sys.path.insert(1, str(HERE))
    from _common import MESSAGE, sdk_telemetry

    if telemetry != "off":
        sdk_telemetry(metrics=telemetry == "sdk_metrics")

    class NoInsert:
        rowcount = 1

        def execute(self, sql: str, params: object) -> None:
            pass

    app = tether.App(f"sqlite:///{tempfile.mkdtemp()}/c.db")
    store = app.log.store
    readonly = kind.startswith("readonly")
    tool = app.tool(name="noop", readonly=readonly)(lambda: MESSAGE)

    async def answer() -> str:
        return MESSAGE

    coroutine_tool = app.tool(name="anoop", readonly=readonly)(answer)

    @app.task
    def many(ctx: tether.TaskContext, count: int) -> None:
        store._append_cursor = NoInsert()  # type: ignore[attr-defined]
        for _ in range(count):
            ctx.call(tool)
        os._exit(0)

    @app.task
    async def many_async(ctx: tether.AsyncTaskContext, count: int) -> None:
        store._append_cursor = NoInsert()  # type: ignore[attr-defined]
        for _ in range(count):
            await ctx.call(coroutine_tool)
        os._exit(0)

    if kind.endswith("_async"):
        asyncio.run(app.run_async(many_async, calls))
    app.run(many, calls)


def count(src: str, kind: str, calls: int, telemetry: str) -> int:
    from _common import callgrind_instructions  # here, not at the top: the child imports ``src``'s tether first

    return callgrind_instructions([__file__, "--child", kind, str(calls), "--src", src, "--telemetry", telemetry])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--src", default=str(HERE.parent / "src"), help="the src directory to count")
    parser.add_argument(
        "--telemetry", choices=("off", "sdk", "sdk_metrics"), default="off", help="tether's telemetry, on the SDK"
    )
    parser.add_argument("--child", nargs=2, metavar=("KIND", "CALLS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.src, args.child[0], int(args.child[1]), args.telemetry)
        return
    result: dict[str, object] = {"src": args.src, "telemetry": args.telemetry}
    for kind in ("readonly", "side_effecting", "readonly_async", "side_effecting_async"):
        few, many = (count(args.src, kind, n, args.telemetry) for n in SIZES)
        result[f"{kind}_instructions_per_call"] = (many - few) // (SIZES[1] - SIZES[0])
    print(json.dumps(result))


if __name__ == "__main__":
    main()
