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


@contextlib.contextmanager
def stage_progress(prefix: str) -> Iterator[Callable[[str, int, int], None]]:
    """Yield ``update(stage, done, total)``: one bar per stage ("<prefix>: <stage>"), e.g. an n-gram step's
    counting, merging, estimating and ARPA writing. Silent when stderr is not a terminal (CI, logs, pipes, and
    `--json` callers capturing it); stdout is never touched."""
    if not sys.stderr.isatty():
        yield lambda stage, done, total: None
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=Console(stderr=True), transient=True) as progress:
        bars: dict[str, int] = {}

        def update(stage: str, done: int, total: int) -> None:
            if stage not in bars:
                bars[stage] = progress.add_task(f"{prefix}: {stage}", total=total)
            progress.update(bars[stage], completed=done, total=total)

        yield update


def note(on_metrics: Callable[..., object] | None, message: str) -> None:
    """Say ``message`` where the training's reports go: the reporter of :func:`training_report` (the task log, which
    the terminal shows too) when ``on_metrics`` is one, else the ``corpusforge`` logger."""
    say = getattr(on_metrics, "note", None)
    if callable(say):
        say(message)
    else:
        import logging

        logging.getLogger("corpusforge").info(message)
