"""Inter-process advisory file locks (POSIX flock). The kernel releases them when a holder dies."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

try:
    import fcntl
except ImportError:  # pragma: no cover - not on our platforms
    fcntl = None  # type: ignore[assignment]

HAVE_FLOCK = fcntl is not None


@contextlib.contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``path`` (created if missing) for the duration of the block.

    Where flock is unavailable this is a no-op; callers must stay correct without it (the store's
    first-rename-wins publish does).
    """
    if fcntl is None:
        yield
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)
