"""The ``lm`` step: train a neural language model on the encoded token shards.

Input: the encode artifact (``train.bin``/``valid.bin``/``test.bin`` + ``meta.json``: dtype, vocab_size,
eot_id, tokenizer_path). Output: ``model.safetensors`` + ``config.json`` (family, model config, tokenizer),
``metrics.json`` (final metrics and the full metric history) and ``loss_curve.png``. A text sample is the
next step's artifact (``lm_sample``: ``sample.txt``), so ``lm.sample`` is not part of the lm's id.
The id follows from the token-shard id and this config. Training checkpoints go to
``<store>/.scratch/lm/<key>/`` (never into the artifact): a run killed half way resumes from its last
checkpoint when the same step is started again, and the scratch is removed once the artifact is published.

The training loop is :func:`corpusforge.models.training.train`; it reports through ``on_metrics``, which this module
collects into metrics.json and forwards to the caller (the Prefect task logs it).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from corpusforge.storage.store import ArtifactStore, resolve_recorded, store_relative
from corpusforge.tasks.config import identity
from corpusforge.tasks.corpus.reading import record_training_text
from corpusforge.tasks.encoded import special_ids
from corpusforge.tasks.lm.config import LMConfig, SampleConfig, lm_config_from_dict
from corpusforge.tasks.lm.inference import generate_text
from corpusforge.tasks.step import NotPublished, StepResult, artifact_input, run_step
from corpusforge.tasks.training import fit, save_trained, training_step, training_task

LM_VERSION = 4  # 4: lm.model and lm.train are typed dataclasses: every field (defaults included) is in the id
# 2: config.json records the tokenizer store-relative; metrics.json holds no timings
# 3: the registered MLflow model loads corpusforge.tasks.lm.pyfunc (the package was renamed from tasks.*); the
#    sample is its own step (lm_sample), so lm.sample is not part of the lm's id (editing it retrains nothing)
SAMPLE_STEP, SAMPLE_VERSION = "lm_sample", 1  # its top_k default is off, as generate's (was 200)
SPLITS = ("train", "valid", "test")

# --- the core ------------------------------------------------------------------------------------

def read_shards(encoded_dir: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """meta.json and a read-only memmap per split (absent or empty splits are None)."""
    import numpy as np

    encoded_dir = Path(encoded_dir)
    meta_path = encoded_dir / "meta.json"
    if not meta_path.is_file():
        raise ValueError(f"{encoded_dir}: no meta.json; the lm step needs the tokenizer stage's encoded shards")
    meta = json.loads(meta_path.read_text(encoding="utf-8"))
    if meta.get("format", "bin") != "bin":
        raise ValueError("tokenizer.format: the lm step reads flat .bin shards; set tokenizer.format: bin")
    splits = {}
    for split in SPLITS:
        path = encoded_dir / f"{split}.bin"
        splits[split] = np.memmap(path, dtype=meta["dtype"], mode="r") if path.is_file() and path.stat().st_size else None
    return meta, splits


def build_lm(upstream: StepResult, cfg: LMConfig, store: ArtifactStore,
             on_metrics: Callable[[int, dict[str, float]], None] | None = None,
             refs: Mapping[str, StepResult] | None = None) -> list[StepResult]:
    """Train (or reuse) the lm, then its sample (an ``lm_sample`` artifact, when one is asked for and the model
    can generate). Returns [sample, lm] or [lm]: the stage's main output, the lm, comes last. ``refs`` holds the
    parent lm of ``init`` when the pipeline resolved it (called without, an id is looked up in the store)."""
    result = training_step(  # identity(cfg) has no lm.sample: the sample is the next step's
        upstream, cfg, store, step="lm", version=LM_VERSION, section="lm", family=cfg.family, refs=refs,
        libraries=("torch", "safetensors", "numpy"),
        build=lambda out, src, scratch, found: _build(out, src, cfg, scratch, on_metrics,
                                                      Path(found["init"].path) if "init" in found else None))
    sample = build_lm_sample(result, cfg, store)
    return [sample, result] if sample is not None else [result]


def build_lm_sample(lm: StepResult, cfg: LMConfig, store: ArtifactStore) -> StepResult | None:
    """The sample of a trained lm (``sample.txt``, ``sample.json``), reused while lm.sample is unchanged. None
    when no sample is asked for (max_new_tokens 0) or the family cannot generate (an encoder)."""
    from corpusforge.models.family import family

    if cfg.sample.max_new_tokens == 0 or not family(cfg.family).can("generate"):
        return None
    try:
        return run_step(store, step=SAMPLE_STEP, version=SAMPLE_VERSION, name=cfg.name, config=identity(cfg.sample),
                        inputs=[artifact_input(lm)], build=lambda out: _build_sample(out, Path(lm.path), cfg.sample),
                        libraries=("torch",))
    except NotPublished:
        raise  # the planner asking whether the sample is in the store (it is not: the run has work to do)
    except Exception as exc:  # noqa: BLE001 - a sample is a nicety (the prompt may not encode); the model is published
        import logging

        logging.getLogger(__name__).warning("lm: no sample for %s (%s: %s); the model itself is published",
                                            cfg.name, type(exc).__name__, exc)
        return None


def _build_sample(out: Path, lm_dir: Path, sc: SampleConfig) -> dict[str, Any]:
    from corpusforge.tasks.lm.inference import load_trained

    model, tok, spec = load_trained(lm_dir)
    text = generate_text(model, tok, sc.prompt, sc.max_new_tokens, temperature=sc.temperature, top_k=sc.top_k,
                         top_p=sc.top_p, seed=sc.seed, eot_id=(spec.get("tokenizer") or {}).get("eot_id"))
    (out / "sample.txt").write_text(sc.prompt + text, encoding="utf-8")
    (out / "sample.json").write_text(json.dumps({"prompt": sc.prompt, "text": text}, ensure_ascii=False, indent=2)
                                     + "\n", encoding="utf-8")
    return {"metrics": {"chars": float(len(text))}}


def _build(out: Path, encoded_dir: Path, cfg: LMConfig, scratch: Path, on_metrics,
           parent: Path | None = None) -> dict[str, Any]:
    import torch

    from corpusforge.models.objectives import build as build_objective
    from corpusforge.models.training import pick_device
    from corpusforge.models.zoo import build_model

    meta, splits = read_shards(encoded_dir)
    tokenizer_dir = resolve_recorded(meta["tokenizer_path"], encoded_dir) if meta.get("tokenizer_path") else None
    if splits["train"] is None:
        raise ValueError("the encoded train split is empty: nothing to train on")
    if splits["valid"] is None and splits["test"] is None:
        raise ValueError("the lm step needs a valid (or test) split: give lm train --valid FILE, or set "
                         "corpus.split.valid > 0")
    tcfg = cfg.train_config()
    vocab_size, warnings = int(meta["vocab_size"]), []
    top = max(int(a.max()) for a in splits.values() if a is not None)
    if top >= vocab_size:  # an inconsistent encode artifact: still give every id present its row
        warnings.append(f"encoded shards contain token id {top} >= meta.json vocab_size {vocab_size}; "
                        f"the model uses vocab_size {top + 1}")
        vocab_size = top + 1
    mcfg = cfg.model_config(vocab_size, special_ids(meta))
    torch.manual_seed(tcfg.seed)  # the weights' init
    model = build_model(cfg.family, mcfg)
    started_from = None
    if parent is not None:  # init: the parent's weights, a fresh optimizer; what did not fit is reported
        from safetensors.torch import load_file

        from corpusforge.models.zoo import load_weights

        report = load_weights(model, load_file(str(parent / "model.safetensors")))
        started_from = {k: v for k, v in report.items() if k != "loaded"} | {"loaded": len(report["loaded"])}
        for what in ("missing", "unexpected", "mismatched"):
            if report[what]:
                warnings.append(f"init {parent.name}: {what} {', '.join(report[what][:8])}"
                                + (f" (+{len(report[what]) - 8} more)" if len(report[what]) > 8 else ""))
    objective = build_objective(cfg.objective, mcfg, splits)
    result, record, metrics, seconds = fit(model, objective, tcfg, scratch, on_metrics)
    device = pick_device(tcfg.device)
    if cfg.evaluate_test and splits["test"] is not None and splits["valid"] is not None:
        test = objective.evaluate(model, "test", tcfg.batch_size, 0, next(model.parameters()).device)
        metrics.update({f"test_{k}": v for k, v in test.items()})
    metrics.update(params=float(sum(p.numel() for p in model.parameters())), train_seconds=seconds,
                   stopped_early=float(result.stopped_early))
    model = model.cpu().eval()
    extra = {"tokenizer": {"path": store_relative(tokenizer_dir, Path(out).resolve().parent.parent)
                           if tokenizer_dir else None, "id": meta.get("tokenizer_id"),
                           "vocab_size": meta["vocab_size"], "eot_id": meta.get("eot_id")}}
    record_training_text(extra, encoded_dir)  # prompts are read as the training text was
    save_trained(out, model, stage="lm", name=cfg.name, objective=cfg.objective, train_cfg=tcfg, device=device,
                 metrics=metrics, extra=extra)
    record.write(out, metrics, title=f"{cfg.family} {cfg.name}")
    return {"metrics": metrics, "device": str(device), "warnings": warnings,
            **({"init": started_from} if started_from is not None else {})}


# --- the Prefect task -----------------------------------------------------------------------------

lm_task = training_task("lm", lm_config_from_dict, build_lm, lambda cfg: cfg.train_config().max_iters)
