"""Glue between finished steps and the tracking adapter: which files of which step go to MLflow.

Tracking runs in the flow's own thread after the step tasks return, so MLflow (and its sqlite file)
is never written from several worker threads or processes at once.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from corpusforge.storage.store import read_manifest
from corpusforge.storage.tracking import RegistryLedger
from corpusforge.tasks.stage import Registers, Stage, StepOutputs, load
from corpusforge.tasks.step import StepResult


class ParentRun:
    """The flow run's MLflow parent run, opened only when something is first logged under it: a run whose
    every step was reused (a scheduled run over unchanged data) leaves no MLflow run behind."""

    def __init__(self, tracker, run_name: str, config: dict[str, Any], tags: dict[str, str]):
        self.tracker, self.run_name, self.config, self.tags = tracker, run_name, config, tags
        self.run_id: str | None = None

    def __call__(self) -> str | None:
        if self.run_id is None and getattr(self.tracker, "enabled", False):
            self.run_id = self.tracker.start_pipeline_run(run_name=self.run_name, config=self.config, tags=self.tags)
        return self.run_id


def _parent_id(parent) -> str | None:
    return parent() if callable(parent) else parent


class LiveRuns:
    """Nested MLflow runs opened while a step trains, so its curves show in the MLflow UI as they happen.

    ``callback(step, name)`` is a trainer metric callback; the run is created at its first call (a reused
    step never calls it, so it gets no empty run). :func:`track_results` completes the run when the step
    has published; :meth:`close` marks whatever is left open (the step failed) as FAILED. MLflow trouble
    while training is logged and never stops the training.
    """

    def __init__(self, tracker, parent_run_id):
        """``parent_run_id``: the parent's id, or a :class:`ParentRun` (opened at the first metric)."""
        self.tracker, self.parent = tracker, parent_run_id
        self.runs: dict[tuple[str, str], str] = {}
        self.broken = False

    def callback(self, step: str, name: str):
        if self.parent is None or (isinstance(self.parent, ParentRun) and not getattr(self.tracker, "enabled", False)):
            return None

        def on_metrics(at: int, metrics: dict[str, float]) -> None:
            if self.broken:
                return
            try:
                key = (step, name)
                if key not in self.runs:
                    self.runs[key] = self.tracker.start_step_run(_parent_id(self.parent), step, name)
                self.tracker.log_live_metrics(self.runs[key], at, metrics)
            except Exception as exc:  # noqa: BLE001 - tracking must not kill an hour of training
                import logging

                self.broken = True
                logging.getLogger("corpusforge").warning("live MLflow logging stopped: %s; the curve is logged "
                                                         "when the step finishes", exc)

        return on_metrics

    def take(self, step: str, name: str) -> str | None:
        return None if self.broken else self.runs.pop((step, name), None)

    def close(self, failed: bool = True) -> None:
        for run_id in self.runs.values():
            try:
                self.tracker.end_run(run_id, failed=failed)
            except Exception:  # noqa: BLE001 - best effort on the way out
                pass
        self.runs.clear()


def unregistered(results: Sequence[StepResult], stages: Sequence[Stage], *, tracking: bool,
                 register: bool) -> list[dict[str, str]]:
    """The results of a registering stage (``Registers``) that no model was registered for, each with why, in one
    line: tracking off, ``tracking.register_models`` off, or a family the stage does not register (an encoder lm
    generates no text). A registration that failed is not here: its entry in ``registered_models`` has ``error``."""
    registrars = {s.registers.step: s.registers for s in stages if s.registers is not None}
    out = []
    for r in results:
        registers = registrars.get(r.step)
        if registers is None:
            continue
        if not tracking:
            why = "tracking is off (tracking.enabled: false): nothing goes to MLflow, so no model is registered"
        elif not register:
            why = "tracking.register_models is false: the run is tracked but no model is registered"
        elif not load(registers.wants)(Path(r.path)):
            why = (f"the {r.step} stage registers {registers.what}, which a model of the {_family(Path(r.path))!r} "
                   "family is not; it stays in the store (and its MLflow run)")
        else:
            continue
        out.append({"step": r.step, "name": r.name, "id": r.id, "reason": why})
    return out


def _family(artifact_dir: Path) -> str:
    import json

    try:
        return str(json.loads((artifact_dir / "config.json").read_text(encoding="utf-8")).get("family"))
    except (OSError, ValueError):
        return "unknown"


