"""The qa stage's step: ``qa`` trains an extractive reader on the corpus's question-answering records and scores it.

Input: the corpus artifact (``<split>.parquet``: one record per paragraph, its questions in ``meta``; tasks/qa/data.py)
and the pre-trained checkpoint ``qa.init`` (a bert lm artifact: its body and its tokenizer). Output
``model.safetensors`` + ``config.json`` (family and model config, the window and decoding settings, the tokenizer),
``metrics.json`` (the training history and the scores), ``evaluation.json`` (per scored set: SQuAD exact match and
F1 on the gold paragraph beside the sliding-window baseline on the same questions; BM25 retrieval top-1/top-5/MRR
over that set's own paragraphs and the exact match and F1 when the reader reads the retrieved passages instead; an
answered example), ``predictions.json`` (question id -> answer, per scored set: what SQuAD's official
evaluate-v1.1.py reads) and ``loss_curve.png``.

Scoring. With ``qa.folds`` = k >= 2 (cross-validation over articles, for data with no training set of its own such as
XQuAD), the train split's articles are dealt into k folds (sorted titles, round robin); k readers each train on the
other folds and answer the held-out one's questions, and those answers are scored together (``cross_validated``).
Within each fold, and for the published reader, a tenth of the training articles (at least one) is held out as the
trainer's validation split, which picks its best weights, so no held-out question ever steers training. Without
folds the reader is scored on the valid split (and test, when there is one); a valid split then also picks the
published reader's weights.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from corpusforge.storage.store import ArtifactStore, read_manifest, store_relative
from corpusforge.tasks.qa.config import STEP, QaStageConfig, model_config, qa_config_from_dict
from corpusforge.tasks.qa.data import Paragraph, Windower, read_split, training_windows
from corpusforge.tasks.step import StepResult
from corpusforge.tasks.qa.inference import gold_inputs, question_ids, score
from corpusforge.tasks.training import fit, note, save_trained, training_step, training_task

QA_VERSION = 1
SPLITS = ("train", "valid", "test")


def build_qa(upstream: StepResult, cfg: QaStageConfig, store: ArtifactStore,
             on_metrics: Callable[[int, dict[str, float]], None] | None = None,
             refs: Mapping[str, StepResult] | None = None) -> StepResult:
    """Train (or reuse) the reader on the corpus artifact ``upstream``, starting from ``qa.init``."""
    return training_step(upstream, cfg, store, step=STEP, version=QA_VERSION, section="qa", family=cfg.family,
                         refs=refs, libraries=("torch", "safetensors", "polars", "bm25s"),
                         build=lambda out, src, scratch, found: _train(out, src, cfg, scratch, on_metrics,
                                                                       {k: Path(r.path) for k, r in found.items()}))


def articles(paragraphs: Sequence[Paragraph]) -> list[str]:
    """The articles (titles) in sorted order; a paragraph without a title is an article of its own."""
    return sorted({p.title or f"#{i}" for i, p in enumerate(paragraphs)})


def _title(p: Paragraph, i: int) -> str:
    return p.title or f"#{i}"


def folds_of(paragraphs: Sequence[Paragraph], k: int) -> list[list[int]]:
    """The paragraphs' indices dealt into ``k`` folds by article (sorted titles, round robin): an article's
    paragraphs stay together. Fewer articles than folds is a ValueError."""
    titles = articles(paragraphs)
    if len(titles) < k:
        raise ValueError(f"qa.folds: {k} folds over articles, but the train split has {len(titles)} article(s); "
                         f"lower qa.folds")
    fold_of = {t: i % k for i, t in enumerate(titles)}
    out: list[list[int]] = [[] for _ in range(k)]
    for i, p in enumerate(paragraphs):
        out[fold_of[_title(p, i)]].append(i)
    return out


def hold_out(paragraphs: Sequence[Paragraph]) -> tuple[list[Paragraph], list[Paragraph]]:
    """(training, validation) paragraphs: every tenth article (at least one, none when there is only one) is the
    trainer's validation split, which picks its best weights."""
    titles = articles(paragraphs)
    if len(titles) < 2:
        return list(paragraphs), list(paragraphs)
    held = set(titles[::10]) if len(titles) >= 10 else {titles[0]}
    train = [p for i, p in enumerate(paragraphs) if _title(p, i) not in held]
    valid = [p for i, p in enumerate(paragraphs) if _title(p, i) in held]
    return train, valid


