"""A process that talks into one session and bumps one user's counter, racing another like it."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import tether

url, name, count, gate = sys.argv[1], sys.argv[2], int(sys.argv[3]), Path(sys.argv[4])
app = tether.App(url)
chat = app.session("shared", user_id="ada")
ada = app.user("ada")
(gate.parent / f"ready-{name}").touch()
while not gate.exists():
    time.sleep(0.001)
for i in range(count):
    chat.add("user", f"{name}:{i}")
    ada.update(lambda doc: {**doc, "count": doc.get("count", 0) + 1})
