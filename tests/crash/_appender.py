"""A separate process that appends to its own task and races others on a shared one."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import tether
from tether.events import ObservationRecorded


def main() -> None:
    url, shared, name, count, gate = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), Path(sys.argv[5])
    log = tether.TaskLog(url)
    own = log.create(type="own", task_id=f"own-{name}")
    (gate.parent / f"ready-{name}").touch()
    while not gate.exists():  # start together, so the processes really race
        time.sleep(0.001)
    conflicts = 0
    version = own.version
    for i in range(count):
        version = log.append(own.task_id, [ObservationRecorded(key="i", value=i)], version)
        while True:  # optimistic concurrency: reload and retry on conflict
            state = log.load(shared)
            try:
                log.append(shared, [ObservationRecorded(key=f"{name}:{i}", value=i)], state.version)
                break
            except tether.ConflictError:
                conflicts += 1
    print(json.dumps({"name": name, "conflicts": conflicts}))


if __name__ == "__main__":
    main()