def _train(out: Path, corpus_dir: Path, cfg: QaStageConfig, scratch: Path, on_metrics,
           refs: Mapping[str, Path]) -> dict[str, Any]:
    from corpusforge.models.training import pick_device

    data = {split: read_split(corpus_dir, split) for split in SPLITS}
    train = data["train"] or []
    if not sum(len(p.questions) for p in train):
        raise ValueError("the corpus's train split has no question: nothing to train on")
    scored = [s for s in ("valid", "test") if data[s] and (s == "valid" or cfg.evaluate_test)]
    if cfg.folds < 2 and "valid" not in scored:
        raise ValueError("the qa step scores its reader on held-out questions: give qa train --valid FILE, set "
                         "corpus.split.valid > 0, or cross-validate over articles (--set folds=5)")
    warnings: list[str] = []
    start = _start(cfg, refs.get("init"), warnings)
    mcfg = start["model"]
    windower = Windower(start["tokenizer"], mcfg.block_size, mcfg.cls_id, mcfg.sep_id, cfg.max_query_len, cfg.stride)
    spec = {"max_query_len": cfg.max_query_len, "stride": cfg.stride, "max_answer_len": cfg.max_answer_len,
            "n_best": cfg.n_best}

    def reader_for(model):
        from corpusforge.tasks.qa.inference import Reader

        return Reader(model, start["tokenizer"], {"qa": spec})

    evaluation: dict[str, Any] = {}
    predictions: dict[str, dict[str, str]] = {}
    if cfg.folds >= 2:
        from corpusforge.models.retrieval import Retriever
        from corpusforge.tasks.qa.data import PassageSearch

        search = PassageSearch([p.context for p in train], lambda units: Retriever(units, mode="bm25"))
        pooled: dict[str, str] = {}
        pooled_retrieved: dict[str, str] = {}
        for k, held in enumerate(folds_of(train, cfg.folds)):
            note(on_metrics, f"cross-validation: fold {k + 1} of {cfg.folds} ({len(held)} paragraphs held out)")
            inside = [p for i, p in enumerate(train) if i not in set(held)]
            model, _, _, _, _ = _fit(cfg, start, windower, *hold_out(inside), scratch / f"fold{k}", None, warnings)
            reader = reader_for(model)
            ids = question_ids([train[i] for i in held])
            questions, passages = gold_inputs([train[i] for i in held])
            pooled.update(zip(ids, (a["answer"] for a in reader.answer_batch(questions, passages))))
            found = search.search(questions, cfg.top)  # from every paragraph of the split, as `qa evaluate` does
            read = reader.answer_batch(questions, [[text for _, _, text in f["read"]] for f in found])
            pooled_retrieved.update(zip(ids, (a["answer"] for a in read)))
        evaluation["cross_validated"] = score(None, train, cfg.top, pooled, pooled_retrieved, search)
        predictions["cross_validated"] = evaluation["cross_validated"].pop("predictions")
    fit_train, fit_valid = (train, data["valid"]) if data["valid"] else hold_out(train)
    model, objective, result, record, metrics_seconds = _fit(cfg, start, windower, fit_train, fit_valid,
                                                             scratch / "final", on_metrics, warnings)
    metrics, seconds = metrics_seconds
    model = model.cpu().eval()
    reader = reader_for(model)
    for split in scored:
        evaluation[split] = score(reader, data[split], cfg.top)
        predictions[split] = evaluation[split].pop("predictions")
    if windower.cut_questions:
        warnings.append(f"{windower.cut_questions} question reading(s) were longer than qa.max_query_len "
                        f"({cfg.max_query_len} tokens) and were cut")
    headline = "cross_validated" if "cross_validated" in evaluation else ("test" if "test" in evaluation else "valid")
    head = evaluation[headline]
    metrics.update({k: head[k] for k in ("exact_match", "f1", "baseline_exact_match", "baseline_f1",
                                         "retrieval_top1", "retrieval_top5", "retrieval_mrr", "exact_match_retrieved",
                                         "f1_retrieved") if k in head})
    for split, s in evaluation.items():
        if split != headline:
            metrics[f"{split}_f1"] = s["f1"]
            metrics[f"{split}_exact_match"] = s["exact_match"]
    metrics.update(params=float(sum(p.numel() for p in model.parameters())), train_seconds=seconds,
                   questions_train=float(sum(len(p.questions) for p in fit_train)),
                   paragraphs_train=float(len(fit_train)), stopped_early=float(result.stopped_early))
    root = Path(out).resolve().parent.parent
    extra = {"qa": {**spec, "folds": cfg.folds, "scored": headline, "retrieval": cfg.retrieval, "top": cfg.top,
                    "init": start["report"], "windows": start.get("windows", {})},
             "tokenizer": {"path": store_relative(start["tokenizer_dir"], root), "id": start["tokenizer_id"],
                           "vocab_size": mcfg.vocab_size},
             "data": {"corpus": store_relative(corpus_dir, root),
                      "corpus_id": (read_manifest(corpus_dir) or {}).get("id")}}
    spec_json = save_trained(out, model, stage="qa", name=cfg.name, objective=cfg.objective, train_cfg=cfg.train,
                             device=pick_device(cfg.train.device), metrics=metrics, extra=extra)
    example = _example(reader, data[scored[0]] if scored else train)
    (out / "evaluation.json").write_text(json.dumps({"headline": headline, "scores": evaluation, "example": example},
                                                    indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    (out / "predictions.json").write_text(json.dumps(predictions, indent=1, ensure_ascii=False, sort_keys=True) + "\n",
                                          encoding="utf-8")
    record.write(out, metrics, title=f"{cfg.family} {cfg.name}")
    return {"metrics": metrics, "device": spec_json["device"], "warnings": warnings}


def _fit(cfg: QaStageConfig, start: dict[str, Any], windower: Windower, train: Sequence[Paragraph],
         valid: Sequence[Paragraph], scratch: Path, on_metrics, warnings: list[str]):
    """A reader started from the checkpoint and trained on ``train``'s questions (``valid`` picks its weights)."""
    import torch

    from corpusforge.models.objectives import build as build_objective
    from corpusforge.models.zoo import build_model
    from corpusforge.tasks.encoded import load_start

    splits, counts = {}, {}
    for split, paragraphs in (("train", train), ("valid", valid)):
        splits[split], counts[split] = training_windows(windower, paragraphs)
    if counts["train"]["untokenized_answers"]:
        warnings.append(f"{counts['train']['untokenized_answers']} training answer(s) cover no token of the "
                        "checkpoint's tokenizer (whitespace only?) and were left out")
    start.setdefault("windows", counts)
    scratch.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(cfg.train.seed)  # the new head's init
    model = build_model(cfg.family, start["model"])
    load_start(model, start["parent"], start["report"], warnings)
    objective = build_objective(cfg.objective, start["model"], splits)
    result, record, metrics, seconds = fit(model, objective, cfg.train, scratch, on_metrics)
    return model, objective, result, record, (metrics, seconds)


def _example(reader, paragraphs: Sequence[Paragraph] | None) -> dict[str, Any] | None:
    """The first question of the scored set, answered: what the run's summary and report show."""
    for p in paragraphs or []:
        for q in p.questions:
            found = reader.answer(q.question, [p.context])
            return {"question": q.question, "answer": found["answer"], "score": found["score"],
                    "gold": q.texts[0] if q.texts else "", "title": p.title}
    return None


def _start(cfg: QaStageConfig, parent: Path | None, warnings: list[str]) -> dict[str, Any]:
    """Where the reader starts (qa.init): the checkpoint, its tokenizer, the model config with the checkpoint's shape
    and the tokenizer's special ids."""
    from corpusforge.models.family import family
    from corpusforge.models.tokenization import load_tokenizer
    from corpusforge.tasks.config import ConfigError, derived_model_config
    from corpusforge.tasks.encoded import checkpoint, checkpoint_tokenizer, role_ids, shape_from
    from corpusforge.tasks.qa.config import OWN_FIELDS

    if parent is None:
        raise ConfigError(f"qa.init: {cfg.init!r} was not resolved to an artifact")
    spec, step, parent_id = checkpoint(parent)
    allowed = family(cfg.family).starts_from
    if allowed and spec.get("family") not in allowed:
        raise ConfigError(f"qa.init: {parent.name} is a {spec.get('family')} checkpoint; family {cfg.family} starts "
                          f"from {', '.join(sorted(allowed))}")
    found = checkpoint_tokenizer(parent, spec)
    if found is None:
        raise ConfigError(f"qa.init: {parent.name} records no tokenizer: its sub-words cannot be read")
    tok = load_tokenizer(found[0])
    mcfg = derived_model_config(cfg.family, cfg.model, tok.vocab_size, role_ids(tok))
    mcfg = model_config(cfg, **{f: getattr(mcfg, f) for f in ("vocab_size", "cls_id", "sep_id", "pad_id")})
    mcfg, changed = shape_from(mcfg, spec["model"], OWN_FIELDS)
    if changed:
        warnings.append(f"init {parent.name}: model {', '.join(changed)} taken from the checkpoint")
    room = mcfg.block_size - cfg.max_query_len - 3  # [CLS] question [SEP] passage [SEP]
    if room < 8:
        raise ConfigError(f"qa.max_query_len: {cfg.max_query_len} question tokens leave {max(room, 0)} of the "
                          f"checkpoint's {mcfg.block_size}-token block for a passage (at least 8 are needed); lower "
                          "max_query_len or start from a checkpoint with a longer block")
    if cfg.stride and cfg.stride > room:
        raise ConfigError(f"qa.stride: {cfg.stride} tokens between windows is more than the {room} passage tokens a "
                          f"window of {parent.name}'s {mcfg.block_size}-token block holds beside a "
                          f"{cfg.max_query_len}-token question, so a long passage's tokens between two windows would "
                          f"never be read; set stride <= {room}")
    return {"tokenizer": tok, "model": mcfg, "parent": parent, "tokenizer_dir": found[0], "tokenizer_id": found[1],
            "report": {"id": parent_id, "step": step, "family": spec.get("family")}}


# --- the Prefect task -----------------------------------------------------------------------------------------------


qa_task = training_task("qa", qa_config_from_dict, build_qa)
