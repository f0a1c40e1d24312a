"""Process-wide defaults for offline, quiet runs (no telemetry, no update checks, quiet loggers). Call before
importing prefect/mlflow/gx."""

from __future__ import annotations

import os
from pathlib import Path

from corpusforge.door import QUIET_DEFAULTS


def configure_environment(store_root: Path) -> None:
    """Quiet telemetry and, unless a Prefect API or home is configured, keep Prefect's state in the store.

    Keeping ``PREFECT_HOME`` under the store means the ephemeral API of every CLI run writes to one
    database, so a later ``corpusforge ui`` shows all past flow runs of this store.
    """
    for key, value in QUIET_DEFAULTS.items():
        os.environ.setdefault(key, value)
    if not os.environ.get("PREFECT_API_URL") and not os.environ.get("PREFECT_HOME"):
        home = Path(store_root) / "prefect"
        home.mkdir(parents=True, exist_ok=True)
        os.environ["PREFECT_HOME"] = str(home)


def start_ephemeral_prefect(timeout: int = 120) -> None:
    """Start this process's ephemeral Prefect API now, under a lock on PREFECT_HOME.

    Without a PREFECT_API_URL, every process starts its own ephemeral API, which migrates the shared
    sqlite database on start. Two corpusforge commands started at once would race on those migrations
    ("duplicate column name"), so the first start is serialised; later starts find the schema current.
    Prefect's server object is a per-process singleton, so the flow then reuses this instance.
    """
    if os.environ.get("PREFECT_API_URL"):
        return
    from prefect.server.api.server import SubprocessASGIServer
    from prefect.settings import PREFECT_HOME

    from corpusforge.storage.locks import file_lock

    with file_lock(Path(PREFECT_HOME.value()) / ".corpusforge-ephemeral.lock"):
        server = SubprocessASGIServer()
        spawn = getattr(server, "_run_uvicorn_command", None)
        if spawn is not None and not server.running:  # tie each server process as soon as it exists

            def spawn_tied():
                proc = spawn()
                _stop_with_this_process(proc.pid)
                return proc

            server._run_uvicorn_command = spawn_tied
        server.start(timeout=timeout)


# A watchdog process that Linux signals when this process dies (even by kill -9); it then stops the ephemeral
# Prefect API, which Prefect starts without such a tie (it would keep its port and database forever).
_WATCHDOG = """
import os, signal, sys
pid, parent = int(sys.argv[1]), int(sys.argv[2])
def stop(*_):
    try:
        os.kill(pid, signal.SIGTERM)
    except OSError:
        pass
    os._exit(0)
signal.signal(signal.SIGTERM, stop)
if os.getppid() != parent:  # the parent died before the tie was made
    stop()
while True:
    signal.pause()
"""


def _stop_with_this_process(pid: int) -> None:
    import subprocess
    import sys

    from corpusforge.door import die_with_parent

    subprocess.Popen([sys.executable, "-S", "-c", _WATCHDOG, str(pid), str(os.getpid())],
                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                     preexec_fn=die_with_parent, close_fds=True, start_new_session=True)


# Errors that are the user's to fix (a bad config, a source that cannot be used, a tampered artifact, data that
# fails validation): the CLI ends with one line saying what is wrong, so Prefect's console log shows their
# message without a traceback. Anything else keeps its traceback.
USER_ERRORS = frozenset({"ConfigError", "SourceError", "DatasetValidationError", "TamperedArtifact"})


def _is_user_error(exc: BaseException | None) -> bool:
    import errno

    if isinstance(exc, OSError) and exc.errno == errno.ENOSPC or "No space left on device" in str(exc):
        return True  # a full disk (also wrapped by polars/DuckDB/pyarrow): the CLI says so once
    return exc is not None and type(exc).__name__ in USER_ERRORS and \
        type(exc).__module__.split(".")[0] in ("tasks", "storage", "flows", "models", "corpusforge")


def quiet_user_errors() -> None:
    """Drop the traceback of user errors from Prefect's console log records (their message stays)."""
    import logging

    try:
        from prefect.logging.handlers import PrefectConsoleHandler
    except ImportError:  # pragma: no cover - prefect is a dependency
        return

    class UserErrorFilter(logging.Filter):
        def filter(self, record: logging.LogRecord) -> bool:
            if record.exc_info and _is_user_error(record.exc_info[1]):
                record.exc_info, record.exc_text = None, None
            return True

    loggers = [logging.getLogger(), *(logging.getLogger(name) for name in list(logging.root.manager.loggerDict))]
    for logger in loggers:
        for handler in getattr(logger, "handlers", ()):
            if isinstance(handler, PrefectConsoleHandler) and not any(
                    type(f).__name__ == "UserErrorFilter" for f in handler.filters):
                handler.addFilter(UserErrorFilter())