def registered_model_fields(summary: dict[str, Any], step: str) -> dict[str, Any]:
    """What a training command's JSON says about the registry for its stage's ``step``: ``registered_model`` (the
    registered version, or null) and ``registered_model_reason`` (null when one is registered; else why not: the
    stage does not register this model, tracking or registration is off, or registering failed)."""
    models = [m for m in summary.get("registered_models") or [] if m.get("step", step) == step]
    model = next((m for m in models if "error" not in m), None)
    if model is not None:
        return {"registered_model": model, "registered_model_reason": None}
    if models:
        return {"registered_model": None, "registered_model_reason": f"registering failed: {models[0]['error']}"}
    skipped = [m for m in summary.get("not_registered") or [] if m["step"] == step]
    why = skipped[-1]["reason"] if skipped else f"no {step} model of this run is registered"
    return {"registered_model": None, "registered_model_reason": why}


def track_results(tracker, parent_run_id, results: Sequence[StepResult], register: bool = True,
                  live: LiveRuns | None = None, stages: Sequence[Stage] = ()) -> dict[str, Any]:
    """Log a nested run per computed step (and register each new lm); return counts for the parent's summary.

    A step that logged live (``live``) has its run completed instead of a second one created.
    ``stages`` are the declarations (corpusforge.stages.STAGES) that say which files of each step are logged and
    which steps register models. ``parent_run_id`` may be a :class:`ParentRun`: it is opened only when a step computed or an lm is
    registered now, so a run that computed nothing makes no MLflow run."""
    outputs = {step: out for s in stages for step, out in s.steps.items()}
    registrars = {s.registers.step: s.registers for s in stages if s.registers is not None}
    computed = [r for r in results if not r.reused]
    reused = [r for r in results if r.reused]
    registered = []
    lazy = isinstance(parent_run_id, ParentRun)
    if lazy and not tracker.enabled:
        parent_run_id = None
    tracked = parent_run_id is not None and bool(getattr(tracker, "enabled", False))
    if parent_run_id is not None:
        if computed and lazy:
            parent_run_id = parent_run_id()
        for r in computed:
            manifest = read_manifest(Path(r.path))
            if manifest is None:
                continue
            out = outputs.get(r.step) or StepOutputs()
            files, dirs = out.mlflow, out.mlflow_dirs
            with _self_contained_data_docs(Path(r.path), manifest, dirs) as dirs:
                run_id = tracker.log_step(parent_run_id, manifest, Path(r.path), files=files, dirs=dirs,
                                          history=_history(Path(r.path)),
                                          run_id=live.take(r.step, r.name) if live else None)
            if register and r.step in registrars and load(registrars[r.step].wants)(Path(r.path)):
                registered.append(_try_register(tracker, run_id, manifest, Path(r.path), registrars[r.step]))
        # a reused model that is not in this registry yet (trained with tracking off, or under another tracking
        # URI, or a run that died before registering): register it now, under the parent run
        for r in reused if register else ():
            if r.step not in registrars or not load(registrars[r.step].wants)(Path(r.path)):
                continue  # no manifest reads for the many reused shards
            manifest = read_manifest(Path(r.path))
            if manifest is not None:
                registered.append(_try_register(tracker, parent_run_id, manifest, Path(r.path), registrars[r.step],
                                                 if_missing=True))
    if lazy and isinstance(parent_run_id, ParentRun):
        parent_run_id = parent_run_id.run_id
    return {"steps_computed": len(computed), "steps_reused": len(reused),
            "reused_ids": [r.id for r in reused], "registered_models": registered,
            "not_registered": unregistered(results, stages, tracking=tracked, register=register)}


@contextmanager
def _self_contained_data_docs(artifact_dir: Path, manifest: dict[str, Any], dirs):
    """``dirs`` with a shard's Data Docs folder swapped for a temp folder holding the page with its assets
    inlined: the MLflow UI shows an .html artifact from a blob: URL in a sandboxed iframe, where the page's
    relative links to ``<store>/_static/data-docs/`` resolve to nothing (corpusforge.tasks.data_docs_assets)."""
    page = manifest.get("data_docs")
    if not page or not any(dest == "data_docs" for _, dest in dirs):
        yield dirs
        return
    import logging
    import tempfile

    from corpusforge.tasks.data_docs_assets import self_contained

    with tempfile.TemporaryDirectory(prefix="corpusforge-data-docs-") as tmp:
        try:
            html = self_contained(artifact_dir / page)
        except Exception as exc:  # noqa: BLE001 - the page as it is, relative links and all, rather than none
            logging.getLogger("corpusforge").warning("Data Docs of %s logged without inlined assets: %s",
                                                     artifact_dir.name, exc)
            yield dirs
            return
        (Path(tmp) / Path(page).name).write_text(html, encoding="utf-8")
        yield tuple((tmp, dest) if dest == "data_docs" else (rel, dest) for rel, dest in dirs)


