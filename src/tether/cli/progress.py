"""A rich progress bar (counts, elapsed time, ETA) over tether's long operations, on a terminal only:
nothing in a pipe, nothing with --json."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from tether.telemetry.progress import reporting

__all__ = ["progress_bar"]


@contextmanager
def progress_bar(out: Console, *, quiet: bool = False) -> Iterator[None]:
    """Show the progress of the long operations run in this block, when ``out`` is a terminal and not ``quiet``."""
    if quiet or not out.is_terminal:
        yield
        return
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
    )
    with Progress(*columns, console=out, transient=True) as bar:
        shown: dict[str, object] = {}

        def advance(what: str, done: int, total: int) -> None:
            if what not in shown:
                shown[what] = bar.add_task(what, total=total)
            bar.update(shown[what], completed=done, total=total)  # type: ignore[arg-type]

        with reporting(advance):
            yield
