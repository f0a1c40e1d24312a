"""The post_training stage's entry in the MLflow model registry: a post-trained model that can generate is
registered as a text-generating pyfunc (corpusforge.tasks.textgen, the lm stage's too); an adapter artifact is merged
into plain weights first, so the registered model needs neither peft nor the base artifact."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any


def generates(model_dir: Path) -> bool:
    from corpusforge.models.family import family
    from corpusforge.tasks.post_training.inference import read_spec

    return family(read_spec(model_dir)["family"]).can("generate")


def register_post_trained(tracker, run_id: str, manifest: dict[str, Any], model_dir: Path) -> dict[str, str]:
    import json

    from corpusforge.models.family import family_package
    from corpusforge.models.zoo import save_model
    from corpusforge.storage.tracking import pyfunc_requirements
    from corpusforge.tasks.encoded import model_tokenizer_dir
    from corpusforge.tasks.textgen import DEFAULT_PARAMS, PROBE_PARAMS
    from corpusforge.tasks.post_training.inference import is_adapter, load_plain, read_spec

    tokenizer_dir = model_tokenizer_dir(model_dir)
    spec = read_spec(model_dir)
    tags = {"corpusforge.artifact_id": manifest["id"], "corpusforge.step": str(manifest.get("step")),
            "corpusforge.family": str(spec.get("family")),
            "corpusforge.method": str((spec.get("post_training") or {}).get("method")),
            "corpusforge.tokenizer_id": str((spec.get("tokenizer") or {}).get("id"))}
    scratch = Path(tempfile.mkdtemp(prefix="cf-merge-"))
    try:
        weights_dir = model_dir
        if is_adapter(model_dir):  # the registered model holds the merged weights
            model, _ = load_plain(model_dir)
            weights_dir = scratch / "lm"
            save_model(model, weights_dir)
            merged = json.loads((weights_dir / "config.json").read_text(encoding="utf-8"))
            merged.update({k: spec[k] for k in ("tokenizer", "post_training") if k in spec})
            (weights_dir / "config.json").write_text(json.dumps(merged, indent=2) + "\n", encoding="utf-8")
        return tracker.register_pyfunc_model(
            run_id, str(manifest["name"]), {"lm": Path(weights_dir), "tokenizer": Path(tokenizer_dir)},
            loader_module="corpusforge.tasks.textgen", pip_requirements=pyfunc_requirements(),
            params=DEFAULT_PARAMS, tags=tags, kind="lm", artifact_key="lm", bundle_code=True, probes=PROBE_PARAMS,
            bundle_whole=family_package)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
