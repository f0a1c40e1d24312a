"""A training stage's flow on its own, so it can run on a GPU worker while the rest stays on CPU.

``training_flow(section, upstream, config, store)`` trains the stage ``section`` (any stage that trains: its
declaration says ``live=True``, its task takes the trainer's ``on_metrics``) on ``upstream`` (its StepResult dict,
or the id / unique id prefix of an artifact of the step it reads) and logs the steps to MLflow like the pipeline
does, the curves live while it trains. ``lm_flow`` is the lm stage's. Deploy them to the ``gpu`` work pool
(deploy/prefect.yaml, entrypoint ``flows/training_flow.py:lm_flow``); the trainer picks CUDA when the worker has
it (``train.device: auto``). No heavy logic here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger

from corpusforge.stages import STAGES, stage_for
from corpusforge.storage.catalog import Catalog
from corpusforge.storage.locks import store_in_use
from corpusforge.storage.store import ArtifactStore, read_manifest, resolve_store_root
from corpusforge.storage.tracking import open_tracker
from corpusforge.tasks.stage import load
from corpusforge.tasks.step import StepResult
from corpusforge.tasks.track import LiveRuns, track_results


def training_stage(section: str):
    stage = stage_for(section)
    if stage is None or not stage.live or stage.task is None:
        trainers = ", ".join(s.section for s in STAGES if s.live)
        raise ValueError(f"{section!r} is not a training stage; these are: {trainers}")
    return stage


def resolve_upstream(upstream: dict[str, Any] | str, store_root: Path, steps: tuple[str, ...]) -> StepResult:
    """The artifact a training stage reads: a StepResult dict, or an id / prefix of an artifact of ``steps``."""
    if isinstance(upstream, dict):
        return StepResult.from_dict(upstream)
    found = Catalog(ArtifactStore(store_root)).get(upstream)
    m = found.manifest
    if m.get("step") not in steps:
        raise ValueError(f"{upstream}: is a {m.get('step')!r} artifact; this flow needs a {' or '.join(steps)} artifact")
    return StepResult(id=m["id"], step=m["step"], name=m["name"], path=str(found.path), reused=True, seconds=0.0)


@flow(name="corpusforge-train", log_prints=True)
def training_flow(section: str, upstream: dict[str, Any] | str, config: dict[str, Any], store: str | None = None,
                  experiment: str | None = None, track: bool = True, register: bool = True,
                  upstream_steps: tuple[str, ...] = ()) -> dict[str, Any]:
    """Train (or reuse) what the stage ``section``'s ``config`` describes on ``upstream``. A newly trained model is
    registered in MLflow when the stage registers models (``register=False`` skips that)."""
    import torch

    stage = training_stage(section)
    store_root = resolve_store_root(store)
    cfg = stage.from_dict(config)  # fail before any work
    experiment = experiment or f"corpusforge-{section}"
    steps = upstream_steps or (tuple(stage_for(stage.after).steps) if stage.after else ())
    source = resolve_upstream(upstream, store_root, steps)
    name = getattr(cfg, "name", section)
    get_run_logger().info("training %s %s on %s (CUDA available: %s)", section, name, source.id[:12],
                          torch.cuda.is_available())
    tracker = open_tracker(store_root, experiment, enabled=track)
    parent = tracker.start_pipeline_run(run_name=f"{section}:{name}", config={section: config, "upstream": source.id},
                                        tags={"corpusforge.pipeline": experiment, "corpusforge.uri": store_root.as_uri()})
    live = LiveRuns(tracker, parent)  # the training curve shows in MLflow while it trains
    try:
        with store_in_use(store_root):  # `artifacts gc` waits for it (storage/locks.py)
            returned = load(stage.task)(source.to_dict(), config, str(store_root),
                                        on_metrics=live.callback(section, name))
        results = [StepResult.from_dict(r) for r in (returned if isinstance(returned, list) else [returned])]
        result = results[-1]  # the stage's main output (an lm's sample, when there is one, comes first)
        counts = track_results(tracker, parent, results, register=register, live=live, stages=STAGES)
    except BaseException:
        live.close(failed=True)
        if parent:
            tracker.finish_pipeline_run(parent, {"status": "failed"}, failed=True)
        raise
    live.close(failed=True)
    if parent:
        tracker.finish_pipeline_run(parent, {section: result.id, **counts})
    manifest = read_manifest(Path(result.path)) or {}
    return {**result.to_dict(), "metrics": manifest.get("metrics", {}), "mlflow_run_id": parent,
            "registered_models": counts["registered_models"]}


@flow(name="corpusforge-lm", log_prints=True)
def lm_flow(encoded: dict[str, Any] | str, config: dict[str, Any], store: str | None = None,
            experiment: str = "corpusforge-lm", track: bool = True, register: bool = True) -> dict[str, Any]:
    """Train (or reuse) the LM described by ``config`` (the pipeline's ``lm`` section) on ``encoded`` (an encode
    artifact). A newly trained model is registered in MLflow under its name (``register=False`` skips that)."""
    return training_flow("lm", encoded, config, store, experiment, track, register, upstream_steps=("encode",))
