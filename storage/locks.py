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


STORE_LOCK = "store.lock"  # <store>/.locks/store.lock: shared by every run on the store, exclusive for `artifacts gc`


class StoreBusy(RuntimeError):
    """The store is in use (a pipeline holds its shared lock): what needs it alone (``artifacts gc``) waits or stops."""


@contextlib.contextmanager
def store_in_use(root: Path) -> Iterator[None]:
    """Hold the store's lock shared for the block: every pipeline run does, from its first reuse check to its
    summary, so ``artifacts gc`` (which takes it exclusively) never removes an artifact a run is reading or about
    to read. Many runs share it. A store where the lock cannot be made (read-only) is used without it."""
    if fcntl is None:
        yield
        return
    try:
        path = Path(root) / ".locks" / STORE_LOCK
        path.parent.mkdir(parents=True, exist_ok=True)
        fh = open(path, "a+")
    except OSError:
        yield
        return
    with fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_SH)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


@contextlib.contextmanager
def store_alone(root: Path, wait: bool = False) -> Iterator[None]:
    """Hold the store's lock exclusively for the block (``artifacts gc``): no run is using the store meanwhile and
    none starts. Without ``wait``, StoreBusy at once when a run holds it."""
    if fcntl is None:
        yield
        return
    path = Path(root) / ".locks" / STORE_LOCK
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as fh:
        try:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            raise StoreBusy(f"{root} is in use by a running pipeline (it holds {path} shared): nothing was removed; "
                            "run gc again when it has finished, or with --wait") from None
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)
