"""The tag stage's step: ``tag`` trains a tagger on the corpus's tagged records and scores it.

Input: the corpus artifact (``<split>.parquet`` with ``tokens`` and the tag field, corpus.reader.tags). The word,
character and tag vocabularies are made from the train split (tasks/tag/data.py). Output ``model.safetensors`` +
``config.json`` (family and model config, the tag field, how the words were cleaned), ``vocab.json``,
``metrics.json`` (the training history and the scores), ``evaluation.json`` (per split: token accuracy beside the
most-frequent-tag baseline; entity tags: seqeval's precision/recall/F1 overall and per type; other tags: the
confusion counts; the most frequent errors; a tagged example), ``loss_curve.png`` and ``confusion_matrix.png``
(part-of-speech tags). Checkpoints wait in the store's scratch (tasks.training), so a killed run resumes.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from corpusforge.storage.store import ArtifactStore, read_manifest, store_relative
from corpusforge.tasks.confusion import plot_confusion
from corpusforge.tasks.corpus.reading import record_training_text
from corpusforge.tasks.step import StepResult
from corpusforge.tasks.tag.config import STEP, TagStageConfig, model_config, tag_config_from_dict
from corpusforge.tasks.tag.data import Vocab, is_entity_tags, read_split
from corpusforge.tasks.training import fit, save_trained, training_step, training_task

TAG_VERSION = 1
SPLITS = ("train", "valid", "test")


def build_tag(upstream: StepResult, cfg: TagStageConfig, store: ArtifactStore,
              on_metrics: Callable[[int, dict[str, float]], None] | None = None,
              refs: Mapping[str, StepResult] | None = None) -> StepResult:
    """Train (or reuse) the tagger on the corpus artifact ``upstream``. ``refs``: the ``init`` checkpoint when the
    pipeline resolved it (called without, an id is looked up in the store)."""
    return training_step(upstream, cfg, store, step=STEP, version=TAG_VERSION, section="tag", family=cfg.family,
                         refs=refs, libraries=("torch", "safetensors", "polars", "seqeval"),
                         build=lambda out, src, scratch, found: _train(out, src, cfg, scratch, on_metrics,
                                                                       {k: Path(r.path) for k, r in found.items()}))


def _train(out: Path, corpus_dir: Path, cfg: TagStageConfig, scratch: Path, on_metrics,
           refs: Mapping[str, Path]) -> dict[str, Any]:
    import torch

    from corpusforge.models.objectives import build as build_objective
    from corpusforge.models.training import pick_device
    from corpusforge.models.zoo import build_model
    from corpusforge.tasks.encoded import load_start
    from corpusforge.tasks.tag.inference import predict_words, score

    data = {split: read_split(corpus_dir, split, cfg.tags) for split in SPLITS}
    train = data["train"]
    if train is None or not len(train):
        raise ValueError("the corpus's train split has no tagged sentence: nothing to train on")
    if data["valid"] is None or not len(data["valid"]):
        raise ValueError("the tag step needs a validation split: give tag train --valid FILE, or set "
                         "corpus.split.valid > 0")
    warnings: list[str] = []
    start = _start(cfg, refs.get("init"), train, warnings) if cfg.init else None
    vocab = start["vocab"] if start else Vocab.build(train.words, train.tags, cfg.min_count, cfg.lowercase)
    if len(vocab.tags) < 2:
        raise ValueError(f"the train split has one tag only ({vocab.tags[0]!r}): a tagger needs two or more")
    splits = {}
    for split, found in data.items():
        if found is None or not len(found) or (split == "test" and not cfg.evaluate_test):
            continue
        unknown = sorted({t for ts in found.tags for t in ts} - set(vocab.tags))
        known = [i for i, ts in enumerate(found.tags) if all(t in vocab.tag_id for t in ts)]
        if unknown:  # the model cannot predict them: scored as errors, said once; the loss is over the others
            warnings.append(f"the {split} split has tags the train split lacks ({', '.join(unknown[:5])}): every "
                            f"word with one counts as an error, and its validation loss leaves out the "
                            f"{len(found) - len(known)} sentence(s) that hold one")
        sentences = [vocab.encode(found.words[i]) for i in known]
        tag_ids = [vocab.tag_ids(found.tags[i], split) for i in known]
        if cfg.subword_labels == "all":  # every sub-word a unit of its own, with its word's tag
            tag_ids = [[t for pieces, t in zip(s, ts) for _ in (pieces or [None])] for s, ts in zip(sentences, tag_ids)]
            sentences = [[unit for pieces in s for unit in ([[p] for p in pieces] or [[]])] for s in sentences]
        splits[split] = (sentences, tag_ids)
    if start:
        mcfg = start["model"]
    else:
        mcfg = model_config(cfg, vocab_size=len(vocab.words), pad_id=0, n_chars=len(vocab.chars),
                            n_tags=len(vocab.tags))
    torch.manual_seed(cfg.train.seed)  # the weights' init
    model = build_model(cfg.family, mcfg)
    if start:
        load_start(model, start["parent"], start["report"], warnings)
    objective = build_objective(cfg.objective, mcfg, splits)
    result, record, metrics, seconds = fit(model, objective, cfg.train, scratch, on_metrics)
    model = model.cpu().eval()
    entities = is_entity_tags(vocab.tags)
    evaluation: dict[str, Any] = {}
    for split in ("valid", "test"):
        if split not in splits:
            continue
        found = data[split]
        pred = predict_words(model, vocab, found.words)
        evaluation[split] = score(found.words, found.tags, pred, vocab.tags, train=(train.words, train.tags),
                                  strict=cfg.strict)
    headline = "test" if "test" in evaluation else "valid"
    head = evaluation[headline]
    metrics.update(accuracy=head["accuracy"], baseline_accuracy=head["baseline_accuracy"])
    if entities:
        metrics.update(f1=head["f1"], precision=head["precision"], recall=head["recall"])
    for split, s in evaluation.items():
        prefix = "val" if split == "valid" else split
        metrics[f"{prefix}_accuracy"] = s["accuracy"]
        if entities:
            metrics[f"{prefix}_f1"] = s["f1"]
    metrics.update(params=float(sum(p.numel() for p in model.parameters())), train_seconds=seconds,
                   sentences_train=float(len(train)), words_train=float(sum(len(w) for w in train.words)),
                   tags=float(len(vocab.tags)), vocab_words=float(len(vocab.words)),
                   valid_word_coverage=vocab.coverage(data["valid"].words), stopped_early=float(result.stopped_early))
    root = Path(out).resolve().parent.parent
    extra = {"tag": {"tags": cfg.tags, "entities": entities, "strict": cfg.strict, "scored_split": headline,
                     "min_count": cfg.min_count, "lowercase": cfg.lowercase},
             "data": {"corpus": store_relative(corpus_dir, root), "corpus_id": (read_manifest(corpus_dir) or {}).get("id")}}
    if start:
        extra["tokenizer"] = {"path": store_relative(start["tokenizer_dir"], root), "id": start["tokenizer_id"],
                              "vocab_size": start["model"].vocab_size}
        extra["tag"]["init"] = start["report"]
    record_training_text(extra, corpus_dir)  # how new text is read: as this text was, word by word
    extra["tag"]["reader"] = _reader_of(corpus_dir, cfg.tags)  # how `tag evaluate` reads a file of this kind
    spec_json = save_trained(out, model, stage="tag", name=cfg.name, objective=cfg.objective, train_cfg=cfg.train,
                             device=pick_device(cfg.train.device), metrics=metrics, extra=extra)
    vocab.save(out / "vocab.json")
    example = _example(data["valid"], predict_words(model, vocab, data["valid"].words[:1]), entities)
    (out / "evaluation.json").write_text(json.dumps({"tags": vocab.tags, "headline": headline, "splits": evaluation,
                                                     "example": example}, indent=2, ensure_ascii=False) + "\n",
                                         encoding="utf-8")
    if not entities:
        matrix = head["confusion"]
        plot_confusion(matrix["counts"], matrix["tags"], out / "confusion_matrix.png",
                       f"{cfg.name}: {cfg.tags} on the {headline} split, accuracy {head['accuracy']:.3f}")
    record.write(out, metrics, title=f"{cfg.family} {cfg.name}")
    return {"metrics": metrics, "device": spec_json["device"], "warnings": warnings}


def _start(cfg: TagStageConfig, parent: Path | None, train, warnings: list[str]) -> dict[str, Any]:
    """Where a sub-word tagger starts (tag.init): the checkpoint, its tokenizer (each word split into its
    sub-words), the model config with the checkpoint's shape and the tokenizer's special ids, the tags (a tag
    artifact's own, which must hold every training tag; else the train split's)."""
    from corpusforge.models.family import family
    from corpusforge.models.tokenization import load_tokenizer
    from corpusforge.tasks.config import ConfigError, derived_model_config
    from corpusforge.tasks.encoded import checkpoint, checkpoint_tokenizer, role_ids, shape_from
    from corpusforge.tasks.tag.config import OWN_FIELDS
    from corpusforge.tasks.tag.data import SubwordVocab

    if parent is None:
        raise ConfigError(f"tag.init: {cfg.init!r} was not resolved to an artifact")
    spec, step, parent_id = checkpoint(parent)
    allowed = family(cfg.family).starts_from
    if allowed and spec.get("family") not in allowed:
        raise ConfigError(f"tag.init: {parent.name} is a {spec.get('family')} checkpoint; family {cfg.family} starts "
                          f"from {', '.join(sorted(allowed))}")
    found = checkpoint_tokenizer(parent, spec)
    if found is None:
        raise ConfigError(f"tag.init: {parent.name} records no tokenizer: its sub-words cannot be read")
    tok = load_tokenizer(found[0])
    tags = sorted({t for ts in train.tags for t in ts})
    if step == STEP:
        known = list(json.loads((parent / "vocab.json").read_text(encoding="utf-8"))["tags"])
        missing = sorted(set(tags) - set(known))
        if missing:
            raise ConfigError(f"tag.init: {parent.name} knows no tag {', '.join(missing[:5])}; train a new head from a "
                              "bert checkpoint instead")
        tags = known
    mcfg = derived_model_config(cfg.family, cfg.model, tok.vocab_size, role_ids(tok))
    mcfg = model_config(cfg, **{f: getattr(mcfg, f) for f in ("vocab_size", "cls_id", "sep_id", "pad_id")},
                        n_tags=len(tags))
    mcfg, changed = shape_from(mcfg, spec["model"], OWN_FIELDS + ("n_tags",))
    if changed:
        warnings.append(f"init {parent.name}: model {', '.join(changed)} taken from the checkpoint")
    return {"vocab": SubwordVocab(tok, tags), "model": mcfg, "parent": parent, "tokenizer_dir": found[0],
            "tokenizer_id": found[1], "report": {"id": parent_id, "step": step, "family": spec.get("family")}}


def _reader_of(corpus_dir: Path, field: str) -> dict[str, Any]:
    """The corpus reader's tag column for ``field`` and the column names (corpus.reader.tags/columns), from the
    corpus's lineage; {} when the lineage does not say."""
    from corpusforge.storage.catalog import Catalog

    corpus_dir = Path(corpus_dir).resolve()
    manifest = read_manifest(corpus_dir)
    shard = Catalog(ArtifactStore(corpus_dir.parent.parent)).nearest(manifest, "corpus_shard") if manifest else None
    reader = ((shard or {}).get("config") or {}).get("reader") or {}
    column = (reader.get("tags") or {}).get(field)
    return {"column": column, "columns": list(reader.get("columns") or [])} if column is not None else {}


def _example(split, predicted: list[list[str]], entities: bool) -> dict[str, Any]:
    """The first validation sentence, tagged: what the run's summary and report show."""
    from corpusforge.models.tag_eval import spans

    words, gold = split.words[0], split.tags[0]
    text, offsets = split.texts[0], split.offsets[0]
    if text is None or offsets is None:
        text = " ".join(words)
        offsets, at = [], 0
        for w in words:
            offsets.append([at, at + len(w)])
            at += len(w) + 1
    return {"text": text, "words": words, "tags": predicted[0], "gold": gold, "offsets": offsets,
            "spans": spans(words, predicted[0], offsets, text) if entities else []}


# --- the Prefect task -----------------------------------------------------------------------------------------------


tag_task = training_task("tag", tag_config_from_dict, build_tag)
