"""The seq2seq stage's two steps: ``seq2seq`` trains an encoder-decoder on the encoded pairs, ``seq2seq_eval``
translates the held-out splits with it and scores them.

``seq2seq``: input the encode artifact (``<split>.parquet`` with a ``<field>_ids`` column per field + ``meta.json``).
Output ``model.safetensors`` + ``config.json`` (family and model config, the tokenizer, the directions learned with
their task prefixes, the encoded and corpus artifacts it read), ``metrics.json`` (val/test loss and perplexity, the
history) and ``loss_curve.png``. Checkpoints wait in the store's scratch (tasks.training), so a killed run resumes.
Each direction's examples are (prefix ids + one field's ids, the other field's ids); ``both`` trains on the two
directions of every pair, T5-style.

``seq2seq_eval``: inputs the model and the encode artifact; its id follows from them and ``seq2seq.decode`` (so
editing the decoding retrains nothing). It translates the valid (and test) split of every learned direction,
detokenizes, and scores against the corpus's own text of the other field (not the tokenizer's round trip):
sacreBLEU BLEU and chrF with signatures, the tutorials' lowercased tokenized BLEU; ``translations/`` holds every
output, ``scores.json`` the figures, ``samples.json`` a few examples (the report's heatmap translates the first).
The task returns [evaluation, model]: the model, the stage's main output, last (as the lm after its sample).
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from corpusforge.storage.store import ArtifactStore, input_dir, read_manifest, resolve_recorded, store_relative
from corpusforge.tasks.config import ConfigError, identity
from corpusforge.tasks.corpus.reading import record_training_text
from corpusforge.tasks.encoded import special_ids
from corpusforge.tasks.seq2seq.config import EVAL_STEP, MODEL_STEP, Seq2SeqStageConfig, seq2seq_config_from_dict
from corpusforge.tasks.step import StepResult, artifact_input, run_step
from corpusforge.tasks.training import fit, save_trained, training_step, training_task

SEQ2SEQ_VERSION, EVAL_VERSION = 1, 1
SPLITS = ("train", "valid", "test")
SAMPLES = 5  # examples per direction kept in samples.json (the report translates the first again, with attention)

# --- reading the encoded pairs -------------------------------------------------------------------------------------


def read_pairs(encoded_dir: Path, fields: tuple[str, ...]) -> tuple[dict[str, Any], dict[str, Any]]:
    """meta.json and, per split, a polars frame with ``doc_id`` and each field's id column (None: no rows)."""
    import polars as pl

    meta_path = Path(encoded_dir) / "meta.json"
    if not meta_path.is_file():
        raise ValueError(f"{encoded_dir}: no meta.json; the seq2seq step needs the tokenizer stage's encoded pairs")
    meta = json.loads(meta_path.read_text(encoding="utf-8"))
    columns = meta.get("fields") or {}
    missing = [f for f in fields if f not in columns]
    if meta.get("format") != "parquet" or missing:
        raise ValueError(f"the encoded corpus has no {', '.join(missing) or 'field'} ids: the seq2seq step needs "
                         f"tokenizer.format: parquet and tokenizer.fields: [{', '.join(fields)}]")
    frames = {}
    for split in SPLITS:
        path = Path(encoded_dir) / f"{split}.parquet"
        frame = pl.read_parquet(path, columns=["doc_id", *(columns[f] for f in fields)]) if path.is_file() else None
        frames[split] = frame if frame is not None and frame.height else None
    return meta, frames


def corpus_dir(encoded_dir: Path) -> Path:
    """The corpus artifact the encode artifact was made from (its input, in the same store)."""
    return input_dir(encoded_dir, "corpus")


def directions(cfg: Seq2SeqStageConfig, tokenizer) -> list[dict[str, Any]]:
    """Each learned direction: its fields, task prefix and the prefix's ids (put before every source's ids)."""
    out = []
    for source, target in cfg.directions():
        prefix = cfg.prefix_for(source, target)
        out.append({"source": source, "target": target, "prefix": prefix,
                    "prefix_ids": tokenizer.encode(prefix) if prefix else []})
    if len(out) > 1 and out[0]["prefix_ids"] == out[1]["prefix_ids"]:
        raise ValueError(f"the tokenizer encodes both task prefixes ({out[0]['prefix']!r}, {out[1]['prefix']!r}) "
                         "to the same ids, so the model could not tell the directions apart; change seq2seq.prefix")
    return out


