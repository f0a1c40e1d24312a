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
from corpusforge.tasks.config import identity
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
                  on_metrics: Callable[[int, dict[str, float]], None] | None = None) -> list[StepResult]:
    """Train (or reuse) the model, then evaluate (or reuse the evaluation). Returns [evaluation, model]."""
    model = training_step(upstream, cfg, store, step=MODEL_STEP, version=SEQ2SEQ_VERSION, family=cfg.family,
                          config=identity(cfg, MODEL_STEP), libraries=("torch", "safetensors", "polars"),
                          build=lambda out, src, scratch, _: _train(out, src, cfg, scratch, on_metrics))
    evaluation = run_step(store, step=EVAL_STEP, version=EVAL_VERSION, name=cfg.name,
                          config=identity(cfg, EVAL_STEP), inputs=[artifact_input(model), artifact_input(upstream)],
                          build=lambda out: _evaluate(out, Path(model.path), Path(upstream.path), cfg),
                          libraries=("torch", "sacrebleu", "polars"))
    return [evaluation, model]


def _train(out: Path, encoded_dir: Path, cfg: Seq2SeqStageConfig, scratch: Path, on_metrics) -> dict[str, Any]:
    import torch

    from corpusforge.models.objectives import build as build_objective
    from corpusforge.models.tokenization import load_tokenizer
    from corpusforge.models.training import pick_device
    from corpusforge.models.zoo import build_model

    meta, frames = read_pairs(encoded_dir, (cfg.source, cfg.target))
    if frames["train"] is None:
        raise ValueError("the encoded train split has no pairs: nothing to train on")
    if frames["valid"] is None and frames["test"] is None:
        raise ValueError("the seq2seq step needs a validation (or test) split: give --valid SRC TGT, or set "
                         "corpus.split.valid > 0")
    tokenizer_dir = resolve_recorded(meta["tokenizer_path"], encoded_dir)
    learned = directions(cfg, load_tokenizer(tokenizer_dir))
    splits = examples(frames, meta["fields"], learned)
    vocab_size, warnings = int(meta["vocab_size"]), []
    top = max(max((max(s) for s in part if s), default=-1) for pair in splits.values() for part in pair)
    if top >= vocab_size:  # an inconsistent encode artifact: still give every id present its row
        warnings.append(f"encoded pairs contain token id {top} >= meta.json vocab_size {vocab_size}; "
                        f"the model uses vocab_size {top + 1}")
        vocab_size = top + 1
    mcfg = cfg.model_config(vocab_size, special_ids(meta))
    torch.manual_seed(cfg.train.seed)  # the weights' init
    model = build_model(cfg.family, mcfg)
    objective = build_objective(cfg.objective, mcfg, splits)
    result, record, metrics, seconds = fit(model, objective, cfg.train, scratch, on_metrics)
    if cfg.evaluate_test and "test" in splits and "valid" in splits:
        test = objective.evaluate(model, "test", cfg.train.batch_size, 0, next(model.parameters()).device)
        metrics.update({f"test_{k}": v for k, v in test.items()})
    metrics.update(params=float(sum(p.numel() for p in model.parameters())), train_seconds=seconds,
                   pairs_train=float(frames["train"].height), stopped_early=float(result.stopped_early))
    model = model.cpu().eval()
    root = Path(out).resolve().parent.parent
    extra = {"tokenizer": {"path": store_relative(tokenizer_dir, root), "id": meta.get("tokenizer_id"),
                           "vocab_size": meta["vocab_size"]},
             "translation": {"directions": learned, "source": cfg.source, "target": cfg.target,
                             "direction": cfg.direction},
             "data": {"encoded": store_relative(encoded_dir, root), "corpus_id": meta.get("corpus_id")}}
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
    fields = (cfg.source, cfg.target)
    meta, frames = read_pairs(encoded_dir, fields)
    corpus = corpus_dir(encoded_dir)
    model_metrics = (read_manifest(model_dir) or {}).get("metrics") or {}
    scored = [s for s in ("valid", "test") if frames[s] is not None and (s == "valid" or cfg.evaluate_test)]
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
