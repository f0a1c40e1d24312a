"""The classify stage's entry in the MLflow model registry: a trained classifier is registered as a pyfunc that
returns labels and probabilities (corpusforge.tasks.classify.pyfunc), under its name. Declared in the stage's
``Registers`` (tasks/classify/__init__.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def classifies(model_dir: Path) -> bool:
    """Registered when its family can classify (asked, not assumed)."""
    from corpusforge.models.family import family

    return family(json.loads((Path(model_dir) / "config.json").read_text(encoding="utf-8"))["family"]).can("classify")


def register_classifier(tracker, run_id: str, manifest: dict[str, Any], model_dir: Path) -> dict[str, str]:
    """Register a trained classifier as a pyfunc: ``data/classify`` (config.json + weights) and ``data/tokenizer``
    (the tokenizer artifact's files), nothing pickled. Each new artifact adds a version (``models:/NAME@latest``)."""
    from corpusforge.storage.tracking import pyfunc_requirements
    from corpusforge.tasks.encoded import model_tokenizer_dir

    spec = json.loads((Path(model_dir) / "config.json").read_text(encoding="utf-8"))
    tokenizer_dir = model_tokenizer_dir(model_dir)  # a ValueError when it is missing: the model could not read text
    tags = {"corpusforge.artifact_id": manifest["id"], "corpusforge.step": "classify",
            "corpusforge.family": str(spec.get("family")), "corpusforge.tokenizer_id": str(spec["tokenizer"].get("id")),
            "corpusforge.classes": ",".join(str(c) for c in spec["classify"]["classes"])}
    classes = spec["classify"]["classes"]
    label_type = "long" if all(isinstance(c, int) for c in classes) else "string"
    return tracker.register_pyfunc_model(
        run_id, str(manifest["name"]), {"classify": Path(model_dir), "tokenizer": Path(tokenizer_dir)},
        loader_module="corpusforge.tasks.classify.pyfunc", pip_requirements=pyfunc_requirements(), params=None,
        tags=tags, kind="classify", artifact_key="classify",
        outputs={"label": label_type, **{f"p_{c}": "double" for c in classes}})
