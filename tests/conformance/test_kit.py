"""The conformance kit (``tether.testing``) itself: run as a backend author runs it, it catches a
careless backend, skips what a backend lacks with the kit's reason, and reports what was proven."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytest_plugins = ["pytester"]

# A plugin that breaks the memory store while the inner run lasts, as a careless backend would.
CARELESS = '''
from tether.store.memory import MemoryStore

original = {}


def careless_append(self, tenant, task_id, events, expected_version, *, fence=None, index=None):
    """Ignores expected_version: appends after whatever the stream holds."""
    actual = self.get_task(tenant, task_id)
    version = actual.version if actual is not None else expected_version
    moved = [e._replace(seq=version + i) for i, e in enumerate(events, start=1)]
    return original["append"](self, tenant, task_id, moved, version, fence=fence, index=index)


def one_by_one(self, tenant, appends):
    """Appends across streams as a loop of single appends, each its own commit."""
    for part in appends:
        self.append(tenant, part.task_id, part.events, part.expected_version, fence=part.fence, index=part.index)


def pytest_configure(config):
    original["append"], original["append_streams"] = MemoryStore.append, MemoryStore.append_streams
    if config.getoption("-k") == "not streams":
        MemoryStore.append = careless_append
    else:
        MemoryStore.append_streams = one_by_one


def pytest_unconfigure(config):
    MemoryStore.append, MemoryStore.append_streams = original["append"], original["append_streams"]
'''


def _run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    pytester.makepyfile(careless=CARELESS)
    pytester.syspathinsert()
    # --assert=plain: the kit's modules are imported already, in this process.
    return pytester.runpytest_inprocess(
        "-p", "tether.testing", "-p", "careless", "--assert=plain", "-p", "no:cacheprovider", "-q",
        "--pyargs", "tether.testing.contract", "--tether-url=memory://", *args,
    )  # fmt: skip


def _names(result: pytest.RunResult) -> tuple[set[str], ...]:
    """The names of the checks that passed, were skipped and failed in an inner run."""
    outcomes = result.reprec.listoutcomes()  # type: ignore[attr-defined]
    return tuple({report.nodeid.rpartition("::")[2] for report in reports} for reports in outcomes)


def test_the_kit_catches_a_backend_that_ignores_the_expected_version(pytester: pytest.Pytester) -> None:
    result = _run(pytester, "-k", "not streams")
    passed, _, failed = _names(result)
    assert "test_append_at_a_stale_version_writes_nothing[memory]" in failed
    assert "test_create_then_read_back[memory]" in passed
    result.stdout.fnmatch_lines(["*tether.testing: what each backend proved*", "contract/appends * failed*"])


def test_the_kit_catches_a_backend_appending_streams_one_by_one(pytester: pytest.Pytester) -> None:
    """A stale stream after a good one leaves the good one written: caught."""
    result = _run(pytester, "-k", "streams")
    _, _, failed = _names(result)
    assert "test_append_streams_at_a_stale_version_on_one_stream_writes_nothing[memory]" in failed
    assert "test_append_streams_honours_the_fence[memory]" in failed
    assert "test_append_streams_writes_every_stream[memory]" not in failed


def test_a_capability_the_backend_lacks_is_skipped_with_the_kits_reason(pytester: pytest.Pytester) -> None:
    """SQLite's wait wakes on other connections' commits only: the push check is skipped, and the report
    says which capability and why."""
    pytester.syspathinsert()
    result = pytester.runpytest_inprocess(
        "-p", "tether.testing", "--assert=plain", "-p", "no:cacheprovider", "-rs",
        "--pyargs", "tether.testing.contract.test_wakeups", "--tether-url=sqlite:///x.db",
    )  # fmt: skip
    result.assert_outcomes(passed=1, skipped=1)  # the wait for a claimable task is no capability: it runs
    result.stdout.fnmatch_lines(
        [
            "optional: push *1 skipped*",
            "sqlite lacks push: it wakes a waiting reader on other connections' commits only*",
        ]
    )


def test_the_core_never_imports_the_kit() -> None:
    """tether.testing imports pytest: nothing tether imports at runtime reaches it."""
    code = "import sys, tether, tether.cli, tether.store; assert 'tether.testing' not in sys.modules; print('ok')"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.stdout.strip() == "ok", done.stderr


def test_capabilities_left_undeclared_are_probed() -> None:
    """A backend that declares none has cross_process, push and dump found for it: a memory store
    wakes its own readers and shares nothing with another open; a SQLite file is shared, and its
    wait wakes on other connections' commits only."""
    from tether.testing import MemoryBackend, SQLiteBackend

    class Memory(MemoryBackend):
        capabilities = None

    class SQLite(SQLiteBackend):
        capabilities = None

    memory, sqlite = Memory("memory://"), SQLite("sqlite:///probe.db")
    assert [memory.has(c) for c in ("cross_process", "push", "dump", "durable")] == [False, True, True, False]
    assert [sqlite.has(c) for c in ("cross_process", "push", "dump", "durable")] == [True, False, True, False]
