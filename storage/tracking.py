"""The MLflow tracking adapter: the only module in corpusforge that imports mlflow.

One experiment per pipeline name, one parent run per flow run, one nested run per step that actually
computed (reused steps are listed on the parent). Runs carry the tags ``corpusforge.step``,
``corpusforge.artifact_id``, ``corpusforge.inputs``, ``corpusforge.config_hash`` and
``corpusforge.uri``; inputs are logged with ``log_inputs`` using *our* content digests (MLflow's own
dataset digest does not hash content).

The tracking URI comes from ``CORPUSFORGE_TRACKING_URI``, then ``MLFLOW_TRACKING_URI``, then the
embedded default ``sqlite:///<store>/mlflow.db`` with artifacts under ``<store>/mlartifacts``.
Everything goes through an explicit ``MlflowClient`` and run ids, never the thread-local fluent API.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import socket
import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from corpusforge.storage.hashing import config_hash
from corpusforge.storage.locks import file_lock

DIGEST_CHARS = 32  # MLflow's dataset digest column is short; our ids are 64 hex, the full id is in `source`.
MAX_PARAM_CHARS = 6000
# MLflow 3's UI opens an experiment on its GenAI "Traces" tab unless it is a "machine learning" one. The UI
# takes the kind from its workflow switch (the `workflowType` URL parameter, else the browser's last choice,
# GenAI by default); the experiment tag says the same to every other client. Links we print carry both.
EXPERIMENT_KIND = {"mlflow.experimentKind": "custom_model_development"}
UI_QUERY = "?workflowType=machine_learning"
SUMMARY_PREFIX = "summary."  # a run's end-of-step figures that are no curve: params, beside the config


def default_tracking_uri(store_root: Path) -> str:
    uri = os.environ.get("CORPUSFORGE_TRACKING_URI") or os.environ.get("MLFLOW_TRACKING_URI")
    return uri or f"sqlite:///{Path(store_root) / 'mlflow.db'}"


def flatten(prefix: str, value: Any, out: dict[str, str]) -> dict[str, str]:
    """Nested config -> MLflow params ``a.b.c = value`` (lists as JSON)."""
    if isinstance(value, Mapping):
        for k, v in value.items():
            flatten(f"{prefix}.{k}" if prefix else str(k), v, out)
    else:
        text = value if isinstance(value, str) else json.dumps(value, default=str)
        out[prefix] = text[:MAX_PARAM_CHARS]
    return out


_PARAM_KEY_BAD = re.compile(r"[^A-Za-z0-9_\-. :/]")


def param_key(key: str) -> str:
    """An MLflow-legal param name: config keys may hold globs (``split.by_source.*ptb.valid.txt``) or other
    characters MLflow refuses; those become ``_`` (the full config is also logged as a file)."""
    return _PARAM_KEY_BAD.sub("_", key)[:250]


class RegistryLedger:
    """Which lm artifacts are registered in which MLflow registry: ``<store>/.tracking/registry.json``.

    A cache, written whenever a model version is registered or found, so that a run whose every step is
    already published can report its registered models without importing MLflow. An entry counts only
    while the registered copy it names still exists (for local registries); otherwise the run goes
    through the flow, which finds or re-registers the model and rewrites the entry.
    """

    def __init__(self, store_root: Path):
        self.path = Path(store_root) / ".tracking" / "registry.json"

    def _read(self) -> dict[str, dict[str, dict[str, str]]]:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def get(self, tracking_uri: str, artifact_id: str) -> dict[str, str] | None:
        entry = self._read().get(tracking_uri, {}).get(artifact_id)
        if not isinstance(entry, dict):
            return None
        location = entry.get("location", "")
        if location.startswith("file://") and not Path(location[len("file://"):]).exists():
            return None  # the registered copy is gone (a cleaned or moved MLflow store)
        return {k: v for k, v in entry.items()  # what a run reports; the rest is for `artifacts verify`
                if k not in ("location", "files", "loader_module", "artifact_key", "signature")}

    def put(self, tracking_uri: str, artifact_id: str, info: Mapping[str, str], location: str = "") -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with file_lock(self.path.with_suffix(".lock")):
            data = self._read()
            data.setdefault(tracking_uri, {})[artifact_id] = {**info, "location": location}
            tmp = self.path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n", encoding="utf-8")
            os.replace(tmp, self.path)


# Where MLflow's sqlite database keeps absolute paths into the store (artifact roots, model sources, our
# corpusforge.uri tags). A moved or copied store rewrites them to its own root, so it never reads (or lets
# MLflow load models from) the original store's files.
PATH_COLUMNS = (("experiments", "artifact_location"), ("runs", "artifact_uri"), ("model_versions", "source"),
                ("model_versions", "storage_location"), ("logged_models", "artifact_location"), ("tags", "value"),
                ("model_version_tags", "value"), ("logged_model_tags", "tag_value"), ("logged_model_tags", "value"))


def rebase_moved_store(store_root: Path) -> str | None:
    """If the store's embedded MLflow database was written under another root (the store was moved or copied),
    rewrite its paths to this root, and the registry ledger's too. Returns the old root, or None."""
    import sqlite3

    db = Path(store_root) / "mlflow.db"
    if not db.is_file():
        return None
    current = str(Path(store_root).resolve())
    with contextlib.closing(sqlite3.connect(db, timeout=30)) as con:
        olds = _other_roots(con, current)
        if not olds:
            return None
        tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        with con:
            for old in olds:
                for table, column in PATH_COLUMNS:
                    if table in tables and column in {r[1] for r in con.execute(f'PRAGMA table_info("{table}")')}:
                        con.execute(f'UPDATE "{table}" SET "{column}" = replace("{column}", ?, ?) '
                                    f'WHERE "{column}" LIKE ?', (old + "/", current + "/", f"%{old}/%"))
    ledger = RegistryLedger(store_root).path
    if ledger.is_file():
        text = ledger.read_text(encoding="utf-8")
        for old in olds:
            text = text.replace(old + "/", current + "/")
        ledger.write_text(text, encoding="utf-8")
    return ", ".join(sorted(olds))


