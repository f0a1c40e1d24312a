"""The classify stage's step: ``classify`` trains a classifier on the encoded labelled records and scores it.

Input: the encode artifact (``<split>.parquet`` with the ``<text>_ids`` column and the label column, + ``meta.json``);
with ``classify.init`` the checkpoint it starts from, with ``classify.embeddings`` the word vectors its embedding
starts from (both join the step's inputs, so its id and lineage show them). Output ``model.safetensors`` +
``config.json`` (family and model config, the tokenizer, the classes, where it started), ``metrics.json`` (the
training history and the scores), ``evaluation.json`` (per split: accuracy, macro F1, each class's precision, recall
and F1, the confusion matrix), ``loss_curve.png`` and ``confusion_matrix.png``. Checkpoints wait in the store's
scratch (tasks.training), so a killed run resumes.

A checkpoint with another tokenizer than the run's (a BERT pre-trained elsewhere) reads the texts as it was
trained to: the corpus's texts are encoded again with the checkpoint's tokenizer, and that tokenizer is the model's.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from corpusforge.models import contracts
from corpusforge.storage.store import ArtifactStore, read_manifest, resolve_recorded, store_relative
from corpusforge.tasks.classify.config import OWN_FIELDS, STEP, ClassifyStageConfig, classify_config_from_dict
from corpusforge.tasks.classify.scoring import class_index, scores
from corpusforge.tasks.confusion import plot_confusion
from corpusforge.tasks.config import ConfigError
from corpusforge.tasks.corpus.reading import record_training_text
from corpusforge.tasks.encoded import (
    checkpoint, checkpoint_tokenizer, read_encoded, reencode, role_ids, shape_from, special_ids,
)
from corpusforge.tasks.step import StepResult
from corpusforge.tasks.training import fit, save_trained, training_step, training_task

CLASSIFY_VERSION = 1


def build_classify(upstream: StepResult, cfg: ClassifyStageConfig, store: ArtifactStore,
                   on_metrics: Callable[[int, dict[str, float]], None] | None = None,
                   refs: Mapping[str, StepResult] | None = None) -> StepResult:
    """Train (or reuse) the classifier. ``refs``: the ``init`` checkpoint and ``embeddings`` vectors when the
    pipeline resolved them (called without, ids are looked up in the store)."""
    return training_step(upstream, cfg, store, step=STEP, version=CLASSIFY_VERSION, section="classify",
                         family=cfg.family, refs=refs, libraries=("torch", "safetensors", "polars"),
                         build=lambda out, src, scratch, found: _train(out, src, cfg, scratch, on_metrics,
                                                                       {k: Path(r.path) for k, r in found.items()}))


# --- where the weights start -----------------------------------------------------------------------------------


def _load_vectors(artifact_dir: Path):
    """The dense word vectors of an embeddings artifact (word2vec text format), as gensim's KeyedVectors."""
    from gensim.models import KeyedVectors

    rel = (read_manifest(artifact_dir) or {}).get("vectors_path")
    if not rel:
        raise ConfigError(f"classify.embeddings: {artifact_dir.name} holds no dense word vectors (TF-IDF?); give a "
                          "word2vec, fastText or GloVe artifact")
    return KeyedVectors.load_word2vec_format(str(Path(artifact_dir) / rel), binary=False)


def init_embeddings(model, tokenizer, vectors) -> dict[str, Any]:
    """Copy each token's word vector into the model's input embedding (tokens the vectors lack keep their random
    init); returns the coverage."""
    import torch

    get = contracts.hook(model, "get_input_embeddings")
    if get is None:
        raise ValueError(f"classify.embeddings: a {type(model).__name__} has no input embedding to copy vectors into "
                         "(corpusforge.models.contracts: get_input_embeddings)")
    emb = get()
    n = min(tokenizer.vocab_size, emb.weight.shape[0])
    found = 0
    with torch.no_grad():
        for i in range(n):
            token = tokenizer.id_to_token(i)
            word = token if token in vectors.key_to_index else token.lower()
            if word in vectors.key_to_index:
                emb.weight[i] = torch.tensor(vectors[word].copy(), dtype=emb.weight.dtype)
                found += 1
    return {"tokens": n, "found": found, "coverage": found / n if n else 0.0}