def lines(text: str | None) -> list[str]:
    """The non-empty lines of a text: a summarized document's sentences, or its reference summaries (a JSON list
    read with reader.join_lists: "\\n")."""
    return [line.strip() for line in (text or "").split("\n") if line.strip()]


def summary_examples(frames: Mapping[str, Any], columns: Mapping[str, str], encoded_dir: Path, cfg: Seq2SeqStageConfig,
                     tokenizer) -> tuple[dict[str, tuple], dict[str, int]]:
    """task summarize: {split: (sources, targets)} with one pair per (document, reference), each reference (a line of
    the target field, in the corpus the encoding read) encoded as the tokenizer stage encoded the corpus; and how
    many documents and references each split has."""
    import polars as pl

    corpus = corpus_dir(encoded_dir)
    splits, counts = {}, {}
    for split, frame in frames.items():
        if frame is None:
            continue
        text = pl.read_parquet(corpus / f"{split}.parquet", columns=["doc_id", cfg.target])
        if text["doc_id"].to_list() != frame["doc_id"].to_list():
            raise ValueError(f"{split}: the encoded records and the corpus they came from list other records")
        references = [lines(t) for t in text[cfg.target].to_list()]
        flat = [ref for refs in references for ref in refs]
        encoded = iter(tokenizer.encode_batch(flat) if flat else [])
        sources, targets = [], []
        for ids, refs in zip(frame[columns[cfg.source]].to_list(), references):
            for _ in refs:
                sources.append(list(ids))
                targets.append(list(next(encoded)))
        splits[split] = (sources, targets)
        counts[f"documents_{split}"], counts[f"references_{split}"] = len(references), len(flat)
    return splits, counts


def _top_id(sequences: Any) -> int:
    """The largest token id in a list of id lists (or of texts, each a list of sentences' id lists); -1: none."""
    top = -1
    for seq in sequences:
        for item in seq:
            top = max(top, max(item, default=-1) if isinstance(item, list) else item)
    return top


def extract_examples(frames: Mapping[str, Any], encoded_dir: Path, cfg: Seq2SeqStageConfig,
                     tokenizer) -> tuple[dict[str, tuple], dict[str, int]]:
    """task extract: {split: (documents, labels)}: a document its source field's lines (sentences) each encoded as
    the tokenizer stage encoded the corpus, labelled 1 on its oracle sentence (the best ROUGE-1 against the target
    field's references: corpusforge.models.summ_eval.best_sentence) and 0 elsewhere. Documents without a reference
    or a sentence are left out (counted)."""
    import polars as pl

    from corpusforge.models.summ_eval import best_sentence

    corpus = corpus_dir(encoded_dir)
    splits, counts = {}, {}
    for split, frame in frames.items():
        if frame is None:
            continue
        text = pl.read_parquet(corpus / f"{split}.parquet", columns=["doc_id", cfg.source, cfg.target])
        if text["doc_id"].to_list() != frame["doc_id"].to_list():
            raise ValueError(f"{split}: the encoded records and the corpus they came from list other records")
        docs, labels, skipped = [], [], 0
        for source, target in zip(text[cfg.source].to_list(), text[cfg.target].to_list()):
            sentences, refs = lines(source), lines(target)
            if not sentences or not refs:
                skipped += 1
                continue
            best = best_sentence(sentences, refs)
            docs.append([list(ids) for ids in tokenizer.encode_batch(sentences)])
            labels.append([int(s == best) for s in sentences])
        splits[split] = (docs, labels)
        counts[f"documents_{split}"], counts[f"unlabelled_{split}"] = len(docs), skipped
    return splits, counts


