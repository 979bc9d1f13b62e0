"""Invariant 3 (a retried task goes on): fork a failed task at its failure record; the fork fails again
(replayed); retry the fork and the tool works this time: the run diverges ("the history records
StepFailed('check') but the code now asks for end of step 'check'"): the retry retires the records of
the fork's own failure, not the step failure it inherited. The parent retries fine."""

import sys

import tether

app = tether.App(sys.argv[1] if len(sys.argv) > 1 else "memory://")
tries: list[str] = []


@app.tool(retry=tether.Retry(max_attempts=1))
def flaky(label: str) -> str:
    tries.append(label)
    if len(tries) == 1:  # the API is down, once
        raise TimeoutError("down")
    return label


@app.task
def job(ctx: tether.TaskContext) -> str:
    with ctx.step("check"):
        ctx.call(flaky, "s0")
    return "done"


print("parent:", app.run(job, task_id="j1").status.value)
at = next(e.seq for e in app.history("j1") if e.type == "FailureRecorded")
app.fork("j1", at=at, new_id="j1-fork")
print("fork:", app.resume("j1-fork").status.value)
try:
    print("fork retried:", app.retry("j1-fork").status.value)
except tether.NonDeterminismError as exc:
    print("fork retried: NonDeterminismError:", exc)
    sys.exit(1)
