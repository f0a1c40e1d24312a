"""The LM training flow on its own, so it can run on a GPU worker while the rest stays on CPU.

``lm_flow(encoded, config, store)`` trains the ``lm`` step on an encode artifact (its StepResult dict, or
its id / unique id prefix in the store) and logs the step to MLflow like the pipeline does. Deploy it to
the ``gpu`` work pool (deploy/prefect.yaml, entrypoint ``flows/lm_flow.py:lm_flow``); the trainer picks
CUDA when the worker has it (``train.device: auto``). No heavy logic here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger

from corpusforge.stages import STAGES
from corpusforge.storage.catalog import Catalog
from corpusforge.storage.store import ArtifactStore, resolve_store_root
from corpusforge.storage.tracking import open_tracker
from corpusforge.tasks.lm.train import lm_config_from_dict, lm_task
from corpusforge.tasks.step import StepResult
from corpusforge.tasks.track import LiveRuns, track_results


def resolve_encoded(encoded: dict[str, Any] | str, store_root: Path) -> StepResult:
    if isinstance(encoded, dict):
        return StepResult.from_dict(encoded)
    found = Catalog(ArtifactStore(store_root)).get(encoded)
    m = found.manifest
    if m.get("step") != "encode":
        raise ValueError(f"{encoded}: is a {m.get('step')!r} artifact; the lm flow needs an encode artifact")
    return StepResult(id=m["id"], step="encode", name=m["name"], path=str(found.path), reused=True, seconds=0.0)


@flow(name="corpusforge-lm", log_prints=True)
def lm_flow(encoded: dict[str, Any] | str, config: dict[str, Any], store: str | None = None,
            experiment: str = "corpusforge-lm", track: bool = True, register: bool = True) -> dict[str, Any]:
    """Train (or reuse) the LM described by ``config`` (the pipeline's ``lm`` section) on ``encoded``.

    A newly trained model is registered in MLflow under its name (``register=False`` skips that)."""
    import torch

    store_root = resolve_store_root(store)
    cfg = lm_config_from_dict(config)  # fail before any work
    upstream = resolve_encoded(encoded, store_root)
    logger = get_run_logger()
    logger.info("training %s on %s (CUDA available: %s)", cfg.family, upstream.id[:12], torch.cuda.is_available())
    tracker = open_tracker(store_root, experiment, enabled=track)
    parent = tracker.start_pipeline_run(run_name=f"lm:{cfg.name}", config={"lm": config, "encoded": upstream.id},
                                        tags={"corpusforge.pipeline": experiment, "corpusforge.uri": store_root.as_uri()})
    live = LiveRuns(tracker, parent)  # the training curve shows in MLflow while it trains
    try:
        results = [StepResult.from_dict(r) for r in lm_task(upstream.to_dict(), config, str(store_root),
                                                            on_metrics=live.callback("lm", cfg.name))]
        result = results[-1]  # the lm (its lm_sample, when there is one, comes first)
        counts = track_results(tracker, parent, results, register=register, live=live, stages=STAGES)
    except BaseException:
        live.close(failed=True)
        if parent:
            tracker.finish_pipeline_run(parent, {"status": "failed"}, failed=True)
        raise
    live.close(failed=True)
    if parent:
        tracker.finish_pipeline_run(parent, {"lm": result.id, **counts})
    from corpusforge.storage.store import read_manifest

    manifest = read_manifest(Path(result.path)) or {}
    return {**result.to_dict(), "metrics": manifest.get("metrics", {}), "mlflow_run_id": parent,
            "registered_models": counts["registered_models"]}