def text_examples(frames: Mapping[str, Any], encoded_dir: Path, cfg: Seq2SeqStageConfig,
                  tokenizer) -> tuple[dict[str, list], dict[str, int]]:
    """task denoise: {split: texts}, a text its source field's lines (sentences, for sentence permutation) each
    encoded as the tokenizer stage encoded the corpus; and each split's texts and tokens (what pre-training saw)."""
    import polars as pl

    corpus = corpus_dir(encoded_dir)
    splits, counts = {}, {}
    for split, frame in frames.items():
        if frame is None:
            continue
        text = pl.read_parquet(corpus / f"{split}.parquet", columns=["doc_id", cfg.source])
        if text["doc_id"].to_list() != frame["doc_id"].to_list():
            raise ValueError(f"{split}: the encoded records and the corpus they came from list other records")
        sentences = [lines(t) for t in text[cfg.source].to_list()]
        flat = [s for doc in sentences for s in doc]
        encoded = iter(tokenizer.encode_batch(flat) if flat else [])
        docs = [[list(next(encoded)) for _ in doc] for doc in sentences]
        splits[split] = [d for d in docs if any(d)]
        counts[f"documents_{split}"] = len(splits[split])
        counts[f"tokens_{split}"] = sum(len(s) for d in splits[split] for s in d)
    return splits, counts


def examples(frames: Mapping[str, Any], columns: Mapping[str, str], learned: list[dict[str, Any]]) -> dict[str, tuple]:
    """{split: (sources, targets)} as the objective takes them: every direction's pairs, prefix ids first."""
    splits = {}
    for split, frame in frames.items():
        if frame is None:
            continue
        sources, targets = [], []
        for d in learned:
            prefix = list(d["prefix_ids"])
            sources += [prefix + list(ids) for ids in frame[columns[d["source"]]].to_list()]
            targets += [list(ids) for ids in frame[columns[d["target"]]].to_list()]
        splits[split] = (sources, targets)
    return splits


# --- the model step ---------------------------------------------------------------------------------------------------


def build_seq2seq(upstream: StepResult, cfg: Seq2SeqStageConfig, store: ArtifactStore,
                  on_metrics: Callable[[int, dict[str, float]], None] | None = None,
                  refs: Mapping[str, StepResult] | None = None) -> list[StepResult]:
    """Train (or reuse) the model, then evaluate (or reuse the evaluation). Returns [evaluation, model]. ``refs``:
    the ``init`` checkpoint when the pipeline resolved it (called without, its id is looked up in the store)."""
    model = training_step(upstream, cfg, store, step=MODEL_STEP, version=SEQ2SEQ_VERSION, family=cfg.family,
                          config=identity(cfg, MODEL_STEP), section="seq2seq", refs=refs,
                          libraries=("torch", "safetensors", "polars"),
                          build=lambda out, src, scratch, found: _train(out, src, cfg, scratch, on_metrics,
                                                                        {k: Path(r.path) for k, r in found.items()}))
    evaluation = run_step(store, step=EVAL_STEP, version=EVAL_VERSION, name=cfg.name,
                          config=identity(cfg, EVAL_STEP), inputs=[artifact_input(model), artifact_input(upstream)],
                          build=lambda out: _evaluate(out, Path(model.path), Path(upstream.path), cfg),
                          libraries=("torch", "sacrebleu", "polars"))
    return [evaluation, model]