def _other_roots(con, current: str) -> set[str]:
    """The store roots other than ``current`` that an embedded MLflow database's experiments name."""
    import sqlite3

    try:
        rows = con.execute("SELECT artifact_location FROM experiments WHERE artifact_location LIKE "
                           "'file://%/mlartifacts'").fetchall()
    except sqlite3.DatabaseError:
        return set()  # not MLflow's schema (yet): nothing to rebase
    return {r[0][len("file://"):-len("/mlartifacts")] for r in rows} - {current}


def moved_from(store_root: Path) -> set[str]:
    """The roots this store's embedded MLflow database still names (read only): where it was moved or copied from,
    until it is rebased."""
    import sqlite3

    db = Path(store_root) / "mlflow.db"
    if not db.is_file():
        return set()
    try:
        with contextlib.closing(sqlite3.connect(db.resolve().as_uri() + "?mode=ro", uri=True, timeout=30)) as con:
            return _other_roots(con, str(Path(store_root).resolve()))
    except sqlite3.Error:
        return set()


def rebase_before_check(store_root: Path) -> str | None:
    """What a moved or copied store's first tracked run does (rebase_moved_store, under the lock the Tracker takes),
    for a check that reads the registered copies (``artifacts verify``); None when done or nothing to do, else why
    it could not be done (a read-only store)."""
    import sqlite3

    if not moved_from(store_root):
        return None
    try:
        with file_lock(Path(store_root) / ".locks" / "mlflow-init.lock"):
            rebase_moved_store(store_root)
    except (OSError, sqlite3.Error) as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


def registered_copy_digests(location: str) -> dict[str, str]:
    """sha256 of every file of a registered model copy (a file:// location), recorded when it is registered."""
    from corpusforge.storage.hashing import sha256_file

    root = Path(location[len("file://"):]) if location.startswith("file://") else Path(location)
    return {p.relative_to(root).as_posix(): sha256_file(p) for p in sorted(root.rglob("*")) if p.is_file()}


def check_registered_copy(store_root: Path, manifest: Mapping[str, Any], not_rebased: str | None = None) -> list[str]:
    """Problems with the MLflow copies of a registered artifact, of any stage (empty when it has none or they are intact): every
    file as recorded at registration, no file added (a ``code/`` folder, unless the model was registered with its
    code: then its every file is among those recorded), MLmodel loading our loader only,
    and the copied model files equal to the lm artifact's own. A copy outside this store is refused, never
    followed; when it lies in the store this one was moved or copied from (its MLflow database not rebased yet:
    ``not_rebased`` says why), the problem says what to run."""
    problems: list[str] = []
    olds = moved_from(store_root)
    for tracking_uri, entries in RegistryLedger(store_root)._read().items():
        entry = entries.get(str(manifest["id"]))
        if not isinstance(entry, dict) or not str(entry.get("location", "")).startswith("file://"):
            continue
        where = f"registered copy {entry.get('uri', entry.get('name'))} ({entry['location']})"
        root = Path(entry["location"][len("file://"):])
        if not root.resolve().is_relative_to(Path(store_root).resolve()):
            old = next((o for o in sorted(olds) if Path(entry["location"][len("file://"):]).is_relative_to(o)), None)
            if old is None:
                problems.append(f"{where}: outside this store")
            else:
                problems.append(f"{where}: outside this store; this store was moved or copied from {old} and its "
                                f"MLflow database was not rebased to it ({not_rebased or 'not done yet'}): run "
                                f"`corpusforge artifacts verify {str(manifest['id'])[:12]} --store "
                                f"{Path(store_root).resolve()}` as a user who can write the store (it rebases), or "
                                "any tracked command on the store")
            continue
        if not root.is_dir():
            problems.append(f"{where}: missing")
            continue
        recorded = entry.get("files") or {}
        actual = registered_copy_digests(entry["location"])
        for rel in sorted(set(actual) - set(recorded)) if recorded else ():
            problems.append(f"{where}: unexpected file {rel}")
        for rel, digest in sorted(recorded.items()):
            if rel not in actual:
                problems.append(f"{where}: missing file {rel}")
            elif actual[rel] != digest:
                problems.append(f"{where}: {rel} changed since it was registered")
        mlmodel = (root / "MLmodel").read_text(encoding="utf-8") if (root / "MLmodel").is_file() else ""
        loaders = re.findall(r"^\s*loader_module:\s*(\S+)", mlmodel, flags=re.M)
        recorded_loader = entry.get("loader_module")  # what registration used (entries before 2026-11-27: none)
        if recorded_loader and loaders != [recorded_loader]:
            problems.append(f"{where}: MLmodel loads {loaders or 'nothing'}, not {recorded_loader} (what it was "
                            "registered with)")
        elif not loaders:
            problems.append(f"{where}: MLmodel names no loader module")
        recorded_signature = entry.get("signature")
        if recorded_signature and _mlmodel_signature(mlmodel) != recorded_signature:
            problems.append(f"{where}: MLmodel's signature is not the one it was registered with")
        bundled = any(rel.startswith("code/") for rel in recorded)  # registered with its code (bundle_code)
        if not bundled and (re.search(r"^\s*code:\s*(?!null\b)\S", mlmodel, flags=re.M) or (root / "code").exists()):
            problems.append(f"{where}: has a code/ folder, which MLflow would import")
        added_code = [rel for rel in sorted(actual) if rel.startswith("code/") and rel not in recorded]
        if bundled and added_code:
            problems.append(f"{where}: its code/ folder, which MLflow imports, has files it was not registered with: "
                            f"{', '.join(added_code)}")
        key = entry.get("artifact_key") or manifest.get("step")  # the data folder that is this artifact
        # compared file by file only where that folder is named after the artifact's own step (an lm's copy is the
        # artifact as published); a stage that registers a made model (post-training: the merged lm) writes its
        # own files there, which the digests recorded at registration cover
        for rel, meta in (manifest.get("files") or {}).items() if key == manifest.get("step") else ():
            copy = root / "data" / "data" / key / rel
            if copy.is_file() and actual.get(f"data/data/{key}/{rel}") != meta.get("sha256"):
                problems.append(f"{where}: data/data/{key}/{rel} differs from the {manifest.get('step')} "
                                f"artifact's {rel}")
    return problems


