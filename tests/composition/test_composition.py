"""THE composition test: tether's features, together, under a seeded random driver.

One run (a seed) on one backend makes a world: a store, a sink for side effects, and the task types of
``_app.py``. Then ``STEPS`` steps, each drawn by ``random.Random(seed)``, mix:

* starting tasks (``app.start``, for workers) and running them here (``app.run``, ``app.resume``);
* answering waits (``app.send_input``, sometimes before the task asks), cancelling (``app.cancel``
  here, or ``request_cancel`` for a worker), retrying failed tasks (``app.retry`` here, or
  ``request_retry``), forking (``app.fork(task, at=seq)``) and rewinding (``app.rewind(task, to=seq)``)
  at random seqs of any task's history, compacting sessions (``app.session(id).compact``) and adding
  messages to them from outside;
* 1-3 ``tether worker tests.composition._app:app -c N`` processes (N in 1-4), SIGKILLed at random
  moments and started again;
* pauses, and *settles*: waiting until nothing is runnable (with a worker alive), within a bound.

After every step (the cheap ones) or every few steps (the rest), and at the end:

1. effects: one idempotency key per logical call (task, label, branch) and at most one execution per
   key, beyond the executions a fork or a rewind asks for and those of processes that were SIGKILLed;
2. conversations: in every session, the messages each task wrote are a prefix of what its code
   appends, in order, never twice (all of it once the task completed); messages added from outside
   appear once each, in the order they were added;
3. every runnable task ends (completes, fails with its flaky tool's error, or is cancelled as asked)
   within ``SETTLE_BOUND`` seconds while workers run, and nothing is appended (and no worker keeps
   running tasks) once nothing is runnable;
4. a task whose run reported a ``NonDeterminismError`` grows no more;
5. every finished task replays clean (``app.replay``) and the replay writes nothing (the task's version
   during the run; the whole database at the end);
6. every task's version stays within a bound made of what its code does, its retries and attempts, the
   interventions on it and the kills.

The seed is printed with every failure, with the last steps taken; a failure reproduces (as far as a
world with real processes and real timing can) with ``TETHER_COMPOSITION_SEEDS=<seed>``.

Sizes: ``TETHER_COMPOSITION_STEPS`` (default 120) steps per seed, ``TETHER_COMPOSITION_SEEDS`` (a
comma-separated list; default one random seed) or ``TETHER_COMPOSITION_RUNS`` (that many random seeds).
A seed's steps run in worlds of at most ``TETHER_COMPOSITION_WORLD_STEPS`` (400) steps, each on a fresh
database (world k of seed s is seed s + k * 1_000_003, printed as it starts). A deep run:
``TETHER_COMPOSITION_STEPS=5000 TETHER_COMPOSITION_RUNS=4``. ``TETHER_COMPOSITION_SKIP`` leaves features
out (to tell a run's failures apart: see below), ``TETHER_COMPOSITION_TTL`` sets the lease (5 s),
``TETHER_COMPOSITION_SETTLE_BOUND`` the bound of invariant 3 (60 s). ``repro/`` holds the reductions of
what this test found.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import functools
import os
import random
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import tether
from tests import _redis_server as redis_server
from tests.composition import _app
from tests.conftest import REDIS_PROBLEM, dump_database, pg_url
from tether.store import TaskFilter

ROOT = Path(__file__).resolve().parents[2]
STEPS = int(os.environ.get("TETHER_COMPOSITION_STEPS", "120"))
WORLD_STEPS = int(os.environ.get("TETHER_COMPOSITION_WORLD_STEPS", "400"))
if os.environ.get("TETHER_COMPOSITION_SEEDS"):
    SEEDS = [int(s) for s in os.environ["TETHER_COMPOSITION_SEEDS"].split(",") if s.strip()]
else:
    SEEDS = [random.randrange(1 << 30) for _ in range(int(os.environ.get("TETHER_COMPOSITION_RUNS", "1")))]
TTL = float(os.environ.get("TETHER_COMPOSITION_TTL", "5"))
# Features left out, to tell apart the failures of a run (comma-separated): a task type (pipeline,
# approval, chat, batch), "shared" (sessions shared by tasks), an action (start, here, resume, send,
# ahead, cancel, retry, fork, rewind, compact (from outside, and by the chat task), external, pause, spawn,
# kill, settle), or "early" (no fork or rewind before the task first wrote to its conversation).
SKIP = set(filter(None, os.environ.get("TETHER_COMPOSITION_SKIP", "").split(",")))
SETTLE_BOUND = float(os.environ.get("TETHER_COMPOSITION_SETTLE_BOUND", "60"))
MAX_WORKERS = 3
TERMINAL = {"completed", "failed", "cancelled"}
DIVERGED = re.compile(r"task '([^']+)': at event #(\d+) the history records")
RUN_LINE = re.compile(r"^\d\d:\d\d:\d\d–\d\d:\d\d:\d\d (\S+) ")
STOPPED = re.compile(r"task (\S+) (stopped|crashed the run)")


class InvariantError(AssertionError):
    """An invariant that does not hold."""


@dataclasses.dataclass
class Task:
    task_id: str
    type: str
    inputs: dict[str, Any]
    interventions: int = 0
    cancel_asked: bool = False
    kills_seen: int = 0


@dataclasses.dataclass
class Worker:
    proc: subprocess.Popen[bytes]
    log: Path
    concurrency: int


def answer(tag: str, key: str) -> Any:
    """The answer a person gives to a wait: always the same for a task's question (a fork or a
    rewind that asks again gets what the first run got, so its calls follow the same path)."""
    if key == "approve":
        return _app._hash(tag, key) % 4 != 0
    if key.startswith("user-"):
        return f"{tag}:{key}"
    return True


def asks(task_type: str, inputs: dict[str, Any]) -> list[str]:
    """The keys a task of this type waits for."""
    if task_type == "approval":
        return ["approve"]
    if task_type == "chat":
        return [f"user-{t}" for t in inputs["waits"]]
    if task_type == "batch":
        return ["confirm"] if inputs["wait"] else []
    return []


class World:
    """One seed's run on one database."""

    def __init__(self, seed: int, url: str, work: Path, steps: int) -> None:
        self.seed = seed
        self.steps = steps
        self.rng = random.Random(seed)
        self.url = url
        self.work = work
        self.sink = str(work / "sink.db")
        _app.sink_connect(self.sink).close()
        self.app = _app.build(url, self.sink, ttl=TTL)
        self.tasks: dict[str, Task] = {}
        self.tags: dict[str, tuple[str, dict[str, Any]]] = {}
        self.workers: list[Worker] = []
        self.killed: set[int] = set()
        self.exited: set[int] = set()
        self.last_spawn = 0.0
        self.kills = 0
        self.spawned = 0
        self.counter = 0
        self.ext: dict[str, list[str]] = collections.defaultdict(list)
        self.rerun: collections.Counter[str] = collections.Counter()
        self.rewinds: dict[str, list[float]] = collections.defaultdict(list)
        self.diverged: dict[str, tuple[int, str]] = {}
        self.actions: list[str] = []
        self.step = 0
        self.log_seen: dict[Path, int] = {}
        self.stops: collections.Counter[str] = collections.Counter()
        self.crashes: list[str] = []
        self.spent: collections.Counter[str] = collections.Counter()

    # ------------------------------------------------------------------ reporting
    def fail(self, what: str) -> None:
        tail = "\n".join(self.actions[-40:])
        message = (
            f"seed={self.seed} step={self.step}: {what}\n"
            f"(reproduce: TETHER_COMPOSITION_SEEDS={self.seed} TETHER_COMPOSITION_STEPS={self.steps}"
            f"{' TETHER_COMPOSITION_SKIP=' + ','.join(sorted(SKIP)) if SKIP else ''};"
            f" every step: {self.work}/actions.log)\n"
            f"last steps:\n{tail}\nworker logs (tail):\n{self.worker_logs()[-4000:]}"
        )
        (self.work / "failure.txt").write_text(message)
        raise InvariantError(message)

    def histories(self, task_ids: list[str | None]) -> str:
        out = []
        for task_id in task_ids:
            if task_id is None:
                continue
            try:
                entries = self.app.history(task_id)
            except tether.TetherError as exc:
                out.append(f"(no history of {task_id}: {exc})")
                continue
            lines = "\n".join(f"    {e.seq} {e.summary[:160]}" for e in entries[-40:])
            out.append(f"the history of {task_id}:\n{lines}")
        return "\n".join(out)

    def note(self, text: str) -> None:
        self.actions.append(f"{self.step:4d} {time.strftime('%H:%M:%S')} {text}")

    def worker_logs(self) -> str:
        return "".join(
            f"--- {p.name}\n" + p.read_text(errors="replace")[-1500:] for p in sorted(self.work.glob("worker-*.log"))
        )

    # ------------------------------------------------------------------ workers
    def alive(self) -> list[Worker]:
        return [w for w in self.workers if w.proc.poll() is None]

    def spawn(self) -> None:
        concurrency = self.rng.randint(1, 4)
        self.spawned += 1
        log = self.work / f"worker-{self.spawned:03d}.log"
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)]),
            "TETHER_COMPOSITION_URL": self.url,
            "TETHER_COMPOSITION_SINK": self.sink,
            "TETHER_COMPOSITION_TTL": str(TTL),
            "COLUMNS": "100000",  # one line per message in the log, however long
        }
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "tether.cli",
                    "worker",
                    "tests.composition._app:app",
                    "-c",
                    str(concurrency),
                    "--poll",
                    "0.1",
                    "--grace",
                    "2",
                ],
                cwd=ROOT,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        self.workers.append(Worker(proc, log, concurrency))
        self.last_spawn = time.monotonic()
        self.note(f"worker {proc.pid} started (-c {concurrency})")

    def ensure_worker(self) -> None:
        """At least one worker runs: a worker that exited by itself (it could not reach its database,
        say) is said in the log, and another starts, at most one every two seconds."""
        if self.alive():
            return
        for w in self.workers:
            if w.proc.pid not in self.killed and w.proc.pid not in self.exited:
                self.exited.add(w.proc.pid)
                last = w.log.read_text(errors="replace").strip().splitlines()[-1:] if w.log.exists() else []
                self.note(f"worker {w.proc.pid} exited by itself ({w.proc.returncode}): {last}")
        if time.monotonic() - self.last_spawn > 2:
            self.spawn()

    def kill(self) -> None:
        victim = self.rng.choice(self.alive())
        time.sleep(self.rng.uniform(0, 0.3))  # somewhere in what it is doing
        victim.proc.send_signal(signal.SIGKILL)
        victim.proc.wait()
        self.killed.add(victim.proc.pid)
        self.kills += 1
        for task in self.tasks.values():
            task.kills_seen += 1
        self.note(f"worker {victim.proc.pid} SIGKILLed")

    def stop_workers(self) -> None:
        for w in self.alive():
            w.proc.send_signal(signal.SIGTERM)
        for w in self.workers:
            try:
                w.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                w.proc.kill()
                w.proc.wait()

    # ------------------------------------------------------------------ the store, as seen from here
    def rows(self) -> dict[str, Any]:
        rows = self.app.store.list_tasks(self.app.tenant, TaskFilter(internal=True), limit=100_000)
        return {r.task_id: r for r in rows}

    def task_rows(self) -> dict[str, Any]:
        return {k: r for k, r in self.rows().items() if not r.type.startswith("tether.")}

    def discover(self) -> None:
        """Tasks made by tether itself (a rewind's archived branch) join the world."""
        for task_id in self.task_rows():
            if task_id not in self.tasks:
                state = self.app.state(task_id)
                self.tasks[task_id] = Task(task_id, state.type, dict(state.inputs))

    def pick(self, statuses: set[str] | None = None, *, archived: bool = False, diverged: bool = False) -> str | None:
        """A task at random (of these statuses): not an archived branch unless ``archived``, and not one
        that diverged unless ``diverged`` (a person's write to it would grow it: invariant 4 watches
        what tether itself appends)."""
        rows = self.task_rows()
        ids = sorted(
            t
            for t, r in rows.items()
            if (statuses is None or r.status in statuses)
            and (archived or "~" not in t)
            and (diverged or t not in self.diverged)
        )
        return self.rng.choice(ids) if ids else None

    def saw_divergence(self, task_id: str, message: str) -> None:
        if task_id in self.diverged:
            return
        version = self.app.get(task_id).state.version if task_id in self.task_rows() else -1
        self.diverged[task_id] = (version, message)
        self.note(f"DIVERGENCE {task_id} at v{version}: {message[:300]}")

    # ------------------------------------------------------------------ actions
    def new_inputs(self, task_type: str, tag: str) -> dict[str, Any]:
        rng = self.rng
        if task_type == "pipeline":
            return {"tag": tag, "width": rng.randint(1, 3)}
        if task_type == "approval":
            return {"tag": tag}
        if task_type == "chat":
            turns = rng.randint(2, 6)
            return {
                "tag": tag,
                "turns": turns,
                "waits": sorted(rng.sample(range(turns), rng.randint(0, min(2, turns)))),
                "tools": sorted(rng.sample(range(turns), rng.randint(0, min(3, turns)))),
                "compact": rng.random() < 0.7 and "compact" not in SKIP,
            }
        return {"tag": tag, "n": rng.randint(2, 4), "wait": rng.random() < 0.6}

    def act_new(self, here: bool) -> None:
        types = [t for t in ["pipeline", "approval", "chat", "chat", "batch"] if t not in SKIP]
        task_type = self.rng.choice(types)
        self.counter += 1
        tag = f"{task_type[0]}{self.counter}"
        inputs = self.new_inputs(task_type, tag)
        shared = task_type == "chat" and self.rng.random() < 0.35 and "shared" not in SKIP
        session = f"shared-{self.rng.randrange(2)}" if shared else None
        self.tags[tag] = (task_type, inputs)
        self.tasks[tag] = Task(tag, task_type, inputs)
        kwargs = {k: v for k, v in inputs.items()}
        if here:
            self.note(f"run {tag} {task_type} {inputs} session={session}")
            handle = self.guard(lambda: self.app.run(task_type, task_id=tag, session_id=session, **kwargs), tag)
            if handle is not None:
                self.note(f"  -> {handle.status.value}")
        else:
            self.note(f"start {tag} {task_type} {inputs} session={session}")
            self.app.start(task_type, task_id=tag, session_id=session, **kwargs)

    def guard(self, fn: Callable[[], Any], task_id: str, *tolerated: type[BaseException]) -> Any:
        """Run an action of a person or a process; the refusals the API documents are tolerated."""
        try:
            return fn()
        except tether.NonDeterminismError as exc:
            self.saw_divergence(exc.task_id, str(exc))
        except (tether.TaskBusyError, tether.LeaseLostError, *tolerated) as exc:
            self.note(f"  refused: {type(exc).__name__}: {str(exc)[:200]}")
        return None

    def act_resume(self) -> None:
        task_id = self.pick({"pending", "running", "sleeping", "awaiting_input"}, diverged=True)
        if task_id is None:
            return
        self.tasks[task_id].interventions += 1
        self.note(f"resume {task_id} here")
        handle = self.guard(lambda: self.app.resume(task_id), task_id)
        if handle is not None:
            self.note(f"  -> {handle.status.value}")

    def act_send(self, ahead: bool) -> None:
        if ahead:
            candidates = []
            for task_id, row in self.task_rows().items():
                if row.status in TERMINAL or "~" in task_id or task_id in self.diverged:
                    continue
                task = self.tasks[task_id]
                for key in asks(task.type, task.inputs):
                    candidates.append((task_id, key))
            if not candidates:
                return
            task_id, key = self.rng.choice(sorted(candidates))
        else:
            task_id = self.pick({"awaiting_input"})
            if task_id is None:
                return
            waiting = self.app.get(task_id).waiting
            if waiting is None:
                return
            key = waiting.key
        task = self.tasks[task_id]
        value = answer(task.inputs["tag"], key)
        task.interventions += 1
        self.note(f"send {task_id} {key}={value!r}{' (ahead)' if ahead else ''}")
        self.guard(
            lambda: self.app.send_input(task_id, key, value, actor="composer"), task_id, tether.InvalidInputError
        )

    def act_cancel(self) -> None:
        task_id = self.pick({"pending", "running", "sleeping", "awaiting_input"})
        if task_id is None:
            return
        task = self.tasks[task_id]
        task.interventions += 1
        task.cancel_asked = True
        if self.rng.random() < 0.5:
            self.note(f"cancel {task_id} here")
            handle = self.guard(
                lambda: self.app.cancel(task_id, reason="composition", actor="composer"),
                task_id,
                tether.InvalidTransition,
            )
        else:
            self.note(f"request_cancel {task_id}")
            handle = self.guard(
                lambda: self.app.request_cancel(task_id, reason="composition", actor="composer"),
                task_id,
                tether.InvalidTransition,
            )
        if handle is not None:
            self.note(f"  -> {handle.status.value}")

    def act_retry(self) -> None:
        task_id = self.pick({"failed"})
        if task_id is None:
            return
        self.tasks[task_id].interventions += 2
        if self.rng.random() < 0.5:
            self.note(f"retry {task_id} here")
            handle = self.guard(lambda: self.app.retry(task_id, actor="composer"), task_id, tether.InvalidInputError)
        else:
            self.note(f"request_retry {task_id}")
            handle = self.guard(
                lambda: self.app.request_retry(task_id, actor="composer"), task_id, tether.InvalidInputError
            )
        if handle is not None:
            self.note(f"  -> {handle.status.value}")

    def branch_point(self, task_id: str, version: int) -> int | None:
        """A seq to fork or rewind at: any, or (with "early" in SKIP) none before the task first wrote
        to its conversation (``None`` if it has not yet)."""
        low = 1
        if "early" in SKIP:
            first = next((e.seq for e in self.app.history(task_id) if e.type == "SessionWritten"), None)
            if first is None:
                return None
            low = first
        return self.rng.randint(low, version)

    def act_fork(self) -> None:
        source = self.pick(archived=True, diverged=True)
        if source is None:
            return
        version = self.app.get(source).state.version
        at = self.branch_point(source, version)
        if at is None:
            return
        self.counter += 1
        new_id = f"{source.split('~')[0]}-f{self.counter}"
        self.note(f"fork {source} at {at} (of {version}) -> {new_id}")
        at_state = self.app.state_at(source, at)
        for call in at_state.calls:
            if call.status != "completed":
                self.rerun[call.key] += 1  # in flight at the fork point: the fork runs it again, same key
        handle = self.guard(lambda: self.app.fork(source, at=at, new_id=new_id, actor="composer"), source)
        if handle is not None:
            source_task = self.tasks[source]
            self.tasks[new_id] = Task(new_id, source_task.type, dict(source_task.inputs))
            self.note(f"  -> {handle.status.value}")

    def act_rewind(self) -> None:
        task_id = self.pick()
        if task_id is None:
            return
        version = self.app.get(task_id).state.version
        to = self.branch_point(task_id, version)
        if to is None:
            return
        self.note(f"rewind {task_id} to {to} (of {version})")
        began = time.time()
        handle = self.guard(lambda: self.app.rewind(task_id, to=to, actor="composer"), task_id)
        if handle is None:
            return
        self.rewinds[task_id].append(began)
        self.tasks[task_id].interventions += 1
        n = 1
        while f"{task_id}~{n + 1}" in self.task_rows():
            n += 1
        archived_id = f"{task_id}~{n}"
        archived = self.app.state(archived_id)
        kept = {c.key for c in self.app.state_at(archived_id, to).calls if c.status == "completed"}
        for call in archived.calls:
            if call.key not in kept:
                self.rerun[call.key] += 1  # after the point (or in flight at it): the new branch runs it again
        source = self.tasks[task_id]
        self.tasks.setdefault(archived_id, Task(archived_id, source.type, dict(source.inputs)))
        self.note(f"  -> {handle.status.value}; archived {archived_id}")

    def sessions(self) -> list[str]:
        return sorted({r.session_id for r in self.task_rows().values() if r.session_id})

    def act_compact(self) -> None:
        sessions = self.sessions()
        if not sessions:
            return
        session_id = self.rng.choice(sessions)
        keep = self.rng.choice([1, 2, 4])
        self.note(f"compact session {session_id} keep_last={keep}")
        summary = self.guard(lambda: self.app.session(session_id).compact(keep_last=keep), session_id)
        self.note(f"  -> {'summary' if summary is not None else 'nothing to compact'}")

    def act_external(self) -> None:
        sessions = self.sessions()
        if not sessions:
            return
        session_id = self.rng.choice(sessions)
        self.counter += 1
        text = f"ext:{self.counter}"
        self.note(f"add {text!r} to session {session_id}")
        added = self.guard(lambda: self.app.session(session_id).add("user", text), session_id, tether.InvalidInputError)
        if added is not None:
            self.ext[session_id].append(text)

    def act_pause(self) -> None:
        pause = self.rng.uniform(0.05, 0.6)
        self.note(f"pause {pause:.2f}s")
        time.sleep(pause)

    # ------------------------------------------------------------------ the driver
    def run(self, steps: int) -> None:
        every: list[tuple[str, int, Callable[[], None]]] = [
            ("start", 14, lambda: self.act_new(here=False)),
            ("here", 5, lambda: self.act_new(here=True)),
            ("resume", 5, self.act_resume),
            ("send", 14, lambda: self.act_send(ahead=False)),
            ("ahead", 2, lambda: self.act_send(ahead=True)),
            ("cancel", 3, self.act_cancel),
            ("retry", 4, self.act_retry),
            ("fork", 5, self.act_fork),
            ("rewind", 4, self.act_rewind),
            ("compact", 3, self.act_compact),
            ("external", 3, self.act_external),
            ("pause", 6, self.act_pause),
            ("spawn", 5, lambda: self.spawn() if len(self.alive()) < MAX_WORKERS else None),
            ("kill", 4, lambda: self.kill() if self.alive() else None),
            ("settle", 2, lambda: self.settle(replays=6)),
        ]
        actions = [(name, w, fn) for name, w, fn in every if name not in SKIP]
        weights = [w for _, w, _ in actions]
        try:
            for _ in range(self.rng.randint(1, MAX_WORKERS)):
                self.spawn()
            for self.step in range(1, steps + 1):
                name, _, action = self.rng.choices(actions, weights)[0]
                with self.timed(name):
                    try:
                        action()
                    except InvariantError:
                        raise
                    except Exception as exc:  # an action raised what the API does not say it raises
                        import traceback

                        self.fail(
                            f"the step {name!r} raised {type(exc).__name__}: {exc}\n"
                            + "".join(traceback.format_exception(exc)[-12:])
                            + self.histories([getattr(exc, "task_id", None)])
                        )
                with self.timed("sleep"):
                    time.sleep(min(0.4, self.rng.expovariate(1 / 0.12)))  # the workers go on meanwhile
                with self.timed("checks"):
                    self.discover()
                    self.check_cheap()
                    if self.step % 5 == 0:
                        self.check_effects()
                        self.check_conversations()
            self.step = steps + 1
            with self.timed("finish"):
                self.finish()
        finally:
            self.stop_workers()
            spent = ", ".join(f"{k} {v:.1f}s" for k, v in sorted(self.spent.items(), key=lambda kv: -kv[1]))
            self.note(f"time spent: {spent}")

    @contextlib.contextmanager
    def timed(self, what: str) -> Iterator[None]:
        began = time.monotonic()
        try:
            yield
        finally:
            self.spent[what] += time.monotonic() - began

    # ------------------------------------------------------------------ settling
    def runnable(self) -> list[str]:
        """Tasks that are due or under way: every one of them must end (or wait) soon."""
        out = []
        for task_id, row in self.task_rows().items():
            if row.status in TERMINAL:
                continue
            if row.status == "awaiting_input":
                # Waiting still, for an answer not sent yet; an answered question is no longer
                # ``waiting`` (the answer closes it), so a task waiting on none is due to run.
                state = self.app.state(task_id)
                if state.waiting is not None and state.waiting.key not in state.received:
                    if state.cancel_reason is None:
                        continue
            out.append(task_id)
        return out

    def settle(self, replays: int) -> None:
        """With a worker alive, wait until nothing is runnable; then nothing may be appended, no
        worker may keep running tasks, and finished tasks replay clean."""
        self.note("settle")
        deadline = time.monotonic() + SETTLE_BOUND
        while True:
            self.ensure_worker()
            self.read_worker_logs()
            left = [t for t in self.runnable() if t not in self.diverged]
            if not left:
                break
            if time.monotonic() > deadline:
                self.report_stuck(left)
            time.sleep(0.1)
        time.sleep(0.5)  # a run that just stopped the last task writes its line and lets go
        before = {t: r.version for t, r in self.rows().items()}
        runs_before = self.worker_runs()
        time.sleep(1.0)
        after = {t: r.version for t, r in self.rows().items()}
        grew = {t: (before.get(t), v) for t, v in after.items() if before.get(t) != v}
        if grew:
            self.fail(f"nothing is runnable, yet these streams grew within a second: {grew}")
        runs = self.worker_runs()
        new = [line for line in runs if line not in set(runs_before)]
        if new:
            self.fail(f"nothing is runnable, yet workers ran tasks within a second (spinning?): {new[:20]}")
        self.note(f"  settled ({len(self.tasks)} tasks)")
        self.check_diverged_are_reported()
        self.check_endings()
        finished = sorted(t for t, r in self.task_rows().items() if r.status in TERMINAL)
        sample = finished if replays < 0 else self.rng.sample(finished, min(replays, len(finished)))
        for task_id in sample:
            self.check_replay(task_id)

    def report_stuck(self, left: list[str]) -> None:
        rows = self.task_rows()
        detail = []
        for task_id in left[:12]:
            row = rows[task_id]
            state = self.app.state(task_id)
            detail.append(
                f"{task_id} ({row.type}) {row.status} v{row.version} lease={row.lease_owner} "
                f"until {row.lease_expires} (now {time.time():.1f}) wake_at={row.wake_at} "
                f"waiting={state.waiting.key if state.waiting else None} received={sorted(state.received)}\n"
                + "\n".join(f"      {e.seq} {e.summary[:140]}" for e in self.app.history(task_id)[-12:])
            )
        self.fail(
            f"{len(left)} runnable tasks did not end within {SETTLE_BOUND:.0f}s with "
            f"{len(self.alive())} workers alive:\n  " + "\n  ".join(detail)
        )

    def worker_runs(self) -> list[str]:
        """Every line in which a worker says it ran a task (or stopped a run), each with its log's name."""
        lines = []
        for w in self.workers:
            if w.log.exists():
                for line in w.log.read_text(errors="replace").splitlines():
                    if RUN_LINE.match(line) or STOPPED.search(line):
                        lines.append(f"{w.log.name}: {line}")
        return lines

    def read_worker_logs(self) -> None:
        """What the workers said: divergences, runs that stopped or crashed."""
        for w in self.workers:
            if not w.log.exists():
                continue
            lines = w.log.read_text(errors="replace").splitlines()
            seen = self.log_seen.get(w.log, 0)
            for line in lines[seen:]:
                found = DIVERGED.search(line)
                if found:
                    self.saw_divergence(found.group(1), line)
                stopped = STOPPED.search(line)
                if stopped:
                    self.stops[stopped.group(1)] += 1
                    if stopped.group(2) == "crashed the run":
                        self.crashes.append(line)
            self.log_seen[w.log] = len(lines)

    # ------------------------------------------------------------------ invariants
    def check_cheap(self) -> None:
        """4 (a divergence appends nothing) and 6 (versions within their bound), from one listing."""
        self.read_worker_logs()
        rows = self.task_rows()
        for task_id, (version, message) in self.diverged.items():
            row = rows.get(task_id)
            if row is not None and version >= 0 and row.version > version:
                self.fail(
                    f"invariant 4: {task_id} reported a divergence at v{version} and has grown to v{row.version}:"
                    f" {message[:400]}"
                )
        for task_id, row in rows.items():
            task = self.tasks.get(task_id)
            if task is None:
                continue
            bound = self.bound(task, attempts=None)
            if row.version > bound:
                state = self.app.state(task_id)
                attempts = sum(len(c.attempts) for c in state.calls)
                bound = self.bound(task, attempts=attempts)
                if row.version > bound:
                    self.fail(
                        f"invariant 6: {task_id} ({task.type}) has {row.version} events, more than the bound "
                        f"{bound} (ops {_app.operations(task.type, task.inputs)}, attempts {attempts}, "
                        f"interventions {task.interventions}, kills {task.kills_seen}); its last events:\n"
                        + "\n".join(f"  {e.seq} {e.summary[:160]}" for e in self.app.history(task_id)[-25:])
                    )
        spinning = {t: n for t, n in self.stops.items() if n > 20}
        if spinning:
            self.fail(f"workers keep stopping runs of the same streams (spinning): {spinning}")
        if self.crashes:
            self.fail(f"a worker run crashed: {self.crashes[:5]}")

    def bound(self, task: Task, attempts: int | None) -> int:
        ops = _app.operations(task.type, task.inputs)
        base = 3 * ops + 8 * task.interventions + 4 * task.kills_seen + 20
        return base + (3 * attempts if attempts is not None else 0)

    def check_effects(self) -> None:
        """1: one key per logical call, one execution per key (beyond reruns asked for and kills)."""
        conn = _app.sink_connect(self.sink)
        try:
            raw = conn.execute("SELECT task, label, key, pid, at FROM raw ORDER BY id").fetchall()
        finally:
            conn.close()
        keys: dict[tuple[str, str, int], set[str]] = collections.defaultdict(set)
        live: collections.Counter[str] = collections.Counter()
        dead: collections.Counter[str] = collections.Counter()
        for task_id, label, key, pid, at in raw:
            epoch = sum(1 for t in self.rewinds.get(task_id, ()) if t < at)
            keys[(task_id, label, epoch)].add(key)
            (dead if pid in self.killed else live)[key] += 1
        for (task_id, label, epoch), found in keys.items():
            if len(found) > 1:
                self.fail(
                    f"invariant 1: the logical call {label!r} of {task_id} (branch {epoch}) ran under "
                    f"{len(found)} keys: {sorted(found)}"
                )
        for key, n in live.items():
            allowed = 1 + self.rerun[key]
            if n > allowed:
                rows = [r for r in raw if r[2] == key]
                self.fail(
                    f"invariant 1: key {key} was executed {n} times by processes that were not killed "
                    f"(allowed {allowed}): {rows}"
                )
        for key, n in dead.items():
            if n + live[key] > 1 + self.rerun[key] + self.kills:
                self.fail(f"invariant 1: key {key} executed {n + live[key]} times")

    def check_conversations(self) -> None:
        """2: in every session, each task's messages are a prefix of what its code appends, in order."""
        states = {t: self.app.state(t) for t in self.task_rows()}
        sessions = {s.session_id for s in states.values() if s.session_id}
        for session_id in sorted(sessions):
            contents = [m.content for m in self.app.session(session_id).messages()]
            by_tag: dict[str, list[str]] = collections.defaultdict(list)
            ext: list[int] = []
            for content in contents:
                if content.startswith("ext:"):
                    ext.append(int(content.split(":")[1]))
                    continue
                by_tag[content.split(":")[0]].append(content)
            if ext != sorted(set(ext)):
                self.fail(f"invariant 2: messages added from outside to {session_id} repeat or move: {ext}")
            root = session_id.split("@")[0]
            added = {int(t.split(":")[1]) for s, texts in self.ext.items() if s.split("@")[0] == root for t in texts}
            if set(ext) - added:
                self.fail(f"invariant 2: {session_id} holds outside messages never added to it: {set(ext) - added}")
            for tag, got in by_tag.items():
                if tag not in self.tags:
                    self.fail(f"invariant 2: {session_id} holds a message of no task: {got}")
                task_type, inputs = self.tags[tag]
                want = _app.expected_messages(task_type, inputs)
                if got != want[: len(got)]:
                    self.fail(
                        f"invariant 2: in session {session_id}, {tag}'s messages are not what its code appended, "
                        f"in order:\n  got    {got}\n  wanted {want}\n  session {contents}"
                    )
        for task_id, state in states.items():
            if state.status is tether.Status.COMPLETED and state.session_id:
                tag = self.tasks[task_id].inputs["tag"]
                messages = self.app.session(state.session_id).messages()
                got = [m.content for m in messages if m.content.startswith(tag + ":")]
                want = _app.expected_messages(self.tasks[task_id].type, self.tasks[task_id].inputs)
                if got != want:
                    self.fail(
                        f"invariant 2: {task_id} completed, and its session {state.session_id} holds {got}, not {want}"
                    )

    def check_diverged_are_reported(self) -> None:
        if self.diverged:
            lines = [f"{t} (at v{v}): {m[:500]}" for t, (v, m) in self.diverged.items()]
            first = next(iter(self.diverged))
            history = "\n".join(f"    {e.seq} {e.summary[:160]}" for e in self.app.history(first)[-40:])
            self.fail(
                "tasks diverged (NonDeterminismError) although their code is deterministic:\n  "
                + "\n  ".join(lines)
                + f"\n  the history of {first}:\n{history}"
            )

    def check_endings(self) -> None:
        """3: tasks end as intended: failed only by their flaky tool, cancelled only when asked."""
        for task_id, row in self.task_rows().items():
            if row.status == "failed":
                failure = self.app.state(task_id).failure
                if failure is None or failure.exception_type != "TransientError":
                    self.fail(f"{task_id} failed, not by its flaky tool: {failure}")
            if row.status == "cancelled" and "~" not in task_id and not self.cancel_asked_in_line(task_id):
                self.fail(f"{task_id} was cancelled, and nobody asked: {self.app.state(task_id).cancel_reason}")

    def cancel_asked_in_line(self, task_id: str) -> bool:
        """Whether a cancel was asked of this task or of one it was forked from (a fork of a task whose
        cancel was requested, at a point after the request, carries the request)."""
        state = self.app.state(task_id)
        return self.tasks[task_id].cancel_asked or state.cancel_reason is not None

    def check_replay(self, task_id: str) -> None:
        """5: a finished task replays clean, and the replay writes nothing."""
        before = self.rows()
        report = self.app.replay(task_id)
        after = self.rows()
        if not report.clean:
            parent = self.app.state(task_id).parent
            self.fail(
                f"invariant 5: {task_id} ({self.tasks[task_id].type}) does not replay clean: {report}\n"
                + self.histories([task_id, parent.task_id if parent else None])
            )
        mine = [task_id, *(f"session:{s}" for s in [self.app.get(task_id).state.session_id] if s)]
        changed = {
            t: (before[t].version, after[t].version)
            for t in mine
            if t in before and before[t].version != after[t].version
        }
        if changed:
            self.fail(f"invariant 5: replaying {task_id} wrote: {changed}")

    # ------------------------------------------------------------------ the end
    def finish(self) -> None:
        """Answer every wait, let the workers run everything to its end, check it all, then replay every
        finished task with the workers stopped and the database compared byte for byte."""
        self.note("finish")
        deadline = time.monotonic() + SETTLE_BOUND
        while True:
            self.ensure_worker()
            self.read_worker_logs()
            self.check_cheap()
            open_tasks = []
            for task_id, row in self.task_rows().items():
                if row.status in TERMINAL or task_id in self.diverged:
                    continue
                open_tasks.append(task_id)
                if row.status == "awaiting_input":
                    state = self.app.state(task_id)
                    if state.waiting is not None and state.waiting.key not in state.received:
                        value = answer(self.tasks[task_id].inputs["tag"], state.waiting.key)
                        self.note(f"send {task_id} {state.waiting.key}={value!r} (finish)")
                        send = functools.partial(self.app.send_input, task_id, state.waiting.key, value)
                        self.guard(send, task_id, tether.InvalidInputError)
                        self.tasks[task_id].interventions += 1
            if not open_tasks:
                break
            if time.monotonic() > deadline:
                self.report_stuck(open_tasks)
            time.sleep(0.1)
        self.settle(replays=0)
        self.check_effects()
        self.check_conversations()
        self.stop_workers()
        self.read_worker_logs()
        self.check_cheap()
        self.check_diverged_are_reported()
        store = None if not self.url.startswith("memory") else self.app.store
        before = dump_database(self.url, store)
        for task_id in sorted(self.task_rows()):
            report = self.app.replay(task_id)
            if not report.clean:
                parent = self.app.state(task_id).parent
                self.fail(
                    f"invariant 5: {task_id} ({self.tasks[task_id].type}) does not replay clean: {report}\n"
                    + self.histories([task_id, parent.task_id if parent else None])
                )
        after = dump_database(self.url, store)
        if after != before:
            self.fail(f"invariant 5: replaying the finished tasks wrote to the database:\n{dump_diff(before, after)}")
        rows = self.task_rows()
        statuses = collections.Counter(r.status for r in rows.values())
        ratio = max((r.version / self.bound(self.tasks[t], attempts=None) for t, r in rows.items()), default=0)
        conn = _app.sink_connect(self.sink)
        try:
            executions, keys = conn.execute("SELECT count(*), count(DISTINCT key) FROM raw").fetchone()
        finally:
            conn.close()
        self.note(
            f"done: {len(rows)} tasks {dict(statuses)}, {executions} executions of {keys} keys, "
            f"{self.kills} kills, {self.spawned} workers, versions up to {ratio:.2f} of their bound"
        )