def _train(out: Path, encoded_dir: Path, cfg: Seq2SeqStageConfig, scratch: Path, on_metrics,
           refs: Mapping[str, Path] | None = None) -> dict[str, Any]:
    import torch
    from safetensors.torch import load_file

    from corpusforge.models.objectives import build as build_objective
    from corpusforge.models.tokenization import load_tokenizer
    from corpusforge.models.training import pick_device
    from corpusforge.models.zoo import build_model, load_weights
    from corpusforge.tasks.encoded import checkpoint, checkpoint_tokenizer, reencode, role_ids, shape_from

    fields = (cfg.source,) if cfg.task == "denoise" else (cfg.source, cfg.target)
    meta, frames = read_pairs(encoded_dir, fields)
    if frames["train"] is None:
        raise ValueError("the encoded train split has no pairs: nothing to train on")
    if frames["valid"] is None and frames["test"] is None:
        raise ValueError("the seq2seq step needs a validation (or test) split: give --valid SRC TGT, or set "
                         "corpus.split.valid > 0")
    tokenizer_dir = resolve_recorded(meta["tokenizer_path"], encoded_dir)
    tokenizer_id, vocab_size, special = meta.get("tokenizer_id"), int(meta["vocab_size"]), special_ids(meta)
    columns, warnings = dict(meta["fields"]), []
    parent = (refs or {}).get("init")
    parent_spec = None
    if parent is not None:  # start from a trained encoder-decoder: its tokenizer reads the pairs
        parent_spec, parent_step, parent_id = checkpoint(parent)
        found = checkpoint_tokenizer(parent, parent_spec)
        if found is not None and found[1] != tokenizer_id:
            parent_tok = load_tokenizer(found[0])
            frames = reencode(encoded_dir, {k: None if f is None else f.rename({columns[x]: x for x in fields})
                                            for k, f in frames.items()}, fields, parent_tok)
            columns = {x: x for x in fields}
            (tokenizer_dir, tokenizer_id), vocab_size, special = found, parent_tok.vocab_size, role_ids(parent_tok)
            warnings.append(f"init {parent.name}: texts encoded with the checkpoint's tokenizer "
                            f"{str(tokenizer_id)[:12]} (not the run's)")
    tokenizer = load_tokenizer(tokenizer_dir)
    learned = directions(cfg, tokenizer)
    counts: dict[str, int] = {}
    context: dict[str, Any] = {}
    if cfg.task == "denoise":
        splits, counts = text_examples(frames, encoded_dir, cfg, tokenizer)
        if special.get("mask") is None:
            raise ValueError("task: denoise needs the tokenizer's mask role (<mask>); the stage adds it to the run's "
                             "tokenizer, so this tokenizer came from elsewhere: give it roles: {mask: <mask>}")
        context["mask_id"] = special["mask"]
    elif cfg.task == "extract":
        splits, counts = extract_examples(frames, encoded_dir, cfg, tokenizer)
    elif cfg.task == "summarize":
        splits, counts = summary_examples(frames, columns, encoded_dir, cfg, tokenizer)
        if "train" not in splits or not splits["train"][0]:
            raise ValueError(f"the train split has no reference summaries in field {cfg.target!r}")
    else:
        splits = examples(frames, columns, learned)
    top = max(_top_id(part) for pair in splits.values() for part in pair)
    if top >= vocab_size:  # an inconsistent encode artifact: still give every id present its row
        warnings.append(f"encoded pairs contain token id {top} >= meta.json vocab_size {vocab_size}; "
                        f"the model uses vocab_size {top + 1}")
        vocab_size = top + 1
    mcfg = cfg.model_config(vocab_size, special)
    if parent_spec is not None:
        if parent_spec.get("family") != cfg.family:
            raise ConfigError(f"seq2seq.init: {parent.name} is a {parent_spec.get('family')} model; starting from it "
                              f"needs seq2seq.family: {parent_spec.get('family')}")
        mcfg, changed = shape_from(mcfg, parent_spec["model"])
        if changed:
            warnings.append(f"init {parent.name}: model {', '.join(changed)} taken from the checkpoint")
    torch.manual_seed(cfg.train.seed)  # the weights' init
    model = build_model(cfg.family, mcfg)
    started_from: dict[str, Any] = {}
    if parent is not None:
        report = load_weights(model, load_file(str(parent / "model.safetensors")))
        started_from["init"] = {"id": parent_id, "step": parent_step, "task": (parent_spec.get("translation") or {})
                                .get("task", "translate"), "loaded": len(report["loaded"]),
                                **{k: v for k, v in report.items() if k != "loaded"}}
        for what in ("missing", "mismatched"):
            if report[what]:
                warnings.append(f"init {parent.name}: {what} {', '.join(report[what][:8])}")
    cuts = {k: getattr(cfg, k) for k in ("max_source_len", "max_target_len")
            if getattr(cfg, k) is not None and cfg.task != "extract"}  # a sentence scorer's cuts are its model's
    objective = build_objective(cfg.objective, mcfg, splits, **cuts, **context)
    result, record, metrics, seconds = fit(model, objective, cfg.train, scratch, on_metrics)
    if cfg.task == "denoise":  # what pre-training read: the texts of every micro-batch it trained on
        metrics["tokens_seen"] = float(objective.tokens_served(int(metrics.get("steps", 0)) * cfg.train.grad_accum))
    if cfg.evaluate_test and "test" in splits and "valid" in splits:
        test = objective.evaluate(model, "test", cfg.train.batch_size, 0, next(model.parameters()).device)
        metrics.update({f"test_{k}": v for k, v in test.items()})
    metrics.update(params=float(sum(p.numel() for p in model.parameters())), train_seconds=seconds,
                   pairs_train=float(frames["train"].height), stopped_early=float(result.stopped_early),
                   **{k: float(v) for k, v in counts.items()})
    model = model.cpu().eval()
    root = Path(out).resolve().parent.parent
    extra = {"tokenizer": {"path": store_relative(tokenizer_dir, root), "id": tokenizer_id,
                           "vocab_size": tokenizer.vocab_size if parent is not None else meta["vocab_size"]},
             "translation": {"directions": learned, "source": cfg.source, "target": cfg.target,
                             "direction": cfg.direction,
                             # what reads new text differently from a translator's defaults (kept out otherwise, so
                             # a translation model's config.json is what it was)
                             **({"task": cfg.task} if cfg.task != "translate" else {}),
                             **({"max_source_len": cfg.max_source_len} if cfg.max_source_len else {}),
                             **({"mask_id": context["mask_id"]} if "mask_id" in context else {})},
             "data": {"encoded": store_relative(encoded_dir, root), "corpus_id": meta.get("corpus_id")}}
    if started_from:
        extra["started_from"] = started_from
    record_training_text(extra, encoded_dir)  # how new text is read: as this text was
    spec_json = save_trained(out, model, stage="seq2seq", name=cfg.name, objective=cfg.objective, train_cfg=cfg.train,
                             device=pick_device(cfg.train.device), metrics=metrics, extra=extra)
    record.write(out, metrics, title=f"{cfg.family} {cfg.name}")
    return {"metrics": metrics, "device": spec_json["device"], "warnings": warnings}


