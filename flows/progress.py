"""Rich progress bars for long work, drawn on stderr so `--json` stdout stays clean."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator


@contextlib.contextmanager
def shard_progress(description: str) -> Iterator[Callable[[int, int], None]]:
    """Yield ``update(done, total)``. Silent when stderr is not a terminal (CI, logs, pipes)."""
    if not sys.stderr.isatty():
        yield lambda done, total: None
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=Console(stderr=True), transient=True) as progress:
        task_id = progress.add_task(description, total=None)

        def update(done: int, total: int) -> None:
            progress.update(task_id, completed=done, total=total)

        yield update
