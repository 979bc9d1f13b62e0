"""A three-call task whose code a test changes between runs. Usage: python _changing_agent.py URL VERSION

VERSION ``v1`` is the code as deployed; its second call SIGKILLs the process when the file
named by ``$TETHER_KILL_IN_B`` exists. ``insert``, ``args`` and ``remove`` are three changes of
the code that a task recorded under ``v1`` cannot replay.
"""

from __future__ import annotations

import json
import os
import signal
import sys

import tether

URL, VERSION = sys.argv[1], sys.argv[2]
app = tether.App(URL)


@app.tool
def draft(topic: str) -> str:
    return f"draft about {topic}"


@app.tool
def email(body: str) -> str:
    flag = os.environ.get("TETHER_KILL_IN_B")
    if flag and os.path.exists(flag):
        os.remove(flag)
        os.kill(os.getpid(), signal.SIGKILL)  # dies inside the call: intent recorded, no result
    return f"sent: {body}"


@app.tool
def check_tone(body: str) -> str:
    return body + " (polite)"


@app.tool
def archive(body: str) -> str:
    return f"archived {body}"


@app.task(name="newsletter")
def newsletter(ctx: tether.TaskContext) -> str:
    body = ctx.call(draft, "tether")
    if VERSION == "insert":
        body = ctx.call(check_tone, body)  # a new call before the one in progress
    if VERSION == "args":
        body = body.upper()  # the call in progress, asked for with other arguments
    if VERSION == "remove":
        return str(ctx.call(archive, body))  # the call in progress is gone
    sent = ctx.call(email, body)
    return str(ctx.call(archive, sent))


if __name__ == "__main__":
    run = app.run("newsletter", task_id="news-1")
    print(json.dumps({"status": run.status.value, "output": run.output}))
