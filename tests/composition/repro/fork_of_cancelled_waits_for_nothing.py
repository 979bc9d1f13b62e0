"""Invariants 3 and 6: a fork (or a rewind) at the last event of a task that was cancelled, or set aside by
a rewind, while it waited is `awaiting_input` with no `waiting`: nothing to answer, no worker runs it, and
every resume appends two events (running, awaiting_input) and stops again."""

import sys

import tether

app = tether.App(sys.argv[1] if len(sys.argv) > 1 else "memory://")


@app.task
def chat(ctx: tether.TaskContext) -> str:
    ctx.session.add("user", "hi")
    return ctx.wait_for_input("user-0")


app.run(chat, task_id="c1")
app.cancel("c1")  # or: app.rewind("c1", to=...), then fork "c1~1" at its last event
app.fork("c1", at=app.state("c1").version, new_id="again")
stuck = 0
for _ in range(3):
    run = app.resume("again")
    print(f"again: {run.status.value}, waiting for {run.state.waiting}, version {run.state.version}")
    stuck += run.status is tether.Status.AWAITING_INPUT and run.state.waiting is None
sys.exit(1 if stuck else 0)