def _mlmodel_signature(mlmodel: str) -> dict[str, Any] | None:
    """The ``signature`` section of an MLmodel file (YAML), as MLflow's ``ModelSignature.to_dict()`` writes it."""
    import yaml

    try:
        data = yaml.safe_load(mlmodel) or {}
    except yaml.YAMLError:
        return None
    signature = data.get("signature") if isinstance(data, dict) else None
    return signature if isinstance(signature, dict) else None


class NullTracker:
    """Used when tracking is disabled: same verbs, records nothing."""

    enabled = False
    tracking_uri = None

    def start_pipeline_run(self, *a, **k) -> None:
        return None

    def log_step(self, *a, **k) -> None:
        return None

    def finish_pipeline_run(self, *a, **k) -> None:
        return None

    def register_pyfunc_model(self, *a, **k) -> None:
        return None

    def find_model_version(self, *a, **k) -> None:
        return None

    def start_step_run(self, *a, **k) -> None:
        return None

    def log_live_metrics(self, *a, **k) -> None:
        return None

    def end_run(self, *a, **k) -> None:
        return None

    def run_url(self, run_id) -> None:
        return None

    def experiment_url(self) -> None:
        return None

    def log_report(self, *a, **k) -> None:
        return None

    def set_tags(self, *a, **k) -> None:
        return None


def _example_rows(example: Sequence[Any], inputs: Mapping[str, str] | None) -> Any:
    """A pyfunc's input example as its signature reads it: texts, or (named ``inputs``) a frame of those columns."""
    if not inputs:
        return [str(t) for t in example]
    import pandas as pd

    return pd.DataFrame([{k: str(row[k]) for k in inputs} for row in example])


def _read_schema_head_once() -> None:
    """Opening an MLflow sqlalchemy store checks that the database is at the newest schema revision; MLflow
    finds that revision by loading every Alembic migration script it ships (~15-20 ms, twice per open: the
    tracking and the registry store). It is a constant of the installed MLflow, so it is read once per process
    here; the database's own revision is still read and compared on every open."""
    import functools

    from mlflow.store.db import utils

    if not hasattr(utils._get_latest_schema_revision, "cache_info"):
        utils._get_latest_schema_revision = functools.cache(utils._get_latest_schema_revision)


def _build_tracking_database(path: Path) -> None:
    """What MLflow's SqlAlchemyStore does on a new sqlite file before it adds the Default experiment: run every
    migration (the same engine set-up, the same function)."""
    from mlflow.store.db import utils

    engine = utils.create_sqlalchemy_engine_with_retry(f"sqlite:///{path}")
    try:
        utils._initialize_tables(engine)
    finally:
        engine.dispose()


def create_tracking_database(db: Path) -> str | None:
    """Create the store's new ``mlflow.db`` from the cached template of the installed MLflow (~0.03 CPU-s instead
    of ~1 CPU-s of migrations), or by the migrations, whose result then becomes the template. The template is
    the schema alone (no experiment): MLflow adds the Default experiment when it opens the database, with the
    artifact location and time it would give a database it had just made. Returns "seeded", "built" or None
    (the database existed, or MLflow creates it as before)."""
    from corpusforge.storage.db_templates import MLFLOW, create_from_template

    return create_from_template(MLFLOW, db, _build_tracking_database)


