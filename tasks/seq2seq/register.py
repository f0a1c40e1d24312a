"""The seq2seq stage's entry in the MLflow model registry: a trained encoder-decoder is registered as a pyfunc that
translates (corpusforge.tasks.seq2seq.pyfunc), under its name. Declared in the stage's ``Registers``
(tasks/seq2seq/__init__.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def translates(model_dir: Path) -> bool:
    """Registered when its family can translate (every pair family does today; asked, not assumed) and it was
    trained to translate or summarize: a denoising pre-training checkpoint is a start for those, not a model to
    serve (its artifact id is what ``seq2seq.init`` takes)."""
    from corpusforge.models.family import family

    spec = json.loads((Path(model_dir) / "config.json").read_text(encoding="utf-8"))
    serves = family(spec["family"]).can("translate") or family(spec["family"]).can("extract")
    return serves and (spec.get("translation") or {}).get("task", "translate") != "denoise"


def register_seq2seq(tracker, run_id: str, manifest: dict[str, Any], model_dir: Path) -> dict[str, str]:
    """Register a trained encoder-decoder as a translating pyfunc: ``data/seq2seq`` (config.json + weights) and
    ``data/tokenizer`` (the tokenizer artifact's files), nothing pickled. Each new artifact adds a version, which
    ``models:/NAME@latest`` resolves to."""
    from corpusforge.storage.tracking import pyfunc_requirements
    from corpusforge.tasks.encoded import model_tokenizer_dir
    from corpusforge.tasks.seq2seq.pyfunc import DEFAULT_PARAMS

    spec = json.loads((Path(model_dir) / "config.json").read_text(encoding="utf-8"))
    tokenizer_dir = model_tokenizer_dir(model_dir)  # a ValueError when it is missing: the model could not read text
    tags = {"corpusforge.artifact_id": manifest["id"], "corpusforge.step": "seq2seq",
            "corpusforge.family": str(spec.get("family")), "corpusforge.tokenizer_id": str(spec["tokenizer"].get("id")),
            "corpusforge.directions": ",".join(f"{d['source']}-{d['target']}"
                                               for d in (spec.get("translation") or {}).get("directions", []))}
    return tracker.register_pyfunc_model(
        run_id, str(manifest["name"]), {"seq2seq": Path(model_dir), "tokenizer": Path(tokenizer_dir)},
        loader_module="corpusforge.tasks.seq2seq.pyfunc", pip_requirements=pyfunc_requirements(), params=DEFAULT_PARAMS,
        tags=tags, kind="seq2seq", artifact_key="seq2seq")
