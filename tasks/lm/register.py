"""The lm stage's entry in the MLflow model registry: which lms are registered, and how: a family that generates as
a text-generating pyfunc (corpusforge.tasks.lm.pyfunc), a masked encoder (bert, encoder) as a mask-filling one
(corpusforge.tasks.lm.fill_mask). Declared in the stage's ``Registers`` (tasks/lm/__init__.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def _family(lm_dir: Path):
    import json

    from corpusforge.models.family import family

    return family(json.loads((Path(lm_dir) / "config.json").read_text(encoding="utf-8"))["family"])


def registrable(lm_dir: Path) -> bool:
    """Families that generate are registered as text generators, those that fill masks as mask fillers (asked of
    the family, not assumed); any other stays in the store and the run."""
    traits = _family(lm_dir)
    return traits.can("generate") or traits.can("fill_mask")


def register_lm(tracker, run_id: str, manifest: dict[str, Any], lm_dir: Path) -> dict[str, str]:
    """Register a trained lm in the MLflow model registry as a text-generating pyfunc (corpusforge.tasks.lm.pyfunc),
    or, for a masked encoder, a mask-filling one (corpusforge.tasks.lm.fill_mask: ``filled``, ``tokens``,
    ``probabilities``), that carries the corpusforge code it runs (``bundle_code``: it needs no corpusforge where it
    is served).

    The registered name is the lm's name; each new artifact adds a version, which ``@latest`` resolves to.
    """
    import json

    from corpusforge.models.family import family_package
    from corpusforge.storage.tracking import pyfunc_requirements
    from corpusforge.tasks.lm.pyfunc import DEFAULT_PARAMS
    from corpusforge.tasks.textgen import PROBE_PARAMS

    spec = json.loads((lm_dir / "config.json").read_text(encoding="utf-8"))
    from corpusforge.storage.store import resolve_recorded

    recorded = (spec.get("tokenizer") or {}).get("path")
    tokenizer_dir = resolve_recorded(recorded, lm_dir) if recorded else None
    if not tokenizer_dir or not Path(tokenizer_dir).is_dir():
        raise ValueError(f"{lm_dir}: its tokenizer ({tokenizer_dir}) is missing, so the model cannot be registered")
    tags = {"corpusforge.artifact_id": manifest["id"], "corpusforge.step": "lm",
            "corpusforge.family": str(spec.get("family")), "corpusforge.tokenizer_id": str(spec["tokenizer"].get("id"))}
    how: dict[str, Any] = {"loader_module": "corpusforge.tasks.lm.pyfunc", "params": DEFAULT_PARAMS,
                           "probes": PROBE_PARAMS}
    if not _family(lm_dir).can("generate"):  # a masked encoder
        from corpusforge.tasks.lm import fill_mask

        how = {"loader_module": "corpusforge.tasks.lm.fill_mask", "params": fill_mask.DEFAULT_PARAMS,
               "probes": (None,), "outputs": fill_mask.OUTPUTS}
        tags["corpusforge.task"] = "fill_mask"
    return tracker.register_pyfunc_model(
        run_id, str(manifest["name"]), {"lm": lm_dir, "tokenizer": Path(tokenizer_dir)},
        pip_requirements=pyfunc_requirements(), tags=tags, kind="lm", artifact_key="lm", bundle_code=True,
        bundle_whole=family_package, **how)
