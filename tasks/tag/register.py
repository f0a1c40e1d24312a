"""The tag stage's entry in the MLflow model registry: a trained tagger is registered as a pyfunc that returns
words, tags and entity spans (corpusforge.tasks.tag.pyfunc), under its name. Declared in the stage's ``Registers``
(tasks/tag/__init__.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def tags(model_dir: Path) -> bool:
    """Registered when its family can tag (asked, not assumed)."""
    from corpusforge.models.family import family

    return family(json.loads((Path(model_dir) / "config.json").read_text(encoding="utf-8"))["family"]).can("tag")


def register_tagger(tracker, run_id: str, manifest: dict[str, Any], model_dir: Path) -> dict[str, str]:
    """Register a trained tagger as a pyfunc: ``data/tag`` (config.json, vocab.json and the weights) and, for a
    sub-word tagger, ``data/tokenizer``; nothing pickled. Each new artifact adds a version (``models:/NAME@latest``)."""
    from corpusforge.storage.tracking import pyfunc_requirements

    spec = json.loads((Path(model_dir) / "config.json").read_text(encoding="utf-8"))
    vocab = json.loads((Path(model_dir) / "vocab.json").read_text(encoding="utf-8"))
    labels = {"corpusforge.artifact_id": manifest["id"], "corpusforge.step": "tag",
              "corpusforge.family": str(spec.get("family")), "corpusforge.tag_field": str(spec["tag"]["tags"]),
              "corpusforge.tags": ",".join(vocab["tags"])[:4000]}
    dirs = {"tag": Path(model_dir)}
    if spec.get("tokenizer"):  # a sub-word tagger reads words with its checkpoint's tokenizer: a copy goes along
        from corpusforge.tasks.encoded import model_tokenizer_dir

        dirs["tokenizer"] = model_tokenizer_dir(model_dir)
    return tracker.register_pyfunc_model(
        run_id, str(manifest["name"]), dirs,
        loader_module="corpusforge.tasks.tag.pyfunc", pip_requirements=pyfunc_requirements(), params=None,
        tags=labels, kind="tag", artifact_key="tag",
        outputs={"words": "string", "tags": "string", "spans": "string"})
