"""New stores start from cached templates of freshly migrated Prefect and MLflow databases
(corpusforge.storage.db_templates): made after a first start, digest-checked, keyed by library version and
migrations, never made from a database with runs in it. Real Prefect servers and MLflow stores, each test with its
own cache directory (never the user's)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from corpusforge.storage.db_templates import (
    MLFLOW,
    PREFECT,
    find_template,
    save_template,
    seed,
    template_key,
)
from tests.conftest import write

CLI = str(Path(sys.executable).parent / "corpusforge")


def server_env(cache: Path, **extra: str) -> dict[str, str]:
    """As for a user: the local server on, no Prefect API or home configured (Prefect's state in the store), a
    random port; the template cache in ``cache``."""
    env = {k: v for k, v in os.environ.items() if k not in ("PREFECT_API_URL", "PREFECT_HOME")}
    env.update(CORPUSFORGE_LOCAL_SERVER="on", CORPUSFORGE_PREFECT_PORT="0", CORPUSFORGE_CACHE_DIR=str(cache), **extra)
    return env


def run(args: list[str], env: dict[str, str], cwd: Path | None = None, timeout: float = 300):
    return subprocess.run([CLI, *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=timeout)


def templates(cache: Path, library: str) -> list[Path]:
    folder = cache / "db-templates"
    return sorted(folder.glob(f"{library}-*.sqlite")) if folder.is_dir() else []


def rows(db: Path, sql: str) -> list[tuple]:
    with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as con:
        return con.execute(sql).fetchall()


def catalogue(db: Path) -> list[tuple]:
    """Prefect's block catalogue with the times it was written: a database copied from a template has the
    template's, one Prefect migrated itself has its own."""
    return rows(db, "SELECT id, name, created FROM block_type ORDER BY id")


def schema(db: Path) -> list[tuple]:
    """Tables, indexes and their definitions, each definition's lines sorted: MLflow's own migrations write a
    table's constraints in an order that differs from one process to the next (a set's iteration order)."""
    found = rows(db, "SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY type, name")
    return [(kind, name, table, sorted(line.strip().rstrip(",") for line in (sql or "").splitlines()))
            for kind, name, table, sql in found]


def cache_env(cache: Path) -> dict[str, str]:
    return {"CORPUSFORGE_CACHE_DIR": str(cache)}


@pytest.fixture(scope="module")
def first_store(tmp_path_factory):
    """A first store on an empty cache: its local server migrates a new database and keeps it as the template."""
    root = tmp_path_factory.mktemp("templates")
    cache, store = root / "cache", root / "first"
    env = server_env(cache)
    started = run(["server", "start", "--store", str(store)], env)
    try:
        assert started.returncode == 0, started.stderr[-3000:]
    finally:
        run(["server", "stop", "--store", str(store)], env)
    return root, cache, store, env


@pytest.fixture(scope="module")
def second_store(first_store):
    """A second new store: seeded from the first one's template, then used for a flow run."""
    root, cache, _, env = first_store
    store = root / "second"
    (template,) = templates(cache, "prefect")
    started = run(["server", "start", "--store", str(store)], env)
    try:
        assert started.returncode == 0, started.stderr[-3000:]
        write(root / "docs" / "a.txt", "alpha beta\ngamma delta\n")
        here = run(["corpus", "docs", "--name", "small", "--json", "--store", str(store)], env, cwd=root)
        assert here.returncode == 0, here.stderr[-3000:]
        status = json.loads(run(["server", "status", "--store", str(store), "--json"], env).stdout)
        import httpx

        flow_runs = httpx.post(status["prefect_url"] + "/api/flow_runs/filter", json={}, timeout=10).json()
    finally:
        run(["server", "stop", "--store", str(store)], env)
    return root, cache, store, env, template, flow_runs


@pytest.mark.server
def test_the_first_start_keeps_its_new_database_as_the_template(first_store):
    _, cache, store, _ = first_store
    (template,) = templates(cache, "prefect")
    assert template.name.startswith(template_key(PREFECT) + "-")
    assert hashlib.sha256(template.read_bytes()).hexdigest() == template.name[-len(".sqlite") - 64:-len(".sqlite")]
    assert "kept this new Prefect database as the template" in (store / "logs" / "local-server.log").read_text()
    # schema and Prefect's own block catalogue; no run, log, event, deployment, work pool, ...
    assert schema(template) == schema(store / "prefect" / "prefect.db")
    assert catalogue(template) == catalogue(store / "prefect" / "prefect.db")
    for table in ("flow_run", "task_run", "log", "events", "deployment", "work_pool", "variable", "flow"):
        assert rows(template, f'SELECT count(*) FROM "{table}"') == [(0,)]
    assert rows(template, "PRAGMA journal_mode") == [("delete",)]  # one self-contained file
    from corpusforge.storage.db_templates import EXPECTED_SCHEMAS, schema_digest

    with contextlib.closing(sqlite3.connect(f"file:{template}?mode=ro", uri=True)) as con:
        digest = schema_digest(con)  # the schema Prefect's migrations make is the one the code expects (item 10)
    assert EXPECTED_SCHEMAS.get(template_key(PREFECT)) == digest, \
        f"add {template_key(PREFECT)!r}: {digest!r} to EXPECTED_SCHEMAS (storage/db_templates.py)"
    assert templates(cache, "mlflow") == []  # the warm-up's throw-away MLflow store is made by the migrations


@pytest.mark.server
def test_a_new_store_starts_from_the_template_and_records_its_runs(second_store):
    root, cache, store, _, template, flow_runs = second_store
    db = store / "prefect" / "prefect.db"
    log = (store / "logs" / "local-server.log").read_text()
    # created before Prefect's server started (start_prefect logs it, then starts the server): copied, not migrated
    assert f"created {db} from the cached template" in log and catalogue(db) == catalogue(template)
    assert [r["state"]["type"] for r in flow_runs] == ["COMPLETED"]
    assert rows(db, "SELECT count(*) FROM flow_run") == [(1,)]
    assert templates(cache, "prefect") == [template]  # this store's database was not made a template
    # the command made the store's MLflow database by the migrations, and kept the schema alone as the template;
    # MLflow added the Default experiment itself, where it puts it (the working directory's mlruns)
    (mlflow_template,) = templates(cache, "mlflow")
    assert rows(mlflow_template, "SELECT count(*) FROM experiments") == [(0,)]
    assert schema(store / "mlflow.db") == schema(mlflow_template)
    assert rows(store / "mlflow.db", "SELECT artifact_location FROM experiments WHERE experiment_id = 0") == \
        [(str(root / "mlruns" / "0"),)]


@pytest.mark.server
def test_a_database_with_a_flow_run_is_never_a_template(second_store, tmp_path):
    _, _, store, _, _, _ = second_store
    cache = tmp_path / "cache"
    assert save_template(PREFECT, store / "prefect" / "prefect.db", cache_env(cache)) is None
    assert templates(cache, "prefect") == [] and not list((cache / "db-templates").glob(".*"))


@pytest.mark.server
def test_a_tampered_template_is_not_used(first_store, tmp_path):
    _, cache, _, _ = first_store
    (template,) = templates(cache, "prefect")
    mine = tmp_path / "cache"
    (mine / "db-templates").mkdir(parents=True)
    tampered = mine / "db-templates" / template.name
    data = bytearray(template.read_bytes())
    data[len(data) // 2] ^= 0xFF
    tampered.write_bytes(bytes(data))
    db = tmp_path / "home" / "prefect.db"
    db.parent.mkdir()
    assert seed(PREFECT, db, cache_env(mine)) is None
    assert not db.exists() and not tampered.exists()  # removed, and nothing left beside the database
    assert os.listdir(db.parent) == []

    # bytes that match their name, but with a flow run in them: a copy of the seeded store's database
    planted = tmp_path / "planted.db"
    shutil.copy(template, planted)
    with sqlite3.connect(planted) as con:
        con.execute("INSERT INTO flow (id, name) VALUES ('00000000-0000-0000-0000-000000000001', 'planted')")
    digest = hashlib.sha256(planted.read_bytes()).hexdigest()
    named = mine / "db-templates" / f"{template_key(PREFECT)}-{digest}.sqlite"
    shutil.move(planted, named)
    assert seed(PREFECT, db, cache_env(mine)) is None and not db.exists() and not named.exists()

    # the genuine one is used
    shutil.copy(template, mine / "db-templates" / template.name)
    assert seed(PREFECT, db, cache_env(mine)) == mine / "db-templates" / template.name
    assert db.read_bytes() == template.read_bytes()
    assert seed(PREFECT, db, cache_env(mine)) is None  # an existing database is never replaced


@pytest.mark.server
def test_a_template_of_another_version_or_other_migrations_is_not_used(first_store, tmp_path):
    _, cache, _, _ = first_store
    (template,) = templates(cache, "prefect")
    digest = template.name[-len(".sqlite") - 64:-len(".sqlite")]
    _, version, migrations = template_key(PREFECT).rsplit("-", 2)
    mine = tmp_path / "cache" / "db-templates"
    mine.mkdir(parents=True)
    others = [mine / f"prefect-0.0.1-{migrations}-{digest}.sqlite",  # another Prefect version
              mine / f"prefect-{version}-{'0' * 16}-{digest}.sqlite"]  # this version, other migrations
    for other in others:
        shutil.copy(template, other)
    db = tmp_path / "prefect.db"
    assert seed(PREFECT, db, cache_env(mine.parent)) is None and not db.exists()
    assert find_template(PREFECT, cache_env(mine.parent)) is None
    assert all(other.exists() for other in others)  # another installation's: left alone


@pytest.mark.server
def test_the_ephemeral_fallback_starts_from_the_template_too(first_store, tmp_path):
    root, cache, _, env = first_store
    (template,) = templates(cache, "prefect")
    store = tmp_path / "store"
    write(tmp_path / "docs" / "a.txt", "alpha beta\n")
    res = run(["corpus", "docs", "--name", "small", "--store", str(store)], {**env, "CORPUSFORGE_LOCAL_SERVER": "off"},
              cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    db = store / "prefect" / "prefect.db"
    assert catalogue(db) == catalogue(template) and rows(db, "SELECT count(*) FROM flow_run") == [(1,)]
    assert templates(cache, "prefect") == [template]
    (mlflow_template,) = templates(cache, "mlflow")  # the second store's, used here: still the one
    assert rows(store / "mlflow.db", "SELECT name, artifact_location FROM experiments ORDER BY experiment_id") == \
        [("Default", str(tmp_path / "mlruns" / "0")), ("small", (store / "mlartifacts").as_uri())]


_RACE = textwrap.dedent("""
    import sys
    from pathlib import Path
    from corpusforge.storage.db_templates import PREFECT, save_template, seed
    what, path, cache = sys.argv[1:4]
    env = {"CORPUSFORGE_CACHE_DIR": cache}
    done = save_template(PREFECT, Path(path), env) if what == "save" else seed(PREFECT, Path(path), env)
    print(done or "")
""")


@pytest.mark.server
def test_racing_writers_and_seeders_leave_only_complete_files(first_store, tmp_path):
    _, cache, _, _ = first_store
    (template,) = templates(cache, "prefect")
    source = tmp_path / "fresh.db"
    shutil.copy(template, source)
    mine = tmp_path / "cache"

    def race(what: str, path: Path, n: int) -> list[str]:
        procs = [subprocess.Popen([sys.executable, "-c", _RACE, what, str(path), str(mine)], stdout=subprocess.PIPE,
                                  text=True) for _ in range(n)]
        outs = [p.communicate(timeout=120)[0].strip() for p in procs]
        assert all(p.returncode == 0 for p in procs)
        return outs

    made = race("save", source, 6)
    assert all(made)
    for path in templates(mine, "prefect"):  # one or more, each whole and matching its digest
        assert hashlib.sha256(path.read_bytes()).hexdigest() == path.name[-len(".sqlite") - 64:-len(".sqlite")]
        assert schema(path) == schema(template)
    assert not [n for n in os.listdir(mine / "db-templates") if n.endswith(".tmp")]

    db = tmp_path / "store" / "prefect.db"
    db.parent.mkdir()
    used = race("seed", db, 6)
    assert sum(bool(u) for u in used) == 1  # one created it; the others found it there
    assert os.listdir(db.parent) == ["prefect.db"]
    assert schema(db) == schema(template)


def test_a_new_tracking_database_is_made_once_then_copied_and_behaves_like_a_fresh_one(tmp_path, monkeypatch):
    from mlflow import MlflowClient

    from corpusforge.storage.tracking import Tracker, create_tracking_database

    monkeypatch.setenv("CORPUSFORGE_CACHE_DIR", str(tmp_path / "cache"))
    for name in ("first", "second", "reference", "elsewhere"):
        (tmp_path / name).mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    assert create_tracking_database(tmp_path / "first" / "mlflow.db") == "built"
    (template,) = templates(tmp_path / "cache", "mlflow")
    assert template.name.startswith(template_key(MLFLOW) + "-")
    assert rows(template, "SELECT count(*) FROM experiments") == [(0,)]

    monkeypatch.chdir(tmp_path / "second")
    assert create_tracking_database(tmp_path / "second" / "mlflow.db") == "seeded"
    assert create_tracking_database(tmp_path / "second" / "mlflow.db") is None  # exists: left alone
    tracker = Tracker(tmp_path / "second", "x")
    MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'reference' / 'mlflow.db'}")  # MLflow on its own
    seeded, reference = tmp_path / "second" / "mlflow.db", tmp_path / "reference" / "mlflow.db"
    assert schema(seeded) == schema(reference)
    assert rows(seeded, "SELECT * FROM alembic_version") == rows(reference, "SELECT * FROM alembic_version")
    # the Default experiment is MLflow's own, made on open here (not the template's maker's directory)
    assert rows(seeded, "SELECT name, artifact_location FROM experiments WHERE experiment_id = 0") == \
        [("Default", str(tmp_path / "second" / "mlruns" / "0"))]
    assert tracker.client.get_experiment(tracker.experiment_id).artifact_location == \
        (tmp_path / "second" / "mlartifacts").as_uri()

    # a moved store is still rebased on its first tracked use
    parent = tracker.start_pipeline_run("p", {"a": 1}, {})
    tracker.finish_pipeline_run(parent, {})
    shutil.move(tmp_path / "second", tmp_path / "moved")
    moved = Tracker(tmp_path / "moved", "x")
    assert moved.rebased_from == str(tmp_path / "second")
    assert moved.client.get_run(parent).info.artifact_uri.startswith((tmp_path / "moved").as_uri())


def test_a_cache_that_cannot_be_written_costs_only_the_migrations(tmp_path, monkeypatch):
    from corpusforge.storage.tracking import Tracker

    blocked = tmp_path / "not-a-dir"
    blocked.write_text("a file where the cache folder would be")
    monkeypatch.setenv("CORPUSFORGE_CACHE_DIR", str(blocked))
    tracker = Tracker(tmp_path / "store", "x")  # no error: MLflow's database made, no template kept
    assert tracker.experiment_id and (tmp_path / "store" / "mlflow.db").is_file()
    assert find_template(MLFLOW) is None


PLANTED_TRIGGER = ("CREATE TRIGGER forget_metrics AFTER INSERT ON metrics BEGIN DELETE FROM metrics; END; "
                   "CREATE TRIGGER forget_latest AFTER INSERT ON latest_metrics BEGIN DELETE FROM latest_metrics; END;")


def plant(template: Path, folder: Path) -> Path:
    """The drill's template: the genuine one with triggers that drop every metric, renamed to its new sha256."""
    planted = folder / "planted.tmp"
    shutil.copy(template, planted)
    with contextlib.closing(sqlite3.connect(planted)) as con:
        con.executescript(PLANTED_TRIGGER)
    digest = hashlib.sha256(planted.read_bytes()).hexdigest()
    named = folder / f"{template_key(MLFLOW)}-{digest}.sqlite"
    planted.rename(named)
    return named


def test_a_planted_template_with_triggers_is_refused_even_when_its_name_matches_its_bytes(tmp_path, monkeypatch):
    """Issue 30, item 10: a template must have the schema the library's migrations make, not only the bytes its
    name records. The installed MLflow's schema digest is in EXPECTED_SCHEMAS (this test says what to add after
    an upgrade); for another version, triggers and views must be the migration scripts' own."""
    from corpusforge.storage import db_templates
    from corpusforge.storage.tracking import Tracker, create_tracking_database

    monkeypatch.setenv("CORPUSFORGE_CACHE_DIR", str(tmp_path / "cache"))
    for name in ("first", "second", "third"):
        (tmp_path / name).mkdir()
    monkeypatch.chdir(tmp_path)
    assert create_tracking_database(tmp_path / "first" / "mlflow.db") == "built"
    (genuine,) = templates(tmp_path / "cache", "mlflow")
    with contextlib.closing(sqlite3.connect(f"file:{genuine}?mode=ro", uri=True)) as con:
        digest = db_templates.schema_digest(con)
    assert db_templates.EXPECTED_SCHEMAS.get(template_key(MLFLOW)) == digest, \
        f"add {template_key(MLFLOW)!r}: {digest!r} to EXPECTED_SCHEMAS (storage/db_templates.py)"

    kept = genuine.read_bytes()
    genuine.unlink()
    planted = plant(_bytes_to(kept, tmp_path / "g.sqlite"), genuine.parent)
    assert create_tracking_database(tmp_path / "second" / "mlflow.db") == "built"  # not "seeded" from the plant
    assert not planted.exists()
    tracker = Tracker(tmp_path / "second", "x")
    run = tracker.start_pipeline_run("p", {"a": 1}, {})
    tracker.client.log_metric(run, "perplexity", 12.5)
    assert [m.value for m in tracker.client.get_metric_history(run, "perplexity")] == [12.5]

    # a version whose schema digest the code does not know: its triggers must be its migrations' own
    monkeypatch.setattr(db_templates, "EXPECTED_SCHEMAS", {})
    (rebuilt,) = templates(tmp_path / "cache", "mlflow")  # the second store's database, saved as the template
    planted = plant(rebuilt, rebuilt.parent)
    rebuilt.unlink()
    assert db_templates.seed(MLFLOW, tmp_path / "third" / "mlflow.db") is None and not planted.exists()
    assert db_templates._check_database(_bytes_to(kept, tmp_path / "ok.sqlite"), MLFLOW) is None  # its own trigger


def _bytes_to(data: bytes, path: Path) -> Path:
    path.write_bytes(data)
    return path
