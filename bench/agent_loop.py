"""Agent-loop benchmark: parallel recorded calls and a whole loop turn, against the store's floor.

Run: ``python bench/agent_loop.py`` (``--quick`` for a short run, ``--smoke`` the shortest). Prints a table, then
one line of JSON. The floor is ``bench/store.py``'s: one raw SQLite INSERT + COMMIT of a
~500-byte payload, WAL, synchronous=NORMAL, same file system, measured in the same run.

* a parallel round: ``asyncio.gather`` of 8 readonly calls, each returning a ~500-byte
  result (8 commits), against the same 8 calls awaited one after another and against
  8 floor commits. Target: the parallel round <= 1.5x the floor for its commits.
* a loop turn: read the window, call a scripted model (its answer asks for 4 tools),
  run the 4 in parallel, append the assistant message and the 4 results (5 messages
  in 2 appends), against the floor for the commits it makes (counted, not assumed).
  Measured early in a conversation and late (after ``--turns`` turns), to show whether
  a turn's cost grows with the conversation's length.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from typing import Any

import orjson

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))
sys.path.insert(0, os.path.dirname(__file__))

from _common import MESSAGE
from store import floor_per_commit

import tether

FANOUT = 8


def parallel_round(url: str, rounds: int, *, parallel: bool) -> float:
    """Seconds per round of FANOUT readonly calls with a ~500-byte result, gathered or sequential."""
    app = tether.App(url)

    @app.tool(readonly=True)
    async def search(i: int, r: int) -> str:
        return MESSAGE

    elapsed = 0.0

    @app.task
    async def research(ctx: tether.AsyncTaskContext, count: int) -> None:
        nonlocal elapsed
        start = time.perf_counter()
        for r in range(count):
            if parallel:
                await asyncio.gather(*(ctx.call(search, i, r) for i in range(FANOUT)))
            else:
                for i in range(FANOUT):
                    await ctx.call(search, i, r)
        elapsed = time.perf_counter() - start

    run = app.run(research, rounds)
    assert run.status is tether.Status.COMPLETED, run.failure
    app.close()
    return elapsed / rounds


class CountingCommits:
    """Counts the store's write transactions (appends to the task and to its session)."""

    def __init__(self, store: Any) -> None:
        self.count = 0
        original = store.append

        def append(*args: Any, **kwargs: Any) -> Any:
            self.count += 1
            return original(*args, **kwargs)

        store.append = append


def loop_turns(url: str, turns: int, sample: int) -> tuple[float, float, float]:
    """(seconds per turn over the first ``sample`` turns, over the last ``sample``, commits per turn)."""
    app = tether.App(url)
    commits = CountingCommits(app.store)
    tools = ["orders", "shipping", "refunds", "faq"]

    @app.tool(readonly=True)
    def model(messages: list[dict[str, Any]], turn: int) -> dict[str, Any]:
        calls = [{"id": f"t{turn}-{name}", "name": name, "arguments": {"q": f"{turn}"}} for name in tools]
        return {"role": "assistant", "content": MESSAGE[:200], "tool_calls": calls}

    @app.tool(readonly=True)
    async def tool(name: str, q: str) -> str:
        return MESSAGE

    timings: list[float] = []
    per_turn: list[int] = []

    @app.task
    async def agent(ctx: tether.AsyncTaskContext, count: int) -> None:
        ctx.session.add("user", MESSAGE)
        for turn in range(count):
            before = commits.count
            start = time.perf_counter()
            window = ctx.session.window(max_tokens=4_000).to_openai()
            reply = await ctx.call(model, window, turn)
            ctx.session.add("assistant", reply["content"], tool_calls=reply["tool_calls"])
            calls = reply["tool_calls"]
            results = await asyncio.gather(*(ctx.call(tool, c["name"], c["arguments"]["q"]) for c in calls))
            ctx.session.add_many(
                [
                    {"role": "tool", "tool_call_id": c["id"], "content": result}
                    for c, result in zip(reply["tool_calls"], results, strict=True)
                ]
            )
            timings.append(time.perf_counter() - start)
            per_turn.append(commits.count - before)

    run = app.run(agent, turns)
    assert run.status is tether.Status.COMPLETED, run.failure
    app.close()
    early = sum(timings[1 : sample + 1]) / sample
    late = sum(timings[-sample:]) / sample
    return early, late, sum(per_turn[1:]) / (len(per_turn) - 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer iterations")
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="the shortest run through every path, for the test suite: its figures mean nothing",
    )
    parser.add_argument("--turns", type=int, default=None, help="loop turns (the conversation's length / 5)")
    args = parser.parse_args()
    rounds = 3 if args.smoke else 40 if args.quick else 300
    turns = args.turns or (4 if args.smoke else 60 if args.quick else 1000)
    sample = min(50, turns // 3)
    repeats = 1 if args.smoke else 2 if args.quick else 5
    workdir = tempfile.mkdtemp(prefix="tether-bench-")
    floors, par, seq = [], [], []
    for r in range(repeats):
        floors.append(floor_per_commit(os.path.join(workdir, f"floor{r}.db"), rounds * FANOUT))
        par.append(parallel_round(f"sqlite:///{os.path.join(workdir, f'par{r}.db')}", rounds, parallel=True))
        seq.append(parallel_round(f"sqlite:///{os.path.join(workdir, f'seq{r}.db')}", rounds, parallel=False))
    floor, parallel, sequential = min(floors), min(par), min(seq)
    round_floor = floor * FANOUT
    early, late, commits = loop_turns(f"sqlite:///{os.path.join(workdir, 'loop.db')}", turns, sample)
    turn_floor = floor * commits
    result = {
        "fanout": FANOUT,
        "floor_commit_ms": floor * 1000,
        "parallel_round_ms": parallel * 1000,
        "sequential_round_ms": sequential * 1000,
        "parallel_round_ratio": parallel / round_floor,
        "sequential_round_ratio": sequential / round_floor,
        "loop_turn_commits": commits,
        "loop_turn_early_ms": early * 1000,
        "loop_turn_late_ms": late * 1000,
        "loop_turn_ratio": early / turn_floor,
        "loop_turn_late_ratio": late / turn_floor,
        "turns": turns,
        "targets": {"parallel_round_ratio": 1.5},
    }
    result["pass"] = result["parallel_round_ratio"] <= 1.5
    print(f"{'measure':58} {'ms':>9} {'x floor':>8}")
    print(f"{'floor: raw INSERT+COMMIT of ~500 bytes':58} {floor * 1000:9.4f} {1:8.2f}")
    print(f"{f'{FANOUT} readonly calls, gathered (target <= 1.5x {FANOUT} commits)':58} {parallel * 1000:9.4f} "
          f"{parallel / round_floor:8.2f}")
    rows = [
        (f"{FANOUT} readonly calls, one after another", sequential, round_floor),
        (f"loop turn, turns 2-{sample + 1} ({commits:.0f} commits)", early, turn_floor),
    ]
    for label, value, base in rows:
        print(f"{label:58} {value * 1000:9.4f} {value / base:8.2f}")
    print(f"{f'loop turn, last {sample} of {turns}':58} {late * 1000:9.4f} {late / turn_floor:8.2f}")
    print(orjson.dumps(result).decode())


if __name__ == "__main__":
    main()
