"""Time travel over an engine: history, state at any point, diffs, forks, rewinds, replays and the
pre-deploy check. :class:`~tether.App` offers each as a method of its own (documented there)."""

from __future__ import annotations

import uuid
from functools import partial
from typing import Any

from tether.canonical import as_json
from tether.checks import check_id, check_int, check_optional_id, check_task_id
from tether.conversation import stream_id as _session_stream
from tether.errors import ConflictError, InvalidInputError, TaskDefinitionError
from tether.model import TaskState
from tether.model.status import TERMINAL, Status
from tether.runtime.engine import Engine
from tether.runtime.handles import CheckReport, TaskHandle
from tether.runtime.leases import acquire
from tether.runtime.run import drive_task, replay
from tether.runtime.session import fork_conversation
from tether.telemetry.progress import tracked
from tether.timetravel import HistoryCursor, HistoryEntry, ReplayReport, StateDiff, diff_states, step_bounds

__all__ = ["TimeTravel"]


class TimeTravel:
    """Looking back at a task and branching off it, on one engine."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.log = engine.log
        self.store = engine.store
        self.tenant = engine.tenant

    def history(self, task_id: str) -> list[HistoryEntry]:
        check_id(task_id, "task_id")
        return HistoryCursor(task_id).read(self.log)

    def state_at(self, task_id: str, seq: int) -> TaskState:
        return self.log.state_at(task_id, seq)

    def state_before(self, task_id: str, step: int | str) -> TaskState:
        start, _ = step_bounds(self.log.events(task_id), step)
        return self.log.state_at(task_id, start - 1)

    def state_after(self, task_id: str, step: int | str) -> TaskState:
        _, end = step_bounds(self.log.events(task_id), step)
        if end is None:
            raise InvalidInputError(f"step {step!r} of task {task_id!r} has not ended")
        return self.log.state_at(task_id, end)

    def diff(self, task_id: str, a: int, b: int, *, other: str | None = None) -> StateDiff:
        second = other or task_id
        return diff_states(
            self.log.state_at(task_id, a),
            self.log.state_at(second, b),
            a_label=f"{task_id}@{a}",
            b_label=f"{second}@{b}",
        )

    def fork(
        self,
        task_id: str,
        *,
        at: int,
        inputs: dict[str, Any] | None = None,
        new_id: str | None = None,
        actor: str | None = None,
    ) -> TaskHandle:
        check_int(at, "at", low=1)
        check_optional_id(actor, "actor")
        if new_id is not None:
            check_task_id(new_id, "new_id")
        row = self.log.task_row(task_id, "forked")  # a task, not one of tether's own streams
        if inputs is not None:
            self.engine.registry.task(row.type)  # the code must be known to rerun it
            inputs = as_json(inputs)
        at_state = self.log.state_at(task_id, at)  # also checks ``at``
        new_id = new_id or uuid.uuid4().hex
        if self.store.get_task(self.tenant, new_id) is not None:
            raise ConflictError(new_id, expected=0, actual=None)
        session = self._branch_conversation(at_state, new_id, default=new_id)
        try:
            forked = self.log.fork(
                task_id, at, new_id=new_id, inputs=inputs, session_id=session, at_state=at_state, actor=actor
            )
            return TaskHandle.of(forked)
        except BaseException:
            self._drop_branch(session)
            raise

    def _branch_conversation(self, at_state: TaskState, branch: str, *, default: str) -> str | None:
        """The conversation of a fork (or of a rewound task) made at ``at_state``: its own branch of the
        task's, ``{session}@{branch}``, whatever that conversation held then — empty, or not made yet, it is
        still the new task's own, never the one its parent (or the branch set aside) goes on writing. ``None``
        when the task had named none and the one the new task would make (named ``default``) is free."""
        session = at_state.session_id
        if session is None:
            if self.store.get_task(self.tenant, _session_stream(default)) is None:
                return None
            session = default  # a rewind's: the branch set aside made the conversation named after the task
        new_session_id = f"{session}@{branch}"
        if self.store.get_task(self.tenant, _session_stream(new_session_id)) is not None:
            raise ConflictError(_session_stream(new_session_id), expected=0, actual=None)
        fork_conversation(self.log, at_state, session, new_session_id)
        return new_session_id

    def _drop_branch(self, session: str | None) -> None:
        """Undo a conversation branch made for a fork that could not be made: a refusal writes nothing."""
        if session is not None and self.store.get_task(self.tenant, _session_stream(session)) is not None:
            self.store.delete_task(self.tenant, _session_stream(session))  # (none made when there was nothing)

    def rewind(self, task_id: str, *, to: int, actor: str | None = None) -> TaskHandle:
        check_int(to, "to", low=1)
        check_optional_id(actor, "actor")
        self.log.task_row(task_id, "rewound")
        token = acquire(self.store, self.tenant, task_id, self.engine.worker_id, self.engine.lease_ttl)
        try:
            n = 1
            while self.store.get_task(self.tenant, f"{task_id}~{n}") is not None:
                n += 1
            archive = f"{task_id}~{n}"
            at_state = self.log.state_at(task_id, to)  # also checks ``to``
            session = self._branch_conversation(at_state, f"{task_id}.{n}", default=task_id)
            self.store.release_lease(self.tenant, task_id, token)
            try:
                rewound = self.log.rewind(task_id, to, archive_id=archive, session_id=session, actor=actor)
                return TaskHandle.of(rewound)
            except BaseException:
                self._drop_branch(session)
                raise
        except BaseException:
            self.store.release_lease(self.tenant, task_id, token)
            raise

    def replay(self, task_id: str, upto: int | None = None) -> ReplayReport:
        if upto is not None:
            check_int(upto, "upto", low=1)
        spec = self.engine.spec_of(task_id)
        return drive_task(spec, lambda: replay(self.engine, spec, task_id, upto), "replay", "replay_async")

    def check(self, *, finished: int = 0, limit: int = 100_000) -> CheckReport:
        if type(finished) is not int or finished < 0:
            raise InvalidInputError(f"finished must be an int >= 0, got {finished!r}")
        open_statuses = [s for s in Status if s not in TERMINAL]
        rows = self.log.list(status=open_statuses, limit=limit)
        if finished:
            rows += self.log.list(status=list(TERMINAL), limit=finished)
        reports: list[ReplayReport] = []
        unknown: list[str] = []
        for row in tracked(rows, "replaying stored tasks"):
            try:
                spec = self.engine.registry.task(row.type)
            except TaskDefinitionError:
                unknown.append(row.task_id)
                continue
            run = partial(replay, self.engine, spec, row.task_id, None)
            reports.append(drive_task(spec, run, "check", "check_async"))
        return CheckReport(reports=reports, unknown=unknown)