def _try_register(tracker, run_id, manifest: dict[str, Any], lm_dir: Path, registers: Registers,
                  if_missing: bool = False) -> dict[str, str]:
    """Register (``if_missing``: unless a version of this artifact is already there), or say why not: the
    artifact is published either way, so a registry problem is a warning (in the log, the summary and the
    JSON result), not a failed run after hours of training."""
    try:
        with _registering(tracker, manifest["id"]):
            return _register(tracker, run_id, manifest, lm_dir, registers, if_missing)
    except Exception as exc:  # noqa: BLE001 - reported, not swallowed
        import logging

        logging.getLogger("corpusforge").warning("%s %s was not registered in MLflow: %s", registers.step,
                                                 manifest["name"], exc)
        return {"name": str(manifest["name"]), "error": f"{type(exc).__name__}: {exc}"}


@contextmanager
def _registering(tracker, artifact_id: str):
    """One registration of an artifact at a time on this store (a file lock under its .locks): two identical
    commands at once used to register the same artifact twice (issue 44, item 10); the second now finds the
    first's version."""
    root = getattr(tracker, "store_root", None)
    if root is None or not Path(root).is_dir():
        yield
        return
    from corpusforge.storage.locks import file_lock

    with file_lock(Path(root) / ".locks" / f"register-{str(artifact_id)[:16]}.lock"):
        yield


def _register(tracker, run_id, manifest: dict[str, Any], lm_dir: Path, registers: Registers,
              if_missing: bool) -> dict[str, str]:
    # idempotent by artifact id: a version of this artifact already in this registry is the registration
    finder = getattr(tracker, "find_model_version", None)
    found = finder(str(manifest["name"]), "corpusforge.artifact_id", manifest["id"]) if finder else None
    if found is not None:
        if_missing = True  # what it was registered with is read back from the ledger below
    info = dict(found or load(registers.register)(tracker, _parent_id(run_id), manifest, lm_dir))
    info["step"] = registers.step  # which stage's model it is (the summary says what it does)
    # remembered in the store, so a later run whose every step is published answers without MLflow
    location = info.pop("source", "")
    recorded = dict(info)
    for key in ("loader_module", "artifact_key", "signature"):  # for `artifacts verify`, not for the user
        info.pop(key, None)
    if if_missing and not recorded.get("loader_module"):  # found again: what it was registered with
        previous_entry = RegistryLedger(tracker.store_root)._read().get(tracker.tracking_uri, {})
        for key in ("loader_module", "artifact_key", "signature"):
            value = previous_entry.get(manifest["id"], {}).get(key)
            if value:
                recorded[key] = value
    ledger = RegistryLedger(tracker.store_root)
    previous = ledger._read().get(tracker.tracking_uri, {}).get(manifest["id"], {})
    if if_missing and previous.get("files") and previous.get("location") == location:
        recorded["files"] = previous["files"]  # found again: keep the digests taken when it was registered
    elif location.startswith("file://"):  # what `artifacts verify` checks the registered copy against
        from corpusforge.storage.tracking import registered_copy_digests

        recorded["files"] = registered_copy_digests(location)
    ledger.put(tracker.tracking_uri, manifest["id"], recorded, location)
    return info


def _history(artifact_dir: Path) -> list[dict[str, Any]]:
    """A training step's metric history (``metrics.json`` with a ``history`` list), if it has one."""
    import json

    path = artifact_dir / "metrics.json"
    if not path.is_file():
        return []
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except ValueError:
        return []
    history = data.get("history") if isinstance(data, dict) else None
    points = [h for h in history or [] if isinstance(h, dict) and "step" in h]
    # an evaluation record repeats the last train loss (for the final metrics); log each train loss once
    return [h if "lr" in h or "train_loss" not in h else {k: v for k, v in h.items() if k != "train_loss"}
            for h in points]
