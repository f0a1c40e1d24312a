"""The sentence_embeddings stage's step: ``sentence_embeddings`` trains a sentence encoder on the encoded pairs and
scores it by retrieval.

Input: the encode artifact (two ``<field>_ids`` columns), and with ``init`` the checkpoint it starts from (it joins the
step's inputs). Output ``model.safetensors`` + ``config.json`` (family and model config, the tokenizer, the fields,
where it started), ``metrics.json``, ``evaluation.json`` (per scored split: top-1, top-5 and mean reciprocal rank of
finding each first sentence's partner among all the split's second sentences, by cosine similarity, both ways) and
``loss_curve.png``. A checkpoint with another tokenizer than the run's reads the texts with its own."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from corpusforge.models import contracts
from corpusforge.storage.store import ArtifactStore, resolve_recorded, store_relative
from corpusforge.tasks.corpus.reading import record_training_text
from corpusforge.tasks.encoded import (
    checkpoint, checkpoint_tokenizer, read_encoded, reencode, role_ids, shape_from, special_ids,
)
from corpusforge.tasks.sentence_embeddings.config import (
    OWN_FIELDS,
    STEP,
    SentenceEmbeddingsConfig,
    sentence_embeddings_config_from_dict,
)
from corpusforge.tasks.step import StepResult
from corpusforge.tasks.training import fit, save_trained, training_step, training_task

VERSION = 1


def build_sentence_embeddings(upstream: StepResult, cfg: SentenceEmbeddingsConfig, store: ArtifactStore,
                              on_metrics: Callable[[int, dict[str, float]], None] | None = None,
                              refs: Mapping[str, StepResult] | None = None) -> StepResult:
    """Train (or reuse) the sentence encoder (``refs``: the ``init`` checkpoint when the pipeline resolved it)."""
    return training_step(upstream, cfg, store, step=STEP, version=VERSION, section=STEP, family=cfg.family,
                         refs=refs, libraries=("torch", "safetensors", "polars"),
                         build=lambda out, src, scratch, found: _train(out, src, cfg, scratch, on_metrics,
                                                                       {k: Path(r.path) for k, r in found.items()}))


def _train(out: Path, encoded_dir: Path, cfg: SentenceEmbeddingsConfig, scratch: Path, on_metrics,
           refs: Mapping[str, Path]) -> dict[str, Any]:
    import torch
    from safetensors.torch import load_file

    from corpusforge.models.objectives import build as build_objective
    from corpusforge.models.tokenization import load_tokenizer
    from corpusforge.models.training import pick_device
    from corpusforge.models.zoo import build_model, load_weights

    first, second = cfg.fields
    meta, frames = read_encoded(encoded_dir, cfg.fields, (), STEP)
    if frames["train"] is None:
        raise ValueError("the encoded train split has no pairs: nothing to train on")
    if frames["valid"] is None:
        raise ValueError("the sentence_embeddings step needs a validation split: set corpus.split.valid > 0 (or pin "
                         "a file to it with corpus.split.by_source)")
    warnings: list[str] = []
    tokenizer_dir = resolve_recorded(meta["tokenizer_path"], encoded_dir)
    tokenizer_id, vocab_size = meta.get("tokenizer_id"), int(meta["vocab_size"])
    special = special_ids(meta)
    parent = refs.get("init")
    parent_spec = parent_step = parent_id = None
    if parent is not None:
        parent_spec, parent_step, parent_id = checkpoint(parent)
        found = checkpoint_tokenizer(parent, parent_spec)
        if found is not None and found[1] != tokenizer_id:
            tok = load_tokenizer(found[0])
            frames = reencode(encoded_dir, frames, cfg.fields, tok)
            (tokenizer_dir, tokenizer_id), vocab_size, special = found, tok.vocab_size, role_ids(tok)
            warnings.append(f"init {parent.name}: texts encoded with the checkpoint's tokenizer "
                            f"{str(tokenizer_id)[:12]} (not the run's)")
    mcfg = cfg.model_config(vocab_size, special)
    if parent_spec is not None:
        mcfg, changed = shape_from(mcfg, parent_spec["model"], OWN_FIELDS)
        if changed:
            warnings.append(f"init {parent.name}: model {', '.join(changed)} taken from the checkpoint")
    torch.manual_seed(cfg.train.seed)
    model = build_model(cfg.family, mcfg)
    started_from: dict[str, Any] = {}
    if parent is not None:
        report = load_weights(model, load_file(str(parent / "model.safetensors")))
        started_from = {"id": parent_id, "step": parent_step, "family": parent_spec.get("family"),
                        "loaded": len(report["loaded"]), **{k: v for k, v in report.items() if k != "loaded"}}
        if report["mismatched"]:
            warnings.append(f"init {parent.name}: mismatched {', '.join(report['mismatched'][:8])}")
    prepare = contracts.prepare(model)
    splits = {}
    for split, frame in frames.items():
        if frame is None or (split == "test" and not cfg.evaluate_test):
            continue
        splits[split] = ([prepare(x) for x in frame[first].to_list()], [prepare(x) for x in frame[second].to_list()])
    objective = build_objective(cfg.objective, mcfg, splits)
    result, record, metrics, seconds = fit(model, objective, cfg.train, scratch, on_metrics)
    model = model.cpu().eval()
    evaluation: dict[str, Any] = {}
    for split in ("valid", "test"):
        if split in splits:
            forward = objective.evaluate(model, split, cfg.train.batch_size)
            a, b = splits[split]
            backward = build_objective(cfg.objective, mcfg, {"train": (b, a)}).evaluate(model, "train",
                                                                                       cfg.train.batch_size)
            evaluation[split] = {"pairs": len(a), f"{first}->{second}": forward, f"{second}->{first}": backward}
    headline = "test" if "test" in evaluation else "valid"
    for split, scored in evaluation.items():
        prefix = "val" if split == "valid" else split
        for key in ("top1", "top5", "mrr"):
            metrics[f"{prefix}_{key}"] = scored[f"{first}->{second}"][key]
            metrics[f"{prefix}_{key}_reverse"] = scored[f"{second}->{first}"][key]
    metrics.update(top1=evaluation[headline][f"{first}->{second}"]["top1"],
                   mrr=evaluation[headline][f"{first}->{second}"]["mrr"], params=float(sum(
                       p.numel() for p in model.parameters())), train_seconds=seconds,
                   pairs_train=float(frames["train"].height), stopped_early=float(result.stopped_early))
    root = Path(out).resolve().parent.parent
    extra = {"tokenizer": {"path": store_relative(tokenizer_dir, root), "id": tokenizer_id, "vocab_size": vocab_size},
             "sentence_embeddings": {"fields": list(cfg.fields), "scored_split": headline,
                                     **({"init": started_from} if started_from else {})},
             "data": {"encoded": store_relative(encoded_dir, root), "corpus_id": meta.get("corpus_id")}}
    record_training_text(extra, encoded_dir)  # how new text is read: as this text was
    spec_json = save_trained(out, model, stage="sentence_embeddings", name=cfg.name, objective=cfg.objective,
                             train_cfg=cfg.train, device=pick_device(cfg.train.device), metrics=metrics, extra=extra)
    (out / "evaluation.json").write_text(json.dumps({"headline": headline, "splits": evaluation}, indent=2) + "\n",
                                         encoding="utf-8")
    record.write(out, metrics, title=f"{cfg.family} {cfg.name}")
    return {"metrics": metrics, "device": spec_json["device"], "warnings": warnings}


sentence_embeddings_task = training_task("sentence_embeddings", sentence_embeddings_config_from_dict,
                                         build_sentence_embeddings)