def _add_lora(model, cfg: ClassifyStageConfig, head: tuple[str, ...]) -> dict[str, Any]:
    """LoRA adapters on the body (``classify.lora``; unnamed targets: the family's) and the whole task head
    trained; returns the counts recorded with the model."""
    from corpusforge.models.family import family
    from corpusforge.models.lora import add_lora

    if not head:
        raise ConfigError(f"classify.finetune: lora trains adapters and the task head; the {cfg.family} family "
                          "declares no head (HEAD, corpusforge.models.contracts)")
    try:
        lora = cfg.lora.for_family(family(cfg.family))
        counts = add_lora(model, lora.targets, lora.r, lora.alpha, lora.dropout, lora.train_norms, train_also=head)
    except ValueError as exc:
        raise ConfigError(f"classify.lora: {exc}") from None
    return {**counts, "settings": lora.to_dict(), "head": list(head)}


# --- training ---------------------------------------------------------------------------------------------------


def _train(out: Path, encoded_dir: Path, cfg: ClassifyStageConfig, scratch: Path, on_metrics,
           refs: Mapping[str, Path]) -> dict[str, Any]:
    import torch
    from safetensors.torch import load_file

    from corpusforge.models.objectives import build as build_objective
    from corpusforge.models.tokenization import load_tokenizer
    from corpusforge.models.training import pick_device
    from corpusforge.models.zoo import build_model, load_weights

    meta, frames = read_encoded(encoded_dir, (cfg.text,), (cfg.label,), STEP)
    if frames["train"] is None:
        raise ValueError("the encoded train split has no records: nothing to train on")
    if frames["valid"] is None:
        raise ValueError("the classify step needs a validation split: give --valid FILE, or set corpus.split.valid > 0")
    warnings: list[str] = []
    tokenizer_dir = resolve_recorded(meta["tokenizer_path"], encoded_dir)
    tokenizer_id, vocab_size = meta.get("tokenizer_id"), int(meta["vocab_size"])
    special = special_ids(meta)
    parent = refs.get("init")
    parent_spec, parent_step, classes = None, None, None
    if parent is not None:
        parent_spec, parent_step, parent_id = checkpoint(parent)
        found = checkpoint_tokenizer(parent, parent_spec)
        if found is not None and found[1] != tokenizer_id:  # read the texts as the checkpoint was trained to
            tok = load_tokenizer(found[0])
            frames = reencode(encoded_dir, frames, (cfg.text,), tok)
            (tokenizer_dir, tokenizer_id), vocab_size, special = found, tok.vocab_size, role_ids(tok)
            warnings.append(f"init {parent.name}: texts encoded with the checkpoint's tokenizer "
                            f"{str(tokenizer_id)[:12]} (not the run's)")
        if parent_step == STEP:
            classes = list(parent_spec["classify"]["classes"])
    if cfg.labels:  # raw label -> class, on every split (and recorded for files scored later)
        frames = {split: None if frame is None else frame.with_columns(
            frame[cfg.label].cast(str).replace(cfg.labels).alias(cfg.label)) for split, frame in frames.items()}
    labels_train = frames["train"][cfg.label].to_list()
    if classes is None:
        classes = sorted(set(labels_train), key=lambda v: (isinstance(v, str), v))
    if len(classes) < 2:
        raise ValueError(f"the train split has one class only ({classes[0]!r}): a classifier needs two or more")
    mcfg = cfg.model_config(vocab_size, special)
    mcfg = dataclasses.replace(mcfg, n_classes=len(classes))
    if parent_spec is not None:
        mcfg, changed = shape_from(mcfg, parent_spec["model"], OWN_FIELDS)
        if changed:
            warnings.append(f"init {parent.name}: model {', '.join(changed)} taken from the checkpoint")
        if parent_step == STEP and parent_spec.get("family") != cfg.family:
            raise ConfigError(f"classify.init: {parent.name} is a {parent_spec.get('family')} classifier; continuing "
                              f"it needs classify.family: {parent_spec.get('family')}")
    vectors = None
    if "embeddings" in refs:
        vectors = _load_vectors(refs["embeddings"])
        if hasattr(mcfg, "n_embd") and mcfg.n_embd != vectors.vector_size:
            warnings.append(f"model.n_embd {mcfg.n_embd} -> {vectors.vector_size}, the size of the word vectors")
            try:
                mcfg = dataclasses.replace(mcfg, n_embd=vectors.vector_size)
            except ValueError as exc:
                raise ConfigError(f"classify.embeddings: vectors of size {vectors.vector_size} do not fit the model "
                                  f"({exc})") from None
    torch.manual_seed(cfg.train.seed)  # the weights' init
    model = build_model(cfg.family, mcfg)
    started_from: dict[str, Any] = {}
    if parent is not None:
        report = load_weights(model, load_file(str(parent / "model.safetensors")))
        started_from["init"] = {"id": parent_id, "step": parent_step,
                                "family": parent_spec.get("family"), "loaded": len(report["loaded"]),
                                **{k: v for k, v in report.items() if k != "loaded"}}
        for what in ("missing", "mismatched"):
            if report[what]:
                warnings.append(f"init {parent.name}: {what} {', '.join(report[what][:8])}"
                                + (f" (+{len(report[what]) - 8} more)" if len(report[what]) > 8 else ""))
    tokenizer = load_tokenizer(tokenizer_dir)
    if vectors is not None:
        started_from["embeddings"] = {"id": (read_manifest(refs["embeddings"]) or {}).get("id"),
                                      **init_embeddings(model, tokenizer, vectors)}
    head = tuple(contracts.hook(model, "HEAD", ()))
    if cfg.finetune == "head":
        for name, p in model.named_parameters():
            p.requires_grad = name.startswith(head)
    elif cfg.finetune == "lora":
        started_from["lora"] = _add_lora(model, cfg, head)
    prepare = contracts.prepare(model)
    splits = {}
    for split, frame in frames.items():
        if frame is None or (split == "test" and not cfg.evaluate_test):
            continue
        values = frame[cfg.label].to_list()
        if split == "test" and any(v is None for v in values):
            warnings.append("the test split has unlabelled records: it is not scored")
            continue
        splits[split] = ([prepare(ids) for ids in frame[cfg.text].to_list()], class_index(classes, values, split))
    objective = build_objective(cfg.objective, mcfg, splits)
    result, record, metrics, seconds = fit(model, objective, cfg.train, scratch, on_metrics)
    for p in model.parameters():
        p.requires_grad = True
    if cfg.finetune == "lora":  # the adapters folded in: a plain model of the family, as every classifier is saved
        from corpusforge.models.lora import merge_lora

        lora = started_from["lora"]
        metrics.update(trainable_params=float(lora["trainable"]), trainable_percent=lora["percent"])
        model = merge_lora(model)
    model = model.cpu().eval()
    evaluation = {split: evaluate_split(model, *splits[split], classes) for split in ("valid", "test") if split in splits}
    headline = "test" if "test" in evaluation else "valid"
    metrics.update(accuracy=evaluation[headline]["accuracy"], f1=evaluation[headline]["f1"])
    for split, scores in evaluation.items():
        prefix = "val" if split == "valid" else split
        metrics.update({f"{prefix}_accuracy": scores["accuracy"], f"{prefix}_f1": scores["f1"]})
    metrics.update(params=float(sum(p.numel() for p in model.parameters())), train_seconds=seconds,
                   records_train=float(frames["train"].height), classes=float(len(classes)),
                   stopped_early=float(result.stopped_early))
    root = Path(out).resolve().parent.parent
    extra = {"tokenizer": {"path": store_relative(tokenizer_dir, root), "id": tokenizer_id, "vocab_size": vocab_size},
             "classify": {**({"labels": cfg.labels} if cfg.labels else {}), "classes": classes, "text": cfg.text,
                          "label": cfg.label, "finetune": cfg.finetune, "scored_split": headline, **started_from},
             "data": {"encoded": store_relative(encoded_dir, root), "corpus_id": meta.get("corpus_id")}}
    record_training_text(extra, encoded_dir)  # how new text is read: as this text was
    spec_json = save_trained(out, model, stage="classify", name=cfg.name, objective=cfg.objective, train_cfg=cfg.train,
                             device=pick_device(cfg.train.device), metrics=metrics, extra=extra)
    (out / "evaluation.json").write_text(json.dumps({"classes": classes, "headline": headline, "splits": evaluation},
                                                    indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    plot_confusion(evaluation[headline]["confusion_matrix"], classes, out / "confusion_matrix.png",
                   f"{cfg.name}: {headline} split, accuracy {evaluation[headline]['accuracy']:.3f}")
    record.write(out, metrics, title=f"{cfg.family} {cfg.name}")
    return {"metrics": metrics, "device": spec_json["device"], "warnings": warnings,
            **({"started_from": started_from} if started_from else {})}


# --- scoring ----------------------------------------------------------------------------------------------------


def evaluate_split(model, sequences: list[list[int]], targets: list[int], classes: list[Any],
                   batch_size: int = 256) -> dict[str, Any]:
    """Predict every record of a split (batched by length) and score the predictions (:func:`scores`)."""
    from corpusforge.tasks.classify.inference import predict_ids

    probs = predict_ids(model, sequences, batch_size)
    return scores(targets, [int(p.argmax()) for p in probs], classes)


# --- the Prefect task -----------------------------------------------------------------------------------------------


classify_task = training_task("classify", classify_config_from_dict, build_classify)
