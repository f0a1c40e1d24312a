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


def default_prefect_database(environ=os.environ) -> Path | None:
    """``$PREFECT_HOME/prefect.db`` when a Prefect API started from ``environ`` uses that default sqlite file: no
    external API (``PREFECT_API_URL``) and no other database named in the environment; None otherwise. Read
    from the environment, not from Prefect's settings, so the local server need not import Prefect before it
    starts Prefect's server (~1 CPU-s); start_ephemeral_prefect() checks Prefect's resolved settings too."""
    home = environ.get("PREFECT_HOME")
    if environ.get("PREFECT_API_URL") or not home:
        return None
    db = Path(home).expanduser() / "prefect.db"
    for prefix in ("PREFECT_API_DATABASE_", "PREFECT_SERVER_DATABASE_"):
        url, driver = environ.get(prefix + "CONNECTION_URL"), environ.get(prefix + "DRIVER")
        if (url and url != f"sqlite+aiosqlite:///{db}") or (driver and driver != "sqlite+aiosqlite"):
            return None
    return db


def seed_prefect_database(db: Path | None) -> bool:
    """Create a new Prefect API database at ``db`` from the cached template of the installed Prefect (see
    corpusforge.storage.db_templates): its server then starts in ~5 s instead of ~15 s of migrations. False
    when ``db`` is None or exists, or there is no valid template; never raises."""
    from corpusforge.storage.db_templates import PREFECT, seed

    if db is None:
        return False
    try:
        return seed(PREFECT, db) is not None
    except Exception as exc:  # noqa: BLE001 - a template is an optimisation: Prefect creates the database itself
        _template_log().warning("could not seed %s from a template: %s", db, exc)
        return False


def save_prefect_template(db: Path | None) -> Path | None:
    """Keep the database that a Prefect API server has just created at ``db`` as the template for the next new
    store, unless a valid one is cached. Call once the server is healthy and before any command used it: a
    database with any run, log, event or other row beyond Prefect's own block catalogue is never saved."""
    from corpusforge.storage.db_templates import PREFECT, save_template

    if db is None or not db.is_file():
        return None
    try:
        return save_template(PREFECT, db)
    except Exception as exc:  # noqa: BLE001 - never fails a command
        _template_log().warning("could not save a template of %s: %s", db, exc)
        return None


def _template_log():
    import logging

    return logging.getLogger("corpusforge.db_templates")


def _ephemeral_database() -> Path | None:
    """The default sqlite file the ephemeral API will use, per Prefect's resolved settings (profiles and
    settings files included), or None when it uses another database."""
    from prefect.settings import get_current_settings

    settings = get_current_settings()
    url = settings.server.database.connection_url
    url = url.get_secret_value() if url is not None else ""
    db = Path(settings.home) / "prefect.db"
    if url != f"sqlite+aiosqlite:///{db}" or default_prefect_database() is None:
        return None
    return db


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

    from corpusforge.storage.db_templates import database_files
    from corpusforge.storage.locks import file_lock

    with file_lock(Path(PREFECT_HOME.value()) / ".corpusforge-ephemeral.lock"):
        server = SubprocessASGIServer()
        db = None if server.running else _ephemeral_database()
        new_db = db is not None and not any(p.exists() for p in database_files(db))
        seeded = new_db and seed_prefect_database(db)
        spawn = getattr(server, "_run_uvicorn_command", None)
        if spawn is not None and not server.running:  # tie each server process as soon as it exists

            def spawn_tied():
                proc = spawn()
                _stop_with_this_process(proc.pid)
                return proc

            server._run_uvicorn_command = spawn_tied
        server.start(timeout=timeout)
        if new_db and not seeded:  # this start migrated a new database: the next new store starts from a copy
            save_prefect_template(db)


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
# fails validation, a training that diverged at these settings): the CLI ends with one line saying what is wrong, so Prefect's console log shows their
# message without a traceback. Anything else keeps its traceback.
USER_ERRORS = frozenset({"ConfigError", "SourceError", "DatasetValidationError", "TamperedArtifact",
                         "TrainingDiverged"})


def _is_user_error(exc: BaseException | None) -> bool:
    import errno

    if isinstance(exc, OSError) and exc.errno == errno.ENOSPC or "No space left on device" in str(exc):
        return True  # a full disk (also wrapped by polars/DuckDB/pyarrow): the CLI says so once
    if isinstance(exc, MemoryError):
        return True  # a memory limit: the message says which shard and what to change (its traceback does not)
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
