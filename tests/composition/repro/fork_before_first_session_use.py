"""Invariant 2 (a fork sees the conversation at the fork point plus its own appends; the parent's is
untouched): a fork (or a rewind) made at a point before the task first used its session gets no branch
of it, and appends to the session itself — the parent's, for a fork of a task with a named session; the
abandoned branch's, for a rewind (whose task keeps its id, so even the default session is shared)."""

import sys

import tether

app = tether.App(sys.argv[1] if len(sys.argv) > 1 else "memory://")


@app.task
def chat(ctx: tether.TaskContext, question: str) -> str:
    ctx.session.add("user", question)
    ctx.session.add("assistant", "Paris.")
    return "Paris."


app.run(chat, "Capital of France?", task_id="c1", session_id="support-1")
app.fork("c1", at=1, new_id="c1-fork")  # at the task's creation: before its first append
app.resume("c1-fork")
parent = [m.content for m in app.session("support-1").messages()]
print(f"fork's session: {app.state('c1-fork').session_id}; parent's session holds {parent}")

app.run(chat, "Capital of Spain?", task_id="c2")  # its own session, named after it
app.rewind("c2", to=1)
app.resume("c2")
rewound = [m.content for m in app.session(app.state("c2").session_id).messages()]
print(
    f"rewound task's session: {app.state('c2').session_id} (the set-aside branch's: "
    f"{app.state('c2~1').session_id}), holding {rewound}"
)
sys.exit(0 if parent == ["Capital of France?", "Paris."] and rewound == ["Capital of Spain?", "Paris."] else 1)