def dump_diff(before: Any, after: Any) -> str:
    """What changed between two ``dump_database`` results, for people."""
    if isinstance(before, str):
        import difflib

        lines = difflib.unified_diff(before.splitlines(), after.splitlines(), lineterm="", n=0)
        return "\n".join(line[:400] for line in list(lines)[:40])
    out = []
    for table in sorted(set(before) | set(after)):
        gone = set(before.get(table, [])) - set(after.get(table, []))
        new = set(after.get(table, [])) - set(before.get(table, []))
        out += [f"- {table} {str(row)[:400]}" for row in sorted(gone)[:10]]
        out += [f"+ {table} {str(row)[:400]}" for row in sorted(new)[:10]]
    return "\n".join(out)


@pytest.fixture(params=["sqlite", "postgres", "redis"])
def database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[[Path], str]]:
    """A fresh database for a folder: a SQLite file in it, a PostgreSQL schema, or a key prefix on this
    test process's redis-server, dropped afterwards."""
    made: list[Iterator[str]] = []
    with contextlib.ExitStack() as namespaces:

        def make(folder: Path) -> str:
            if request.param == "sqlite":
                return f"sqlite:///{folder / 'tether.db'}"
            if request.param == "redis":
                if REDIS_PROBLEM:
                    pytest.skip(REDIS_PROBLEM)
                backend = redis_server.session_backend(redis_server.SESSION_URL)
                return str(namespaces.enter_context(backend.namespace(folder, "comp")))  # type: ignore[attr-defined]
            urls = pg_url("comp")
            made.append(urls)
            return next(urls)

        yield make
        for urls in made:
            next(urls, None)


@pytest.mark.crash
@pytest.mark.timeout(300 + 3 * STEPS * len(SEEDS))
def test_features_compose_under_random_steps_workers_and_kills(database: Callable[[Path], str], tmp_path: Path) -> None:
    started = time.monotonic()
    for seed in SEEDS:
        # A long run is a series of worlds of at most WORLD_STEPS steps each (a world's checks read all of
        # its tasks: their cost grows with the world), world k of seed s drawn by seed s + k * 1_000_003.
        left, k = STEPS, 0
        while left > 0:
            world_seed = seed + k * 1_000_003
            steps = min(left, WORLD_STEPS)
            work = tmp_path / f"seed-{world_seed}"
            work.mkdir()
            world = World(world_seed, database(work), work, steps)
            print(f"composition: seed {world_seed}, {steps} steps")
            try:
                world.run(steps)
            finally:
                (work / "actions.log").write_text("\n".join(world.actions) + "\n")
                world.app.close()
            print(f"composition: seed {world_seed}: {world.actions[-2]} ({time.monotonic() - started:.1f}s)")
            left, k = left - steps, k + 1
