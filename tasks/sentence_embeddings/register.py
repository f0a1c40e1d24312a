"""The sentence_embeddings stage's entry in the MLflow model registry: a trained sentence encoder is registered as a
pyfunc that returns sentence vectors (corpusforge.tasks.sentence_embeddings.pyfunc), under its name."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def embeds(model_dir: Path) -> bool:
    from corpusforge.models.family import family

    return family(json.loads((Path(model_dir) / "config.json").read_text(encoding="utf-8"))["family"]).can("embed")


def register_encoder(tracker, run_id: str, manifest: dict[str, Any], model_dir: Path) -> dict[str, str]:
    """Register a trained sentence encoder as a pyfunc: ``data/sentence_embeddings`` (config.json + weights) and
    ``data/tokenizer``, nothing pickled; it returns one unit vector per text."""
    from corpusforge.storage.tracking import pyfunc_requirements
    from corpusforge.tasks.encoded import model_tokenizer_dir

    spec = json.loads((Path(model_dir) / "config.json").read_text(encoding="utf-8"))
    tokenizer_dir = model_tokenizer_dir(model_dir)  # a ValueError when it is missing: the model could not read text
    tags = {"corpusforge.artifact_id": manifest["id"], "corpusforge.step": "sentence_embeddings",
            "corpusforge.family": str(spec.get("family")), "corpusforge.tokenizer_id": str(spec["tokenizer"].get("id")),
            "corpusforge.dim": str(spec["model"]["n_embd"])}
    return tracker.register_pyfunc_model(
        run_id, str(manifest["name"]), {"sentence_embeddings": Path(model_dir), "tokenizer": Path(tokenizer_dir)},
        loader_module="corpusforge.tasks.sentence_embeddings.pyfunc", pip_requirements=pyfunc_requirements(),
        params=None, tags=tags, kind="sentence_embeddings", artifact_key="sentence_embeddings",
        outputs={"vector": "double[]"})
