"""Per-user templates of freshly migrated sqlite databases: Prefect's API database and MLflow's tracking database.

A new store's first command used to create both from nothing. Prefect's API server runs its ~115 Alembic
migrations on a fresh sqlite file (~13 CPU-s and ~15 s to healthy on 2 cores, against ~5 on a migrated copy)
and MLflow its own (~1 CPU-s, also in a command forked by the warm local server). What they produce depends
only on the library's version, so the first store on a machine keeps a copy, and later stores start from it:

- **Where.** ``$CORPUSFORGE_CACHE_DIR/db-templates`` (else ``$XDG_CACHE_HOME/corpusforge``, else
  ``~/.cache/corpusforge``), one file per library version: ``<library>-<version>-<migrations>-<sha256>.sqlite``.
  ``<migrations>`` hashes the names of the migration scripts the installed library ships, so another build of
  the same version with other migrations never gets a stale template. Deleting the folder is always safe.
- **What.** Only schema and the rows the library writes into a fresh database itself (Prefect: its block
  catalogue; MLflow: its default workspace). A copy with any other row (a flow run, a log, an event, an
  experiment, ...) is discarded, never written.
- **Checked.** A template's sha256 is part of its name and is checked on the bytes copied into a store, which
  are checked for foreign rows again; a file that fails is removed and never used (the store's database is then
  created by the library, as without a template). A name only says the bytes are the ones hashed, so the schema
  is checked too (a planted template with a trigger that deletes every metric, renamed to its own sha256, was
  otherwise used): for a library version listed in ``EXPECTED_SCHEMAS`` its schema objects (tables, indexes,
  triggers, views) must be exactly what that version's migrations make; for another version every trigger and
  view must be one the installed library's migration scripts create, word for word. A database that fails is
  neither used nor saved as a template.
- **Atomic.** Templates are written to a temp file and renamed into place; a store's database is copied to a
  temp name beside it and hard-linked to its final name only if no database appeared there meanwhile. Readers
  see complete files only; two writers racing leave two valid templates.
- **Never fatal.** A cache that cannot be written (read-only home, full disk) or a template that cannot be
  read costs only the migrations: logged, and the command goes on.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.metadata
import importlib.util
import json
import logging
import os
import re
import sqlite3
import stat
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

logger = logging.getLogger("corpusforge.db_templates")

TEMPLATE_DIR = "db-templates"
SUFFIX = ".sqlite"
STALE_TMP_S = 3600  # a temp file this old was left by a process that died while writing
_DIGEST = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True)
class Library:
    """A library whose sqlite database is templated: its distribution, where its package keeps the migration
    scripts that make the schema, and the tables it fills itself when it makes a fresh database."""

    name: str
    migrations: str  # relative to the package directory
    own_rows: frozenset[str]


# The digest (schema_digest) of the schema each library version's migrations make on sqlite, per template key:
# what a template must hold. tests/flows/test_db_template.py checks the installed versions' entries against
# databases the libraries migrate; after an upgrade, add the new key with the digest that test prints (until
# then, templates of the new version get the weaker check: triggers and views found in its migration scripts).
EXPECTED_SCHEMAS = {
    "mlflow-3.17.2-c6ea40ad31f12a1a": "cddabcfe9e16ea82a5dc555e1dfa638addda3e1ca793ca695d0ebbd1bbaf29e4",
    "prefect-3.8.8-9f7bd0c8a589918f": "fdec4218456e8f6744bf7e97bdcb07e0b989a91710b6ee8ebf90892affe14e40",
}

PREFECT = Library("prefect", "server/database/_migrations/versions/sqlite",
                  frozenset({"alembic_version", "block_type", "block_schema", "block_schema_reference"}))
MLFLOW = Library("mlflow", "store/db_migrations/versions", frozenset({"alembic_version", "workspaces"}))


def cache_home(environ=os.environ) -> Path:
    """The user's corpusforge cache: $CORPUSFORGE_CACHE_DIR, else $XDG_CACHE_HOME/corpusforge, else
    ~/.cache/corpusforge (templates here, object-store caches under ``stores/``: storage/object_store.py)."""
    base = environ.get("CORPUSFORGE_CACHE_DIR")
    if base:
        return Path(base).expanduser()
    return Path(environ.get("XDG_CACHE_HOME") or Path.home() / ".cache").expanduser() / "corpusforge"


def template_dir(environ=os.environ) -> Path:
    return cache_home(environ) / TEMPLATE_DIR


def _migrations_dir(library: Library) -> Path | None:
    try:
        spec = importlib.util.find_spec(library.name)
        locations = list(spec.submodule_search_locations or []) if spec else []
        return Path(locations[0]) / library.migrations
    except (ImportError, ValueError, IndexError):
        return None


@functools.cache
def template_key(library: Library) -> str | None:
    """``<library>-<version>-<16 hex of the sorted migration script names>``; None when the library or its
    migrations cannot be found (no template then). Found without importing the library (~30 ms, once per
    process: a process whose packages change is a new process, the local server re-executes itself)."""
    try:
        version = importlib.metadata.version(library.name)
        folder = _migrations_dir(library)
        names = sorted(n for n in os.listdir(folder) if n.endswith(".py")) if folder else []
    except (ImportError, ValueError, OSError):
        return None
    if not names:
        return None
    migrations = hashlib.sha256("\n".join(names).encode()).hexdigest()[:16]
    return f"{library.name}-{re.sub(r'[^A-Za-z0-9.+_]', '_', version)}-{migrations}"


def database_files(db: Path) -> list[Path]:
    """The database and the files sqlite keeps beside it while it is open or mid-transaction."""
    return [db, *(db.with_name(db.name + s) for s in ("-wal", "-shm", "-journal"))]


def foreign_rows(con: sqlite3.Connection, library: Library) -> list[str]:
    """The tables holding rows that the library does not write into a fresh database itself."""
    tables = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE "
                                        "'sqlite_%' ORDER BY name")]
    return [t for t in tables if t not in library.own_rows
            and con.execute(f'SELECT 1 FROM "{t}" LIMIT 1').fetchone() is not None]


def schema_digest(con: sqlite3.Connection) -> str:
    """sha256 of the database's schema objects (type, name, table and definition of every table, index, trigger
    and view), each definition's lines stripped and sorted: MLflow's migrations write a table's constraints in
    an order that differs from one process to the next (a set's iteration order)."""
    found = con.execute("SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY type, name").fetchall()
    objects = [[kind, name, table, sorted(line.strip().rstrip(",") for line in (sql or "").splitlines())]
               for kind, name, table, sql in found]
    return hashlib.sha256(json.dumps(objects).encode("utf-8")).hexdigest()


def _words(text: str) -> str:
    return " ".join(text.split()).rstrip(";").strip()


@functools.cache
def _migration_text(library: Library) -> str:
    """The installed library's migration scripts, whitespace-normalised, as one text."""
    folder = _migrations_dir(library)
    try:
        names = sorted(n for n in os.listdir(folder) if n.endswith(".py")) if folder else []
        return "\n".join(_words((folder / n).read_text(encoding="utf-8", errors="replace")) for n in names)
    except OSError:
        return ""


def _schema_mismatch(con: sqlite3.Connection, library: Library) -> str | None:
    """Why the database's schema is not what the installed library's migrations make, or None."""
    key = template_key(library)
    expected = EXPECTED_SCHEMAS.get(key or "")
    if expected is not None:
        digest = schema_digest(con)
        if digest != expected:
            return f"its schema is not the one the migrations of {key} make (schema digest {digest[:16]}, expected " \
                   f"{expected[:16]})"
        return None
    scripts = _migration_text(library)
    for kind, name, sql in con.execute("SELECT type, name, sql FROM sqlite_master WHERE type IN ('trigger', 'view') "
                                       "ORDER BY name"):
        if not sql or _words(sql) not in scripts:
            return f"it has a {kind} ({name}) that the migrations of the installed {library.name} do not create"
    return None


def _read_only(path: Path) -> str:
    return Path(path).resolve().as_uri() + "?mode=ro"


def _check_database(path: Path, library: Library) -> str | None:
    """Why ``path`` cannot serve as (or be made from) a template of ``library``; None when it can."""
    try:
        with contextlib.closing(sqlite3.connect(_read_only(path), uri=True)) as con:
            if con.execute("PRAGMA quick_check").fetchone() != ("ok",):
                return "it is not a sound sqlite database"
            tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            if "alembic_version" not in tables or len(con.execute("SELECT * FROM alembic_version").fetchall()) != 1:
                return "it has no single schema revision"
            foreign = foreign_rows(con, library)
            mismatch = _schema_mismatch(con, library)
    except sqlite3.Error as exc:
        return f"it cannot be read ({exc})"
    if foreign:
        return f"it holds rows beyond a fresh database's ({', '.join(foreign)})"
    return mismatch


def _candidates(library: Library, environ=os.environ) -> list[Path]:
    """This library version's template files, newest first (only plain files of this user)."""
    key = template_key(library)
    folder = template_dir(environ)
    if key is None:
        return []
    try:
        names = os.listdir(folder)
    except OSError:
        return []
    found = []
    for name in names:
        digest = name[len(key) + 1:-len(SUFFIX)]
        if not (name.startswith(key + "-") and name.endswith(SUFFIX) and _DIGEST.fullmatch(digest)):
            continue
        with contextlib.suppress(OSError):
            st = os.stat(folder / name, follow_symlinks=False)
            if st.st_uid == os.getuid() and stat.S_ISREG(st.st_mode):
                found.append((st.st_mtime, folder / name))
    return [p for _, p in sorted(found, reverse=True)]


def _digest_of_name(path: Path) -> str:
    return path.name[-len(SUFFIX) - 64:-len(SUFFIX)]


def _discard(path: Path, why: str) -> None:
    logger.warning("ignoring the database template %s: %s; removed", path, why)
    with contextlib.suppress(OSError):
        path.unlink()


def _copy_checked(template: Path, dest: Path) -> bool:
    """Copy ``template`` to the new file ``dest`` (fsynced), hashing the bytes copied: True when they are the
    bytes its name records."""
    h = hashlib.sha256()
    with open(template, "rb") as src, open(dest, "xb") as out:
        while chunk := src.read(1 << 20):
            h.update(chunk)
            out.write(chunk)
        out.flush()
        os.fsync(out.fileno())
    return h.hexdigest() == _digest_of_name(template)


def find_template(library: Library, environ=os.environ) -> Path | None:
    """The newest template of the installed ``library`` whose bytes match its recorded digest (others are
    removed)."""
    for path in _candidates(library, environ):
        try:
            ok = hashlib.sha256(path.read_bytes()).hexdigest() == _digest_of_name(path)
        except OSError:
            continue
        if ok:
            return path
        _discard(path, "its bytes do not match the sha256 its name records")
    return None


def seed(library: Library, db: Path, environ=os.environ) -> Path | None:
    """Create the database ``db`` as a copy of this library version's template. Only when neither ``db`` nor its
    journal files exist; returns the template used, or None (no template, a template that failed its checks,
    or a database that appeared meanwhile: then the library creates or opens it as without a template)."""
    if any(p.exists() for p in database_files(db)):
        return None
    for template in _candidates(library, environ):
        tmp = db.with_name(f".{db.name}.seed-{os.getpid()}-{uuid.uuid4().hex[:8]}.tmp")
        try:
            try:
                matches = _copy_checked(template, tmp)
            except FileNotFoundError as exc:
                if exc.filename == str(template):  # removed meanwhile (another process found it bad; rm -r)
                    continue
                raise
            if not matches:
                _discard(template, "its bytes do not match the sha256 its name records")
                continue
            why = _check_database(tmp, library)
            if why is not None:
                _discard(template, why)
                continue
            try:
                os.link(tmp, db)  # never replaces a database another process created meanwhile
            except FileExistsError:
                return None
            return template
        except OSError as exc:
            logger.warning("could not create %s from the template %s: %s", db, template, exc)
            return None
        finally:
            with contextlib.suppress(OSError):
                tmp.unlink()
    return None


def save_template(library: Library, source: Path, environ=os.environ) -> Path | None:
    """Keep a copy of ``source``, a database the installed ``library`` has just created (and nothing else has
    written to), as its template, unless a valid one exists. Returns the template now in the cache, or None
    (not saved: ``source`` holds other rows, or the cache cannot be written; logged, never raised)."""
    key = template_key(library)
    if key is None:
        return None
    existing = find_template(library, environ)
    if existing is not None:
        return existing
    folder = template_dir(environ)
    tmp = folder / f".{key}.{os.getpid()}-{uuid.uuid4().hex[:8]}.tmp"
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        _remove_stale_temp_files(folder)
        # sqlite's online backup: one consistent snapshot even while the library's server writes to the source
        with contextlib.closing(sqlite3.connect(_read_only(source), uri=True)) as src, \
                contextlib.closing(sqlite3.connect(tmp)) as dst:
            src.backup(dst)
            dst.execute("PRAGMA journal_mode=DELETE")  # one self-contained file (the source may be in WAL mode)
        why = _check_database(tmp, library)
        if why is not None:
            logger.info("no %s database template made from %s: %s", library.name, source, why)
            return None
        digest = hashlib.sha256(tmp.read_bytes()).hexdigest()
        final = folder / f"{key}-{digest}{SUFFIX}"
        os.replace(tmp, final)
        return final
    except (OSError, sqlite3.Error) as exc:
        logger.warning("could not save a %s database template under %s: %s", library.name, folder, exc)
        return None
    finally:
        for path in database_files(tmp):
            with contextlib.suppress(OSError):
                path.unlink()


def _remove_stale_temp_files(folder: Path) -> None:
    now = time.time()
    for name in os.listdir(folder):
        if name.startswith(".") and name.endswith((".tmp", ".tmp-wal", ".tmp-shm", ".tmp-journal")):
            with contextlib.suppress(OSError):
                if now - os.stat(folder / name).st_mtime > STALE_TMP_S:
                    os.unlink(folder / name)


def create_from_template(library: Library, db: Path, build: Callable[[Path], None],
                         environ=os.environ) -> str | None:
    """Create the database ``db`` if it does not exist: from the template, else with ``build(path)`` (the
    library's own creation of a fresh database at ``path``), whose result then becomes the template.
    Returns "seeded", "built" or None (``db`` existed, or something failed: the caller's library then creates
    it as without a template; never raises). Callers serialise calls for one ``db`` (a file lock)."""
    built = db.with_name(f".{db.name}.build-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    try:
        if any(p.exists() for p in database_files(db)):
            return None
        if seed(library, db, environ) is not None:
            return "seeded"
        build(built)
        save_template(library, built, environ)
        try:
            os.link(built, db)  # as seed(): never over a database that appeared meanwhile
        except FileExistsError:
            return None
        return "built"
    except Exception as exc:  # noqa: BLE001 - e.g. the library's private API changed: it creates the db itself
        logger.warning("could not create %s for %s ahead of it: %s", db, library.name, exc)
        return None
    finally:
        for path in database_files(built):
            with contextlib.suppress(OSError):
                path.unlink()
