"""The public API is what tether/__init__.py exports: sorted, complete, and nothing private."""

from __future__ import annotations

import tether


def test_all_is_sorted_and_complete() -> None:
    public = {name for name in vars(tether) if not name.startswith("_")}
    assert tether.__all__ == sorted(tether.__all__)
    assert public <= set(tether.__all__) | {"annotations", "errors", "machine", "model", "log", "store"} | {
        m for m in public if isinstance(getattr(tether, m), type(tether))
    }
    for name in tether.__all__:
        assert hasattr(tether, name), name


def test_import_does_not_load_backends_it_does_not_use() -> None:
    import subprocess
    import sys

    code = "import sys, tether; print('tether.store.sqlite' in sys.modules, 'psycopg' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]


def test_errors_have_stable_codes() -> None:
    error = tether.ConflictError("t1", expected=3, actual=4)
    assert error.to_dict() == {
        "code": "conflict",
        "message": str(error),
        "task_id": "t1",
        "expected": 3,
        "actual": 4,
    }
    assert isinstance(tether.LeaseLostError("t", token=1, current=2), tether.ConflictError)
