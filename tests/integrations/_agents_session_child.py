"""A process using one TetherSession beside another process. Usage:

python _agents_session_child.py URL SESSION NAME MODE COUNT GATE

MODE ``add``: COUNT batches of three items (``NAME:i:0..2``); ``pop``: pop until the session is
empty, writing what it popped to GATE.NAME.popped (a JSON list); ``add-exit``: one batch, then
``os._exit(0)`` at once (nothing flushed, no cleanup). Both processes wait for GATE to exist.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from pathlib import Path

import tether
from tether.integrations.openai_agents import TetherSession

url, session_id, name, mode, count, gate = sys.argv[1:7]
gate_path = Path(gate)
session = TetherSession(session_id, tether.App(url))


async def main() -> None:
    if mode == "add-exit":
        await session.add_items([{"role": "user", "content": f"{name}:{i}"} for i in range(int(count))])
        os._exit(0)
    (gate_path.parent / f"ready-{name}").touch()
    while not gate_path.exists():
        time.sleep(0.001)
    if mode == "add":
        for i in range(int(count)):
            await session.add_items([{"role": "user", "content": f"{name}:{i}:{j}"} for j in range(3)])
    elif mode == "pop":
        popped = []
        while (item := await session.pop_item()) is not None:
            popped.append(item)
        Path(f"{gate}.{name}.popped").write_text(json.dumps(popped))


asyncio.run(main())
