"""The qa stage's entry in the MLflow model registry: a trained reader is registered as a pyfunc that answers
questions from passages (corpusforge.tasks.qa.pyfunc), under its name. Declared in the stage's ``Registers``
(tasks/qa/__init__.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def answers(model_dir: Path) -> bool:
    """Registered when its family can answer (asked, not assumed)."""
    from corpusforge.models.family import family

    return family(json.loads((Path(model_dir) / "config.json").read_text(encoding="utf-8"))["family"]).can("answer")


def register_reader(tracker, run_id: str, manifest: dict[str, Any], model_dir: Path) -> dict[str, str]:
    """Register a trained reader as a pyfunc: ``data/qa`` (config.json and the weights) and ``data/tokenizer``;
    nothing pickled. Each new artifact adds a version (``models:/NAME@latest``)."""
    from corpusforge.storage.tracking import pyfunc_requirements
    from corpusforge.tasks.encoded import model_tokenizer_dir

    spec = json.loads((Path(model_dir) / "config.json").read_text(encoding="utf-8"))
    labels = {"corpusforge.artifact_id": manifest["id"], "corpusforge.step": "qa",
              "corpusforge.family": str(spec.get("family"))}
    return tracker.register_pyfunc_model(
        run_id, str(manifest["name"]), {"qa": Path(model_dir), "tokenizer": model_tokenizer_dir(model_dir)},
        loader_module="corpusforge.tasks.qa.pyfunc", pip_requirements=pyfunc_requirements(), params=None,
        tags=labels, kind="qa", artifact_key="qa", inputs={"question": "string", "context": "string"},
        input_example=({"question": "Where is the Eiffel Tower?", "context": "The Eiffel Tower is in Paris."},),
        outputs={"answer": "string", "score": "double", "start": "long", "end": "long", "passage": "long"})