class Tracker:
    enabled = True

    def __init__(self, store_root: Path, experiment: str, tracking_uri: str | None = None):
        from mlflow import MlflowClient

        self.store_root = Path(store_root)
        self.tracking_uri = tracking_uri or default_tracking_uri(self.store_root)
        _read_schema_head_once()
        # Two runs starting at once on a fresh sqlite file would both run MLflow's migrations (the client
        # constructor runs them) and one fails ("index ... already exists"): serialise the first contact.
        with file_lock(self.store_root / ".locks" / "mlflow-init.lock"):
            if self.tracking_uri == f"sqlite:///{self.store_root / 'mlflow.db'}":
                create_tracking_database(self.store_root / "mlflow.db")
                self.rebased_from = rebase_moved_store(self.store_root)
            self.client = MlflowClient(tracking_uri=self.tracking_uri, registry_uri=self.tracking_uri)
            self.experiment_id = self._experiment_id(experiment)
        self.killed_orphans = self._mark_orphans_killed()

    def _mark_orphans_killed(self) -> list[str]:
        """Runs left RUNNING by a process of this machine that no longer exists (kill -9, power loss) are
        marked KILLED, so the MLflow UI does not show them running forever. Runs of live processes, and of
        other machines, are left alone."""
        try:
            running = self.client.search_runs([self.experiment_id], "attributes.status = 'RUNNING'", max_results=500)
        except Exception:  # noqa: BLE001 - a tracking server that cannot filter: nothing to sweep
            return []
        killed = []
        for run in running:
            tags = run.data.tags
            if tags.get("corpusforge.host") != socket.gethostname() or "corpusforge.pid" not in tags:
                continue
            if _process_alive(tags["corpusforge.pid"], tags.get("corpusforge.pid_start", "")):
                continue
            with contextlib.suppress(Exception):
                self.client.set_tag(run.info.run_id, "corpusforge.ended_by", "its process died: marked KILLED by "
                                    f"the next run (pid {os.getpid()})")
                self.client.set_terminated(run.info.run_id, "KILLED")
                killed.append(run.info.run_id)
        return killed

    def _experiment_id(self, experiment: str, attempts: int = 5) -> str:
        """Get or create the experiment. Two runs starting at once on a fresh sqlite file may race on
        the migrations or on creating the same experiment: the loser retries and finds the winner's."""
        location = (self.store_root / "mlartifacts").as_uri() if self.tracking_uri.startswith("sqlite:") else None
        for attempt in range(attempts):
            try:
                existing = self.client.get_experiment_by_name(experiment)
                if existing is not None:
                    if existing.tags.get("mlflow.experimentKind") is None:  # made by an older corpusforge
                        for key, value in EXPERIMENT_KIND.items():
                            self.client.set_experiment_tag(existing.experiment_id, key, value)
                    return existing.experiment_id
                return self.client.create_experiment(experiment, artifact_location=location,
                                                     tags={**EXPERIMENT_KIND, "corpusforge.pipeline": experiment})
            except Exception:  # noqa: BLE001 - MlflowException or sqlalchemy errors during a racing migration
                if attempt == attempts - 1:
                    raise
                time.sleep(0.5 * (attempt + 1))
        raise AssertionError("unreachable")

    def start_pipeline_run(self, run_name: str, config: Mapping[str, Any], tags: Mapping[str, str]) -> str:
        run = self.client.create_run(
            self.experiment_id,
            run_name=run_name,
            tags={"corpusforge.config_hash": config_hash(config), **owner_tags(), **tags},
        )
        run_id = run.info.run_id
        self._log_params(run_id, flatten("", config, {}))
        self.client.log_text(run_id, json.dumps(config, indent=2, default=str), "config.json")
        return run_id

    def log_step(
        self,
        parent_run_id: str,
        manifest: Mapping[str, Any],
        artifact_dir: Path,
        files: Iterable[str] = (),
        dirs: Iterable[tuple[str, str]] = (),
        history: Iterable[Mapping[str, Any]] = (),
        run_id: str | None = None,
    ) -> str:
        """A nested run for one computed step: params, metrics, tags, inputs and chosen files.

        ``history`` is a training curve, ``[{"step": n, "train_loss": ..., ...}]``: each numeric value is
        logged at its step, so the MLflow UI draws the curves. ``run_id``: a run opened by
        :meth:`start_step_run` that already holds the curve (logged live); it is completed, not duplicated.

        Curves are metrics; a figure that is no curve (a count, a final score of a step without a curve)
        is a metric only for a run that has no curve at all, where it is what the experiment's chart view
        compares across runs. Beside curves it would be a one-point chart: there it is a ``summary.*``
        param. Every run's figures are also its description (the run page's Overview)."""
        from mlflow.entities import Dataset, DatasetInput, InputTag, Metric

        artifact_dir = Path(artifact_dir)
        aid = manifest["id"]
        tags = {
            "mlflow.parentRunId": parent_run_id,
            "corpusforge.step": manifest["step"],
            "corpusforge.artifact_id": aid,
            "corpusforge.inputs": ",".join(str(i["id"]) for i in manifest.get("inputs", [])),
            "corpusforge.config_hash": config_hash(manifest.get("config", {})),
            "corpusforge.uri": artifact_dir.as_uri(),
        }
        if manifest.get("data_docs"):
            tags["corpusforge.data_docs"] = (artifact_dir / manifest["data_docs"]).as_uri()
        history = list(history)
        curves = {str(k) for point in history for k in point if k != "step"}
        # the final figures sit at the last step of the curve (not at step 0, which would draw them first)
        final_step = max((int(point["step"]) for point in history), default=0)
        if run_id is None:
            run = self.client.create_run(self.experiment_id, run_name=f"{manifest['step']}:{manifest['name']}",
                                         tags=tags)
            run_id = run.info.run_id
        else:
            from mlflow.entities import RunTag

            self.client.log_batch(run_id, tags=[RunTag(k, v) for k, v in tags.items()])
            history = ()  # already logged, step by step, while the step ran
        summary = _numeric_metrics(manifest)
        metrics, figures = split_summary(summary, curves)
        self._log_params(run_id, {**flatten("", manifest.get("config", {}), {}),
                                  **{SUMMARY_PREFIX + k: _number_text(v) for k, v in figures.items()}})
        stepped = [Metric(str(k), float(v), 0, int(point["step"])) for point in history for k, v in point.items()
                   if k != "step" and isinstance(v, (int, float)) and not isinstance(v, bool)]
        batch = [Metric(k, v, 0, final_step) for k, v in metrics.items()] + stepped
        self.client.set_tag(run_id, "mlflow.note.content", summary_markdown(manifest, summary))
        for start in range(0, len(batch), 1000):  # MLflow caps a batch at 1000 metrics
            self.client.log_batch(run_id, metrics=batch[start:start + 1000])
        datasets = [
            DatasetInput(
                Dataset(
                    name=str(i.get("name") or i["id"][:12]),
                    digest=str(i["id"])[:DIGEST_CHARS],
                    source_type="corpusforge",
                    source=json.dumps({"id": i["id"], "kind": i.get("kind"), "path": i.get("path")}),
                ),
                tags=[InputTag("mlflow.data.context", str(i.get("kind", "input")))],
            )
            for i in manifest.get("inputs", [])
        ]
        if datasets:
            self.client.log_inputs(run_id, datasets=datasets)
        self.client.log_artifact(run_id, str(artifact_dir / "manifest.json"))
        for rel in files:
            if (artifact_dir / rel).is_file():
                self.client.log_artifact(run_id, str(artifact_dir / rel))
        for rel, dest in dirs:
            if (artifact_dir / rel).is_dir():
                self.client.log_artifacts(run_id, str(artifact_dir / rel), dest)
        self.client.set_terminated(run_id, "FINISHED")
        return run_id

    def finish_pipeline_run(self, run_id: str, summary: Mapping[str, Any], failed: bool = False) -> None:
        """The parent run's counts are summaries (params ``summary.*``), not one-point metric charts."""
        figures = {k: v for k, v in summary.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
        if figures:
            self._log_params(run_id, {SUMMARY_PREFIX + k: _number_text(v) for k, v in figures.items()})
        self.client.log_text(run_id, json.dumps(summary, indent=2, default=str), "summary.json")
        self.client.set_terminated(run_id, "FAILED" if failed else "FINISHED")

    def log_report(self, run_id: str, html: str, markdown: str, name: str = "report.html") -> None:
        """The run report: the HTML page as an artifact (the Artifacts tab shows it) and its Markdown text,
        without the images, as the run's description (the Overview tab)."""
        self.client.log_text(run_id, html, name)
        self.client.set_tag(run_id, "mlflow.note.content", markdown[:MAX_NOTE_CHARS])

    def set_tags(self, run_id: str, tags: Mapping[str, str]) -> None:
        from mlflow.entities import RunTag

        self.client.log_batch(run_id, tags=[RunTag(k, str(v)) for k, v in tags.items()])

    def _log_params(self, run_id: str, params: Mapping[str, str]) -> None:
        from mlflow.entities import Param

        items, seen = [], set()
        for key, value in params.items():
            safe = base = param_key(key)
            n = 1
            while safe in seen:  # two keys that differ only in characters MLflow refuses
                safe, n = f"{base[:240]}_{n}", n + 1
            seen.add(safe)
            items.append(Param(safe, value))
        for start in range(0, len(items), 100):  # MLflow caps params per batch at 100
            self.client.log_batch(run_id, params=items[start:start + 100])

    def start_step_run(self, parent_run_id: str, step: str, name: str) -> str:
        """A nested run opened while a step is still computing, so its metrics can be logged as they come
        (:meth:`log_live_metrics`); :meth:`log_step` with ``run_id`` completes it, :meth:`end_run` fails it."""
        run = self.client.create_run(self.experiment_id, run_name=f"{step}:{name}",
                                     tags={"mlflow.parentRunId": parent_run_id, "corpusforge.step": step,
                                           **owner_tags()})
        return run.info.run_id

    def log_live_metrics(self, run_id: str, step: int, metrics: Mapping[str, Any]) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        batch = [Metric(str(k), float(v), now, int(step)) for k, v in metrics.items()
                 if isinstance(v, (int, float)) and not isinstance(v, bool)]
        if batch:
            self.client.log_batch(run_id, metrics=batch)

    def end_run(self, run_id: str, failed: bool = False) -> None:
        self.client.set_terminated(run_id, "FAILED" if failed else "FINISHED")

    def register_pyfunc_model(
        self,
        run_id: str,
        registered_name: str,
        data_dirs: Mapping[str, Path],
        loader_module: str,
        pip_requirements: Iterable[str],
        params: Mapping[str, Any] | None,
        tags: Mapping[str, str],
        kind: str = "lm",
        artifact_key: str | None = None,
        outputs: Mapping[str, str] | None = None,
        bundle_code: bool = False,
        probes: Sequence[Mapping[str, Any] | None] = (None,),
        input_example: Sequence[str] | Sequence[Mapping[str, str]] = ("The",),
        bundle_whole: Callable[[str, Collection[str]], bool] | None = None,
        inputs: Mapping[str, str] | None = None,
    ) -> dict[str, str]:
        """Log a pyfunc model built from directories (no pickle) to ``run_id`` and register a new version.

        The model is ``MLmodel`` + ``data/<key>/`` for each of ``data_dirs``; MLflow loads it by importing
        ``loader_module`` and calling its ``_load_pyfunc(data_path)``. Input: strings (a list, or one column);
        output: a string, or the named columns of ``outputs`` ({column: MLflow type, "double[]" a list of doubles}: a
        classifier's label and probabilities, a sentence vector); ``params`` become the signature's params with their defaults.
        MLflow reserves the alias ``latest`` for itself: ``models:/NAME@latest`` (and ``models:/NAME/latest``)
        always resolve to the newest version, so each new version *is* ``@latest`` without an explicit
        ``set_registered_model_alias`` (which refuses that name).

        ``input_example``: texts saved with the model as its input example (``input_example.json`` and the
        ``serving_input_example.json`` a scoring server takes), checked against the signature when it is saved.
        ``inputs``: named input columns instead of one string column ({column: MLflow type}: a reader's question
        and context); ``input_example`` is then rows of them (dicts).

        ``kind`` tags the registered model (``corpusforge.kind``); ``artifact_key`` names the data folder that
        is the artifact itself (default: the first). The result also says which ``loader_module`` and
        ``artifact_key`` were used and the model's signature (inputs, outputs, params), for the store's ledger: ``artifacts verify`` checks the registered copy
        against what was recorded, so this module names no loader of its own.

        ``bundle_code``: the model carries the corpusforge modules its loader imports (:func:`bundle_pyfunc_code`
        with ``probes``, the params of the predictions that find them, and ``bundle_whole``, which says what
        package is copied whole) and does not require the ``corpusforge``
        package, which no index has: it loads where only its pip requirements are installed (``mlflow models serve
        --env-manager ...``). MLflow puts ``code/`` first on ``sys.path``, so the copy is not a ``corpusforge``
        package there: the loader is a shim (``code/corpusforge_model_code/__init__.py``) that appends its
        ``lib/`` (holding ``corpusforge/``) to the path only when no corpusforge is installed, so the copy never
        shadows an installed corpusforge in a process that uses both.
        """
        import shutil
        import tempfile

        import mlflow.pyfunc
        from mlflow.exceptions import MlflowException
        from mlflow.models.signature import ModelSignature
        from mlflow.types import DataType
        from mlflow.types.schema import Array, ColSpec, ParamSchema, ParamSpec, Schema

        def dtype(value: Any) -> str:
            return "boolean" if isinstance(value, bool) else "long" if isinstance(value, int) else \
                "double" if isinstance(value, float) else "string"

        signature = ModelSignature(
            inputs=Schema([ColSpec(t, name) for name, t in inputs.items()] if inputs else [ColSpec("string")]),
            outputs=Schema([ColSpec(Array(DataType[t[:-2]]) if t.endswith("[]") else t, name)  # "double[]": a list
                            for name, t in outputs.items()] if outputs else [ColSpec("string")]),
            params=ParamSchema([ParamSpec(k, dtype(v), v) for k, v in (params or {}).items()]))
        logged = self.client.create_logged_model(self.experiment_id, name=registered_name, source_run_id=run_id,
                                                 tags=dict(tags))
        with tempfile.TemporaryDirectory(prefix="corpusforge-model-") as tmp:
            data = Path(tmp) / "data"
            for key, src in data_dirs.items():
                shutil.copytree(src, data / key, ignore=shutil.ignore_patterns("manifest.json", ".*"))
            model_dir = Path(tmp) / "model"
            requirements = list(pip_requirements)
            code_paths, saved_loader = None, loader_module
            if bundle_code:  # code/corpusforge_model_code/: a shim, and the modules under its lib/
                shim = Path(tmp) / "code" / BUNDLE_PACKAGE
                bundle_pyfunc_code(loader_module, data, shim / "lib", probes, bundle_whole)
                (shim / "__init__.py").write_text(_BUNDLE_SHIM.replace("{loader}", loader_module), encoding="utf-8")
                # the shim package is imported once per process, so each model names its own loader in its data
                (data / BUNDLE_LOADER_FILE).write_text(loader_module + "\n", encoding="utf-8")
                code_paths, saved_loader = [str(shim)], BUNDLE_PACKAGE
                requirements = [r for r in requirements if _requirement_name(r) != "corpusforge"]
            said = logging.getLogger("mlflow.pyfunc")  # its INFO "Validating input example against model signature"
            level = said.level
            said.setLevel(logging.WARNING)
            try:
                mlflow.pyfunc.save_model(str(model_dir), loader_module=saved_loader, data_path=str(data),
                                         code_paths=code_paths, pip_requirements=requirements, signature=signature,
                                         input_example=_example_rows(input_example, inputs),
                                         metadata={k: str(v) for k, v in tags.items()})
            finally:
                said.setLevel(level)
            self.client.log_model_artifacts(logged.model_id, str(model_dir))
        self.client.finalize_logged_model(logged.model_id, "READY")
        try:
            self.client.create_registered_model(registered_name, tags={"corpusforge.kind": kind})
        except MlflowException as exc:
            if exc.error_code != "RESOURCE_ALREADY_EXISTS":
                raise
        # the source is the storage location, not "models:/<model_id>": MLflow's sqlalchemy registry resolves
        # the latter through the *global* tracking URI (a TODO in mlflow 3.x), not this client's
        version = self.client.create_model_version(registered_name, logged.artifact_location, run_id=run_id,
                                                   tags=dict(tags), model_id=logged.model_id)
        return {**_version_info(registered_name, version.version, logged.model_id, logged.artifact_location),
                "loader_module": saved_loader, "artifact_key": artifact_key or next(iter(data_dirs)),
                "signature": signature.to_dict()}

    def find_model_version(self, registered_name: str, tag: str, value: str) -> dict[str, str] | None:
        """The newest version of ``registered_name`` whose tag ``tag`` is ``value`` (None when there is none)."""
        versions = self.client.search_model_versions(f"name = '{registered_name}' and tags.`{tag}` = '{value}'")
        if not versions:
            return None
        v = max(versions, key=lambda mv: int(mv.version))
        return _version_info(registered_name, v.version, getattr(v, "model_id", None), v.source)

    def run_url(self, run_id: str) -> str:
        return f"#/experiments/{self.experiment_id}/runs/{run_id}{UI_QUERY}"

    def experiment_url(self) -> str:
        """The experiment's page, on its runs (not the GenAI traces MLflow 3 opens by default)."""
        return f"#/experiments/{self.experiment_id}{UI_QUERY}"


def registered_artifact_id(store_root: Path, uri: str) -> str:
    """The store artifact a registered model version was made from: ``models:/NAME/VERSION``, ``models:/NAME/latest``
    or ``models:/NAME@ALIAS``, read from the version's ``corpusforge.artifact_id`` tag in the store's registry
    (``default_tracking_uri``). A LookupError, one line, when there is no such version or it was not made here."""
    from mlflow.exceptions import MlflowException
    from mlflow.tracking import MlflowClient

    rest = uri[len("models:/"):] if uri.startswith("models:/") else ""
    name, alias = rest.split("@", 1) if "@" in rest else (rest.rsplit("/", 1)[0] if "/" in rest else rest, None)
    version = None if alias or "/" not in rest else rest.rsplit("/", 1)[1]
    if not name:
        raise LookupError(f"{uri!r}: a registered model is models:/NAME/VERSION, models:/NAME/latest or models:/NAME@ALIAS")
    tracking = default_tracking_uri(Path(store_root))
    client = MlflowClient(tracking_uri=tracking, registry_uri=tracking)
    try:
        if alias:
            mv = client.get_model_version_by_alias(name, alias)
        elif version in (None, "latest"):
            found = client.search_model_versions(f"name = '{name}'")
            if not found:
                raise LookupError(f"{uri}: no registered model {name!r} in {tracking}")
            mv = max(found, key=lambda v: int(v.version))
        else:
            mv = client.get_model_version(name, version)
    except MlflowException as exc:
        raise LookupError(f"{uri}: not in the registry at {tracking} ({str(exc).splitlines()[0]})") from None
    artifact = (mv.tags or {}).get("corpusforge.artifact_id")
    if not artifact:
        raise LookupError(f"{uri}: version {mv.version} has no corpusforge.artifact_id tag (not registered by corpusforge)")
    return artifact


def _version_info(name: str, version: Any, model_id: str | None, source: str | None) -> dict[str, str]:
    """What the CLI reports about a registered version; ``source`` (where MLflow keeps the copy) is for the
    store's RegistryLedger and is popped before the info is reported."""
    return {"name": name, "version": str(version), "model_id": str(model_id or ""),
            "uri": f"models:/{name}/{version}", "latest_uri": f"models:/{name}@latest", "source": str(source or "")}


def _numeric_metrics(manifest: Mapping[str, Any]) -> dict[str, float]:
    out: dict[str, float] = {}
    for k, v in (manifest.get("metrics") or {}).items():
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            out[k] = float(v)
    acc = manifest.get("accounting")
    if acc:
        out["records_read"] = float(acc["records_read"])
        out["records_kept"] = float(acc["kept"])
        for bucket in ("quarantined", "filtered", "deduplicated"):
            out[f"records_{bucket}"] = float(sum(acc[bucket].values()))
    seconds = (manifest.get("timings") or {}).get("seconds")
    if seconds is not None:
        out["seconds"] = float(seconds)
    return out


MAX_NOTE_CHARS = 60_000


def split_summary(figures: Mapping[str, float], curves: Iterable[str]) -> tuple[dict[str, float], dict[str, float]]:
    """(metrics, summaries): with curves, only the curves' own final values stay metrics (the last point
    of the curve); the other figures are summaries. Without curves, every figure is a metric."""
    curves = set(curves)
    if not curves:
        return dict(figures), {}
    return ({k: v for k, v in figures.items() if k in curves}, {k: v for k, v in figures.items() if k not in curves})


def _number_text(value: float) -> str:
    value = float(value)
    return str(int(value)) if value.is_integer() and abs(value) < 1e15 else repr(value)


def summary_markdown(manifest: Mapping[str, Any], figures: Mapping[str, float]) -> str:
    """A step run's description: what it made and its figures, as a Markdown table."""
    lines = [f"**{manifest.get('step')}** `{manifest.get('name')}`, artifact `{str(manifest.get('id', ''))[:12]}`", "",
             "| figure | value |", "|---|---:|"]
    lines += [f"| {k} | {_number_text(v) if float(v).is_integer() else f'{v:.6g}'} |" for k, v in figures.items()]
    return "\n".join(lines)


def _start_time(pid: int | str) -> str:
    """The process's start time in clock ticks since boot (field 22 of /proc/PID/stat): with the pid, it names
    one process even after the pid is reused."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return ""


def owner_tags() -> dict[str, str]:
    """Which process runs an MLflow run (so a later run can tell whether it died)."""
    return {"corpusforge.host": socket.gethostname(), "corpusforge.pid": str(os.getpid()),
            "corpusforge.pid_start": _start_time(os.getpid())}


def _process_alive(pid: str, start: str) -> bool:
    try:
        os.kill(int(pid), 0)
    except (ValueError, ProcessLookupError):
        return False
    except PermissionError:
        pass
    now = _start_time(pid)
    if not now:
        return True  # no /proc: trust the pid
    try:
        if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
            return False
    except (OSError, IndexError):
        pass
    return not start or now == start


def open_tracker(store_root: Path, experiment: str, enabled: bool = True) -> Tracker | NullTracker:
    if not enabled:
        return NullTracker()
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    os.environ.setdefault("DO_NOT_TRACK", "true")
    return Tracker(store_root, experiment)


def pyfunc_texts(model_input: Any, column: str) -> list[str]:
    """The texts a registered pyfunc model was given: a string, a list of strings, ``{column: ...}`` or a DataFrame
    (as MLflow's schema enforcement hands it over; ``column`` if it has one, else its first column)."""
    if isinstance(model_input, str):
        return [model_input]
    if isinstance(model_input, dict):
        value = model_input.get(column)
        return [value] if isinstance(value, str) else [str(v) for v in value or []]
    if hasattr(model_input, "columns"):
        name = column if column in model_input.columns else model_input.columns[0]
        return [str(v) for v in model_input[name].tolist()]
    if isinstance(model_input, (list, tuple)):
        return [str(v) for v in model_input]
    raise TypeError(f"{column}s: a string, a list of strings or a DataFrame with a {column!r} column, "
                    f"not {type(model_input).__name__}")


# Run in a fresh interpreter of this environment by bundle_pyfunc_code: argv = loader module, data dir, probes
# (JSON), output file. Prints nothing of its own; writes {module name: [source file, is a package]}.
_TRACE_SCRIPT = """
import importlib, json, sys
loader, data, probes, out = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), sys.argv[4]
model = importlib.import_module(loader)._load_pyfunc(data)
for params in probes:
    model.predict(["The"], params) if params is not None else model.predict(["The"])
found = {name: [getattr(m, "__file__", None), hasattr(m, "__path__")] for name, m in list(sys.modules.items())
         if name == "corpusforge" or name.startswith("corpusforge.")}
with open(out, "w", encoding="utf-8") as f:
    json.dump(found, f)
"""


BUNDLE_PACKAGE = "corpusforge_model_code"  # the loader package of a model that carries its code
BUNDLE_LOADER_FILE = "loader_module.txt"  # in such a model's data: the module its shim hands _load_pyfunc to
_BUNDLE_SHIM = '''"""The loader of a registered corpusforge model that carries its code (lib/corpusforge: the modules it runs).

MLflow imports this package (the model's loader_module) and calls _load_pyfunc. An installed corpusforge is used
where there is one (the copy never shadows it in a process that also uses the project); elsewhere lib/ joins the
end of sys.path and the copy is imported. Python imports this package once per process, whichever model came
first, so the loader is read from each model's own data (loader_module.txt), LOADER only where that is missing.
"""

import importlib
import importlib.util
import os
import sys

LOADER = "{loader}"
if importlib.util.find_spec("corpusforge") is None:
    sys.path.append(os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))


def _load_pyfunc(data_path):
    named = os.path.join(data_path, "loader_module.txt")
    loader = LOADER
    if os.path.isfile(named):
        with open(named, encoding="utf-8") as f:
            loader = f.read().strip()
    if loader != "corpusforge" and not loader.startswith("corpusforge."):
        raise ImportError(f"{named}: names {loader!r}, which is not a corpusforge module")
    return importlib.import_module(loader)._load_pyfunc(data_path)
'''


def bundle_pyfunc_code(loader_module: str, data_dir: Path, out: Path,
                       probes: Sequence[Mapping[str, Any] | None] = (None,),
                       whole: Callable[[str, Collection[str]], bool] | None = None) -> Path:
    """A ``corpusforge/`` package tree under ``out`` (returned) holding the modules a pyfunc model needs to load and
    predict, for ``mlflow.pyfunc.save_model(code_paths=[...])``.

    The modules are found by running, not by reading: a fresh interpreter of this environment imports
    ``loader_module``, loads the model from ``data_dir`` and predicts once per ``probes`` entry (its params), and
    every ``corpusforge.*`` module then in ``sys.modules`` is copied (a package as its ``__init__.py``). A static
    walk of the import statements would take the lazy imports inside functions too, which reach the CLI, the
    flows and Prefect (nearly the whole package); the run takes exactly what was used, including the modules that
    are imported by name (the model families, which ``corpusforge.models.family`` finds by their folders). A
    package for which ``whole(name, imported modules)`` is true is copied whole (the caller says which: a model
    family's folder, ``corpusforge.models.family.family_package``, so every family's code travels, not only the
    modules this model's predictions reached). Sources only: no tests, no configs, no ``__pycache__``."""
    import shutil
    import subprocess
    import sys
    import tempfile

    out = Path(out)
    with tempfile.TemporaryDirectory(prefix="corpusforge-trace-") as tmp:
        listing = Path(tmp) / "modules.json"
        done = subprocess.run([sys.executable, "-c", _TRACE_SCRIPT, loader_module, str(Path(data_dir).resolve()),
                               json.dumps(list(probes)), str(listing)], cwd=tmp, capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"bundling the code of {loader_module}: loading and predicting in a fresh interpreter "
                               f"failed: {(done.stderr or done.stdout).strip()[-2000:]}")
        found: dict[str, list] = json.loads(listing.read_text(encoding="utf-8"))
    if loader_module not in found:
        raise RuntimeError(f"bundling the code of {loader_module}: the loader is not a corpusforge module")
    copies: dict[Path, Path] = {}
    for name, (source, is_package) in sorted(found.items()):
        if not source or not str(source).endswith(".py"):
            raise RuntimeError(f"bundling the code of {loader_module}: {name} has no Python source ({source})")
        rel = Path(*name.split("."))
        copies[rel / "__init__.py" if is_package else rel.with_suffix(".py")] = Path(source)
        if is_package and whole is not None and whole(name, found):
            folder = Path(source).parent  # all of its folder
            for src in folder.rglob("*.py"):
                if "__pycache__" not in src.parts:
                    copies.setdefault(rel / src.relative_to(folder), src)
    for rel, src in sorted(copies.items()):
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, out / rel)
    return out / "corpusforge"


def _requirement_name(requirement: str) -> str:
    """The distribution a pip requirement line names (``corpusforge==0.1.0`` -> ``corpusforge``), normalised."""
    return re.split(r"[\s\[<>=!~;@]", requirement.strip(), maxsplit=1)[0].lower().replace("_", "-")


def pyfunc_requirements(packages: Sequence[str] = ("corpusforge", "torch", "safetensors", "tokenizers", "numpy")
                        ) -> list[str]:
    """pip requirements of a registered model: each package pinned to the installed version (local tags such as
    +cpu dropped), or unpinned when it is not installed here."""
    from importlib.metadata import PackageNotFoundError, version

    out = []
    for package in packages:
        try:
            out.append(f"{package}=={version(package).split('+')[0]}")
        except PackageNotFoundError:
            out.append(package)
    return out


def _reading_client(store_root: Path, tracking_uri: str):
    """A client on ``tracking_uri`` for reading (``artifacts gc``); its first contact with the store's sqlite file
    is serialised like a Tracker's (the constructor may migrate)."""
    from mlflow import MlflowClient

    _read_schema_head_once()
    with file_lock(Path(store_root) / ".locks" / "mlflow-init.lock"):
        return MlflowClient(tracking_uri=tracking_uri, registry_uri=tracking_uri)


def _pages(search, **kwargs) -> Iterable[Any]:
    token = None
    while True:
        page = search(**kwargs, page_token=token)
        yield from page
        token = getattr(page, "token", None)
        if not token:
            return


def registry_artifact_versions(store_root: Path, tracking_uri: str) -> dict[str, list[str]]:
    """Artifact id -> ["NAME vN", ...]: every registered model version whose ``corpusforge.artifact_id`` tag names
    an artifact (``artifacts gc`` keeps those). Raises whatever MLflow raises when the registry cannot be read."""
    client = _reading_client(store_root, tracking_uri)
    found: dict[str, list[str]] = {}
    for mv in _pages(client.search_model_versions, max_results=1000):
        aid = (mv.tags or {}).get("corpusforge.artifact_id")
        if aid:
            found.setdefault(aid, []).append(f"{mv.name} v{mv.version}")
    return found


def runs_with_artifacts(store_root: Path, tracking_uri: str, artifact_ids: Iterable[str]) -> list[dict[str, str]]:
    """The runs (every experiment, deleted ones too) whose ``corpusforge.artifact_id`` tag is one of
    ``artifact_ids``: what ``artifacts gc`` names when it removes those artifacts."""
    from mlflow.entities import ViewType

    wanted = set(artifact_ids)
    client = _reading_client(store_root, tracking_uri)
    experiments = [e.experiment_id for e in _pages(client.search_experiments, view_type=ViewType.ALL)]
    out = []
    for start in range(0, len(experiments), 100):
        for run in _pages(client.search_runs, experiment_ids=experiments[start:start + 100],
                          filter_string="tags.`corpusforge.artifact_id` != ''", run_view_type=ViewType.ALL,
                          max_results=1000):
            aid = run.data.tags.get("corpusforge.artifact_id")
            if aid in wanted:
                out.append({"run_id": run.info.run_id, "experiment_id": run.info.experiment_id,
                            "run_name": run.info.run_name or "", "artifact_id": aid})
    return out
