"""Glue between finished steps and the tracking adapter: which files of which step go to MLflow.

Tracking runs in the flow's own thread after the step tasks return, so MLflow (and its sqlite file)
is never written from several worker threads or processes at once.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from storage.store import read_manifest
from tasks.step import StepResult

# step -> (files to log, (dir, artifact_path) pairs to log)
STEP_ARTIFACTS: dict[str, tuple[tuple[str, ...], tuple[tuple[str, str], ...]]] = {
    "corpus_shard": (("validation.json",), (("gx/uncommitted/data_docs/local_site", "data_docs"),)),
    "corpus": (("doc_lengths.png", "reasons.png", "report.md", "data_docs.html"), ()),
    "embeddings": (("embeddings.json", "training.json", "vectors.bin"), ()),
    "embeddings_eval": (("eval.json", "pca.png"), ()),
    "sparse_vectors": (("sparse.json",), ()),
    "tokenizer": (("tokenizer.json", "tokenizer_meta.json", "metrics.json", "trace.txt", "trace.json"), ()),
    "lm": (("config.json", "metrics.json", "loss_curve.png", "sample.txt", "model.safetensors"), ()),
    "ngram": (("stats.json", "zipf.png", "model.arpa.gz"), ()),
}


def track_results(tracker, parent_run_id: str | None, results: Sequence[StepResult]) -> dict[str, Any]:
    """Log a nested run per computed step; return counts for the parent run's summary."""
    computed = [r for r in results if not r.reused]
    reused = [r for r in results if r.reused]
    if parent_run_id is not None:
        for r in computed:
            manifest = read_manifest(Path(r.path))
            if manifest is None:
                continue
            files, dirs = STEP_ARTIFACTS.get(r.step, ((), ()))
            tracker.log_step(parent_run_id, manifest, Path(r.path), files=files, dirs=dirs,
                             history=_history(Path(r.path)))
    return {"steps_computed": len(computed), "steps_reused": len(reused),
            "reused_ids": [r.id for r in reused]}


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
    return [h for h in history or [] if isinstance(h, dict) and "step" in h]
