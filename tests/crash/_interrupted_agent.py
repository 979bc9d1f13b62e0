"""A task whose second call takes long: the test interrupts it (SIGINT or SIGTERM) there.

Usage: python _interrupted_agent.py URL READY_FILE
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import tether

URL, READY = sys.argv[1], Path(sys.argv[2])
app = tether.App(URL)


@app.tool
def quick(n: int) -> int:
    return n


@app.tool
def slow(n: int) -> int:
    if not READY.exists():
        READY.touch()
        time.sleep(60)  # interrupted here the first time
    return n * 10


@app.task(name="interruptible")
def interruptible(ctx: tether.TaskContext) -> int:
    return int(ctx.call(quick, 1) + ctx.call(slow, 2))


if __name__ == "__main__":
    print(json.dumps({"output": app.run("interruptible", task_id="int-1").result()}))