# --- the evaluation step ------------------------------------------------------------------------------------------------


def _evaluate(out: Path, model_dir: Path, encoded_dir: Path, cfg: Seq2SeqStageConfig) -> dict[str, Any]:
    import polars as pl

    from corpusforge.tasks.seq2seq.inference import load_translator, score

    translator = load_translator(model_dir)
    fields = (cfg.source,) if cfg.task == "denoise" else (cfg.source, cfg.target)
    meta, frames = read_pairs(encoded_dir, fields)
    corpus = corpus_dir(encoded_dir)
    model_metrics = (read_manifest(model_dir) or {}).get("metrics") or {}
    scored = [s for s in ("valid", "test") if frames[s] is not None and (s == "valid" or cfg.evaluate_test)]
    if cfg.task == "denoise":
        return _evaluate_denoising(out, model_dir, corpus, translator, frames, cfg, model_metrics)
    if cfg.task in ("summarize", "extract"):
        return _evaluate_summaries(out, model_dir, corpus, translator, meta, frames, scored, cfg, model_metrics)
    dec = cfg.decode
    (out / "translations").mkdir()
    scores: dict[str, Any] = {}
    samples: dict[str, list[dict[str, str]]] = {}
    started, sentences = time.perf_counter(), 0
    for split in scored:
        frame = frames[split]
        text = pl.read_parquet(corpus / f"{split}.parquet", columns=["doc_id", *fields])
        if text["doc_id"].to_list() != frame["doc_id"].to_list():
            raise ValueError(f"{split}: the encoded pairs and the corpus they came from list other records")
        for d in translator.directions:
            sources = [list(d.prefix_ids) + list(ids) for ids in frame[meta["fields"][d.source]].to_list()]
            hyps = [translator.tokenizer.decode(ids)
                    for ids in translator.translate_ids(sources, dec.beam, dec.length_penalty, dec.max_len,
                                                        dec.batch_size, min_len=dec.min_len,
                                                        no_repeat_ngram_size=dec.no_repeat_ngram_size)]
            refs = text[d.target].to_list()
            sentences += len(hyps)
            (out / "translations" / f"{split}.{d.key}.txt").write_text(
                "".join(h.replace("\n", " ") + "\n" for h in hyps), encoding="utf-8")
            scores.setdefault(split, {})[d.key] = score(hyps, refs)
            if split == scored[0]:
                samples[d.key] = [{"source": s, "reference": r, "translation": h}
                                          for s, r, h in zip(text[d.source].to_list()[:SAMPLES], refs, hyps)]
    seconds = time.perf_counter() - started
    if not scored:
        raise ValueError("no validation or test pairs to score")
    metrics = headline(scores, [d.key for d in translator.directions], model_metrics)
    metrics.update(beam=float(dec.beam), translate_seconds=seconds,
                   sentences_per_s=sentences / seconds if seconds > 0 else 0.0)
    (out / "scores.json").write_text(json.dumps({"decode": dataclasses.asdict(dec), "scores": scores,
                                                 "model": store_relative(model_dir, Path(out).resolve().parent.parent)},
                                                indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    (out / "samples.json").write_text(json.dumps(samples, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return {"metrics": metrics}


def _evaluate_denoising(out: Path, model_dir: Path, corpus: Path, translator, frames: Mapping[str, Any],
                        cfg: Seq2SeqStageConfig, model_metrics: Mapping[str, Any]) -> dict[str, Any]:
    """task denoise: no task score (the model is a starting point); its loss of rebuilding held-out texts is the
    model's ``val_loss``. ``samples.json``: a few held-out texts, their corrupted copies and the model's greedy
    rebuild, for a look at what it learned."""
    import polars as pl
    import torch

    from corpusforge.models.objectives.seq2seq import corrupt

    split = next((s for s in ("valid", "test") if frames[s] is not None), None)
    if split is None:
        raise ValueError("no validation or test texts to rebuild")
    text = pl.read_parquet(corpus / f"{split}.parquet", columns=[cfg.source])[cfg.source].to_list()[:SAMPLES]
    tok, settings = translator.tokenizer, cfg.objective
    mask_id = int(translator.spec["translation"]["mask_id"])
    gen = torch.Generator().manual_seed(cfg.train.seed)
    rows = []
    for doc in text:
        sentences = [list(ids) for ids in tok.encode_batch(lines(doc))]
        noised = corrupt(sentences, gen, mask_id, settings.mask_ratio, settings.poisson_lambda,
                         settings.permute_sentences, translator.source_max_len)
        rebuilt = translator.translate_ids([noised], beam=1, max_len=cfg.decode.max_len)[0]
        rows.append({"text": doc, "corrupted": tok.decode(noised, skip_special_tokens=False),
                     "rebuilt": tok.decode(rebuilt)})
    metrics = {k: float(model_metrics[k]) for k in ("val_loss", "val_ppl", "test_loss", "test_ppl", "tokens_seen")
               if k in model_metrics}
    (out / "scores.json").write_text(json.dumps({"task": "denoise", "decode": dataclasses.asdict(cfg.decode),
                                                 "scores": {}, "metrics": metrics,
                                                 "model": store_relative(model_dir, Path(out).resolve().parent.parent)},
                                                indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    (out / "samples.json").write_text(json.dumps({"denoise": rows}, indent=2, ensure_ascii=False) + "\n",
                                      encoding="utf-8")
    return {"metrics": metrics}


def _evaluate_summaries(out: Path, model_dir: Path, corpus: Path, translator, meta: Mapping[str, Any],
                        frames: Mapping[str, Any], scored: list[str], cfg: Seq2SeqStageConfig, model_metrics: Mapping[str, Any]) -> dict[str, Any]:
    """task summarize: each scored split's documents summarized (``summaries/<split>.<from>-<to>.txt``, a line each)
    and scored with ROUGE-1/2/L F1 (0-100, rouge-score with its Porter stemmer) against all of each document's
    references by ``decode.rouge_rule``, beside Lead-1 and the one-sentence oracle on the same documents."""
    import polars as pl

    from corpusforge.models.summ_eval import baselines, rouge

    if not scored:
        raise ValueError("no validation or test documents to score")
    dec = cfg.decode
    (out / "summaries").mkdir()
    scores: dict[str, Any] = {}
    samples: dict[str, list[dict[str, str]]] = {}
    started, documents = time.perf_counter(), 0
    d = translator.directions[0]
    for split in scored:
        frame = frames[split]
        text = pl.read_parquet(corpus / f"{split}.parquet", columns=["doc_id", cfg.source, cfg.target])
        if text["doc_id"].to_list() != frame["doc_id"].to_list():
            raise ValueError(f"{split}: the encoded records and the corpus they came from list other records")
        documents_text = [lines(t) for t in text[cfg.source].to_list()]
        if cfg.task == "extract":  # the best-scored sentences, in document order
            hyps = translator.summarize(documents_text, sentences=dec.sentences, max_words=dec.max_words)
        else:
            sources = [list(d.prefix_ids) + list(ids) for ids in frame[meta["fields"][d.source]].to_list()]
            hyps = [translator.tokenizer.decode(ids)
                    for ids in translator.translate_ids(sources, dec.beam, dec.length_penalty, dec.max_len,
                                                        dec.batch_size, min_len=dec.min_len,
                                                        no_repeat_ngram_size=dec.no_repeat_ngram_size)]
        references = [lines(t) for t in text[cfg.target].to_list()]
        keep = [i for i, refs in enumerate(references) if refs]  # a document without a reference is not scored
        if not keep:
            raise ValueError(f"{split}: no document has a reference summary in field {cfg.target!r}")
        documents += len(hyps)
        (out / "summaries" / f"{split}.{d.key}.txt").write_text(
            "".join(h.replace("\n", " ") + "\n" for h in hyps), encoding="utf-8")
        picked = lambda xs: [xs[i] for i in keep]  # noqa: E731
        figures = {**rouge(picked(hyps), picked(references), dec.rouge_rule),
                   **baselines(picked(documents_text), picked(references), dec.rouge_rule)}
        scores.setdefault(split, {})[d.key] = {**figures, "documents": len(keep), "unscored": len(hyps) - len(keep),
                                               "references": sum(len(r) for r in references),
                                               "rouge_rule": dec.rouge_rule}
        if split == scored[0]:
            samples[d.key] = [{"source": " ".join(doc), "references": refs, "summary": h}
                              for doc, refs, h in list(zip(documents_text, references, hyps))[:SAMPLES]]
    seconds = time.perf_counter() - started
    split = "test" if "test" in scores else "valid"
    first = scores[split][d.key]
    metrics: dict[str, Any] = {k: v for k, v in first.items() if isinstance(v, float)}
    metrics["rouge_split"], metrics["rouge_rule"] = split, dec.rouge_rule
    for what in scores:
        for k in ("rouge1", "rouge2", "rougeL"):
            metrics[f"{'val' if what == 'valid' else what}_{k}"] = scores[what][d.key][k]
    for k in ("val_loss", "val_ppl", "test_loss", "test_ppl"):
        if k in model_metrics:
            metrics[k] = float(model_metrics[k])
    how = {"sentences": float(dec.sentences)} if cfg.task == "extract" else {"beam": float(dec.beam)}
    metrics.update(**how, summarize_seconds=seconds,
                   documents_per_s=documents / seconds if seconds > 0 else 0.0)
    (out / "scores.json").write_text(json.dumps({"task": cfg.task, "decode": dataclasses.asdict(dec),
                                                 "scores": scores,
                                                 "model": store_relative(model_dir, Path(out).resolve().parent.parent)},
                                                indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    (out / "samples.json").write_text(json.dumps(samples, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return {"metrics": metrics}


def headline(scores: dict[str, dict[str, dict[str, Any]]], keys: list[str],
             model_metrics: Mapping[str, Any]) -> dict[str, Any]:
    """The step's metrics: ``bleu``/``chrf``/``bleu_tok_lc`` (+ signatures) of the first direction on the test split
    when scored, else on valid (``bleu_split`` says which); ``val_*``/``test_*`` of each; with two directions, each
    direction's ``bleu_<from>_<to>`` (and chrf, bleu_tok_lc) on that split; the model's loss and perplexity."""
    split = "test" if "test" in scores else "valid"
    first = scores[split][keys[0]]
    metrics: dict[str, Any] = {k: first[k] for k in ("bleu", "chrf", "bleu_tok_lc")}
    metrics["bleu_split"] = split
    for what in ("valid", "test"):
        for k in ("bleu", "chrf", "bleu_tok_lc"):
            if what in scores:
                metrics[f"{'val' if what == 'valid' else what}_{k}"] = scores[what][keys[0]][k]
    if len(keys) > 1:
        for key in keys:
            for k in ("bleu", "chrf", "bleu_tok_lc"):
                metrics[f"{k}_{key.replace('-', '_')}"] = scores[split][key][k]
    for k in ("val_loss", "val_ppl", "test_loss", "test_ppl"):
        if k in model_metrics:
            metrics[k] = float(model_metrics[k])
    metrics.update({f"{k}_signature": first[f"{k}_signature"] for k in ("bleu", "chrf", "bleu_tok_lc")})
    return metrics


# --- the Prefect task -----------------------------------------------------------------------------------------------


seq2seq_task = training_task("seq2seq", seq2seq_config_from_dict, build_seq2seq)
