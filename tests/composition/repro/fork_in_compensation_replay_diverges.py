"""Invariant 5 (a finished task replays clean): fork a cancelled task at its compensation's intent (the
cancel came while call #2 was in flight): the fork's run completes, and its replay diverges ("the history
records more work (call #3 release) but the code now asks for the task to end"): the live run ended with
a record nobody asked for and did not notice. (When the compensation took the ordinal the code's next
call has, the fork's live run diverges instead: a fork inside a cancel's compensations cannot run.)"""

import sys

import tether

app = tether.App(sys.argv[1] if len(sys.argv) > 1 else "memory://")
dead = []


@app.tool
def release(hold: str) -> None:
    return None


@app.tool(compensate=release)
def reserve(n: int) -> str:
    return f"hold-{n}"


@app.tool
def slow(n: int) -> int:
    if not dead:
        dead.append(n)
        raise KeyboardInterrupt  # stands for the process dying in the middle of the call
    return n


@app.task
def job(ctx) -> str:
    ctx.call(reserve, 1)
    ctx.call(slow, 2)
    return "done"


try:
    app.run(job, task_id="j1")
except KeyboardInterrupt:
    pass
app.cancel("j1")  # call #2 has an intent and no result; #1 is compensated (#3)
at = next(e.seq for e in app.history("j1") if e.type == "CallStarted" and "compensation" in e.summary)
app.fork("j1", at=at, new_id="j1-fork")
print("fork:", app.resume("j1-fork").status.value)
report = app.replay("j1-fork")
print(report)
sys.exit(0 if report.clean else 1)
