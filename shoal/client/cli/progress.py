"""Progress bars for the long verbs of ``shoal``, on stderr, only when stderr is a terminal.

Why only then: a person watching a terminal wants to see that ``produce < big.txt`` or
``consume --max-messages 1000000`` moves; a script or a log file wants exactly the lines the
verb promises (data on stdout, Kafka's "Processed a total of N messages" on stderr) and no
escape codes. So ``bar`` returns a bar drawn with ``rich`` (transient: it disappears when done)
when ``sys.stderr.isatty()``, and an object that does nothing otherwise. ``rich`` is imported
only when a bar is drawn, so piped runs do not pay for it.
"""

from __future__ import annotations

import sys
from typing import Any, Protocol

__all__ = ["Bar", "bar"]


class Bar(Protocol):
    def advance(self, n: int = 1) -> None: ...

    def close(self) -> None: ...


class _NoBar:
    __slots__ = ()

    def advance(self, n: int = 1) -> None:
        pass

    def close(self) -> None:
        pass


class _RichBar:
    """One task of a ``rich.progress.Progress`` drawn on stderr."""

    __slots__ = ("_progress", "_task")

    def __init__(self, what: str, total: int | None, unit: str) -> None:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            Progress,
            SpinnerColumn,
            TaskProgressColumn,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        columns: list[Any] = [SpinnerColumn(), TextColumn("{task.description}")]
        if total is not None:
            columns += [BarColumn(), TaskProgressColumn(), TimeRemainingColumn()]
        columns += [TextColumn("{task.completed} " + unit), TimeElapsedColumn()]
        # No redirection: rich would send stdout (the records, maybe bound for a file) to the bar's stderr.
        self._progress = Progress(
            *columns, console=Console(stderr=True), transient=True, redirect_stdout=False, redirect_stderr=False
        )
        self._progress.start()
        self._task = self._progress.add_task(what, total=total)

    def advance(self, n: int = 1) -> None:
        self._progress.advance(self._task, n)

    def close(self) -> None:
        self._progress.stop()


def bar(what: str, total: int | None = None, unit: str = "records", *, enabled: bool | None = None) -> Bar:
    """A progress bar for ``what`` (``total`` steps, or unknown): drawn only on a terminal."""
    if enabled is None:
        enabled = sys.stderr.isatty()
    return _RichBar(what, total, unit) if enabled else _NoBar()
