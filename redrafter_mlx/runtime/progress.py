"""One rich progress bar for the long jobs (distillation, hidden states, training)."""

from __future__ import annotations

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)


def start_progress(
    console: Console | None, label: str, total: int, *, completed: int = 0, extra: str | None = None, **fields
) -> tuple[Progress | None, TaskID | None]:
    """A started bar (stop it when done), or (None, None) when there is no console.

    extra: a format string over the task's fields, e.g. "loss {task.fields[loss]:.3f}".
    """
    if console is None:
        return None, None
    columns = [TextColumn(label), BarColumn(), MofNCompleteColumn()]
    columns += [TextColumn(extra)] if extra else []
    bar = Progress(*columns, TimeElapsedColumn(), TimeRemainingColumn(), console=console)
    bar.start()
    return bar, bar.add_task(label, total=total, completed=completed, **fields)
