"""The post_training stage's steps.

``post_training`` trains a model further from a checkpoint (``post_training.init``: an lm, post_training or
lora_merge artifact, which joins the step's inputs) on the corpus's records, encoded with the checkpoint's own
tokenizer: ``full`` continues the next-token objective on every weight, ``lora`` on LoRA adapters only, ``sft`` is
supervised fine-tuning (loss on the response tokens only, short examples packed), ``dpo`` direct preference
optimisation against a frozen reference (the start model; under LoRA the same model with its adapters off).
Output: ``model.safetensors`` (all weights) or ``adapter.safetensors`` (only the adapters: a small artifact whose
config.json names its base), ``config.json`` (family, model, tokenizer, the template, where it started),
``metrics.json``, ``answers.json`` (sft/dpo: greedy answers to held-out prompts beside the gold ones) and
``loss_curve.png``.

``lora_merge`` (``corpusforge lm merge``) folds an adapter artifact into plain weights (W + (alpha/r) B A): a model
artifact like an lm's, whose only input is the adapter artifact.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from corpusforge.storage.store import ArtifactStore, store_relative
from corpusforge.tasks.config import ConfigError
from corpusforge.tasks.post_training.config import (
    MERGE_STEP,
    STEP,
    PostTrainingConfig,
    post_training_config_from_dict,
)
from corpusforge.tasks.post_training.methods import METHOD
from corpusforge.tasks.step import StepResult, artifact_input, run_step
from corpusforge.tasks.training import diverged_advice, fit, refuse_non_finite, training_step, training_task

POST_VERSION, MERGE_VERSION = 1, 1


def build_post_training(upstream: StepResult, cfg: PostTrainingConfig, store: ArtifactStore,
                        on_metrics: Callable[[int, dict[str, float]], None] | None = None,
                        refs: Mapping[str, StepResult] | None = None) -> StepResult:
    """Train (or reuse) the post-trained model on the corpus artifact ``upstream``."""
    return training_step(upstream, cfg, store, step=STEP, version=POST_VERSION, section="post_training", refs=refs,
                         libraries=("torch", "safetensors", "peft", "polars"),
                         build=lambda out, src, scratch, found: _train(out, src, cfg, scratch, on_metrics,
                                                                       Path(found["init"].path), found["init"]))


def _split_data(cfg: PostTrainingConfig, records, tokenizer, start_model, warnings: list[str]):
    """The objective's splits and the held-out examples whose answers are scored (the method's:
    corpusforge.tasks.post_training.methods)."""
    method = METHOD[cfg.method]
    splits: dict[str, Any] = {}
    held: dict[str, Any] = {}
    for split, rows in records.items():
        if rows is None:
            continue
        data, made, skipped = method.examples(cfg, rows, tokenizer, start_model)
        if skipped:
            warnings.append(f"{split}: {skipped} record(s) without the fields the templates read were skipped")
        if len(data):
            splits[split] = data
        if made is not None and made.ids:
            held[split] = made
    return splits, held


def _asked(cfg: PostTrainingConfig, held, tokenizer) -> dict[str, tuple]:
    """Per held-out split, the arguments after (model, tokenizer) of ``answer_accuracy``: the first
    ``eval_records`` prompts, their gold answers, the end id and the longest answer to allow (methods that
    answer: sft, dpo)."""
    from corpusforge.tasks.post_training.data import end_id

    if not METHOD[cfg.method].answers or not cfg.eval_records:
        return {}
    out = {}
    for split in ("valid", "test"):
        if split in held:
            prompts, gold = held[split].prompts[: cfg.eval_records], held[split].responses[: cfg.eval_records]
            out[split] = (prompts, gold, end_id(tokenizer), max(len(tokenizer.encode(g)) for g in gold) + 2)
    return out


def _objective(cfg: PostTrainingConfig, model, splits, tokenizer, spec):
    """The objective the method names, through the objectives' registry (corpusforge.models.objectives.build),
    with what the method adds (sft/dpo: the pad id; dpo: the start model as its reference)."""
    from corpusforge.models.objectives import build

    return build(cfg.settings(spec), model.cfg, splits, **METHOD[cfg.method].context(model, tokenizer))


def _train(out: Path, corpus_dir: Path, cfg: PostTrainingConfig, scratch: Path, on_metrics, parent: Path,
           parent_ref: StepResult) -> dict[str, Any]:
    import torch

    from corpusforge.models.family import family
    from corpusforge.models.tokenization import load_tokenizer
    from corpusforge.models.training import pick_device
    from corpusforge.models.zoo import save_model
    from corpusforge.tasks.encoded import model_tokenizer_dir
    from corpusforge.tasks.post_training.data import read_corpus
    from corpusforge.tasks.post_training.inference import answer_accuracy, load_plain, read_spec

    warnings: list[str] = []
    model, parent_spec = load_plain(parent)
    spec = family(parent_spec["family"])
    if METHOD[cfg.method].answers and not spec.can("generate"):
        raise ConfigError(f"post_training.method {cfg.method}: a {spec.name} model cannot generate text; start from "
                          "a language model that can (gpt, rnn, nplm)")
    tokenizer_dir = model_tokenizer_dir(parent)
    tokenizer = load_tokenizer(tokenizer_dir)
    records = read_corpus(corpus_dir, cfg.fields())
    if records["train"] is None:
        raise ValueError("the corpus's train split has no records: nothing to train on")
    if records["valid"] is None:
        raise ValueError("the post_training step needs a validation split: set corpus.split.valid > 0 or give --valid")
    # Until adapters or training change it, the model is the start model: it writes DPO's rejected answers,
    # answers the held-out prompts here (greedy, dropout off) and, for DPO, scores every record as the reference
    # before the first step, so no second copy is kept
    model.eval()
    splits, held = _split_data(cfg, records, tokenizer, model, warnings)
    if "train" not in splits or "valid" not in splits:
        raise ValueError("no train or validation examples were left after filling the templates")
    asked = _asked(cfg, held, tokenizer)
    start_answers = {split: answer_accuracy(model, tokenizer, *q) for split, q in asked.items()}
    counts: dict[str, Any] = {}
    torch.manual_seed(cfg.train.seed)  # the adapters' A (B starts at 0): the same artifact on every rebuild
    lora = None
    if cfg.lora is not None:
        from corpusforge.models.lora import add_lora

        try:
            lora = cfg.lora.for_family(spec)  # unnamed targets: the family's
            counts = add_lora(model, lora.targets, lora.r, lora.alpha, lora.dropout, lora.train_norms)
        except ValueError as exc:
            raise ConfigError(f"post_training.lora: {exc}") from None
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    total = sum(p.numel() for p in model.parameters())
    objective = _objective(cfg, model, splits, tokenizer, spec)
    start_loss = None
    if METHOD[cfg.method].start_loss:  # where the fine-tune starts, on the same held-out examples
        start_loss = objective.evaluate(model, "valid", cfg.train.batch_size, cfg.train.eval_iters)["loss"]
    torch.manual_seed(cfg.train.seed)
    device = pick_device(cfg.train.device)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    result, record, metrics, seconds = fit(model, objective, cfg.train, scratch, on_metrics)
    if device.type == "cuda":
        metrics["peak_memory_mb"] = torch.cuda.max_memory_allocated(device) / 2**20
    model = model.cpu().eval()
    # what training keeps per trainable float32 parameter beyond the weights: its gradient and AdamW's two moments
    metrics.update(trainable_params=float(trainable), total_params=float(total),
                   trainable_percent=100.0 * trainable / total, train_state_mb=12.0 * trainable / 2**20,
                   train_seconds=seconds,
                   stopped_early=float(result.stopped_early))
    if start_loss is not None:
        metrics["val_start_loss"] = start_loss
    answers: dict[str, Any] = {}
    for split, question in asked.items():
        prefix = "val" if split == "valid" else split
        acc, rows = answer_accuracy(model, tokenizer, *question)
        before, _ = start_answers[split]
        metrics[f"{prefix}_answer_accuracy"] = acc
        metrics[f"{prefix}_start_answer_accuracy"] = before
        answers[split] = {"records": len(question[0]), "accuracy": acc, "start_accuracy": before, "examples": rows}
    # the answer-level figures first (reports show the first few): the per-token loss alone misleads, a response
    # being mostly tokens the format fixes (issue 52; corpusforge.models.objectives.sft.SFT.evaluate)
    lead = ("val_answer_accuracy", "val_exact_match", "val_response_nll", "val_loss")
    metrics = {**{k: metrics[k] for k in lead if k in metrics}, **metrics}
    weights = model.state_dict()
    refuse_non_finite(f"post_training {cfg.name}", metrics=metrics, weights=weights,
                      change=diverged_advice("post_training", cfg.train))
    root = Path(out).resolve().parent.parent
    if lora is not None:
        from safetensors.torch import save_file

        from corpusforge.models.lora import adapter_state_dict

        save_file(adapter_state_dict(model), str(out / "adapter.safetensors"))
        spec_json = {"family": parent_spec["family"], "model": parent_spec["model"],
                     "lora": lora.to_dict(),
                     "base": {"id": parent_ref.id, "step": parent_ref.step,
                              "path": store_relative(parent, root)}}
    else:
        save_model(model, out)
        spec_json = read_spec(out)
    spec_json["tokenizer"] = {"path": store_relative(tokenizer_dir, root),
                              "id": (parent_spec.get("tokenizer") or {}).get("id"),
                              "vocab_size": tokenizer.vocab_size, "eot_id": tokenizer.eot_id}
    spec_json["post_training"] = {
        "method": cfg.method, "objective": cfg.objective, "init": {"id": parent_ref.id, "step": parent_ref.step},
        **METHOD[cfg.method].metadata(cfg),
        **({"lora": counts} if counts else {})}
    spec_json["objective"] = dataclasses.asdict(cfg.settings(spec))
    spec_json["train"] = dataclasses.asdict(cfg.train)
    spec_json["device"] = str(device)
    (out / "config.json").write_text(json.dumps(spec_json, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    if answers:
        (out / "answers.json").write_text(json.dumps(answers, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    record.write(out, metrics, title=f"{spec.name} {cfg.name} ({cfg.method})")
    return {"metrics": metrics, "device": str(device), "warnings": warnings}


# --- merging adapters -----------------------------------------------------------------------------------------


def build_merge(adapter: StepResult, store: ArtifactStore) -> StepResult:
    """Fold an adapter artifact into plain weights (or reuse the merge): a lora_merge artifact."""
    if adapter.step != STEP or not (Path(adapter.path) / "adapter.safetensors").is_file():
        raise ConfigError(f"{adapter.id[:12]} is a {adapter.step} artifact without LoRA adapters: nothing to merge "
                          "(a post_training artifact made with post_training.lora)")
    return run_step(store, step=MERGE_STEP, version=MERGE_VERSION, name=adapter.name, config={},
                    inputs=[artifact_input(adapter)], build=lambda out: _merge(out, Path(adapter.path), adapter),
                    libraries=("torch", "safetensors", "peft"))


def _merge(out: Path, adapter_dir: Path, adapter: StepResult) -> dict[str, Any]:
    from corpusforge.models.lora import merge_lora
    from corpusforge.models.zoo import save_model
    from corpusforge.tasks.post_training.inference import load_with_adapters

    model, spec = load_with_adapters(adapter_dir)
    merged = merge_lora(model)
    refuse_non_finite(f"lora_merge {adapter.name}", weights=merged.state_dict(), change="retrain the adapters")
    save_model(merged, out)
    spec_json = json.loads((out / "config.json").read_text(encoding="utf-8"))
    root = Path(out).resolve().parent.parent
    tokenizer = dict(spec["tokenizer"])
    from corpusforge.storage.store import resolve_recorded

    tokenizer["path"] = store_relative(resolve_recorded(tokenizer["path"], adapter_dir), root)
    spec_json["tokenizer"] = tokenizer
    spec_json["post_training"] = {**spec.get("post_training", {}), "merged_from": adapter.id,
                                  "base": spec["base"]["id"]}
    (out / "config.json").write_text(json.dumps(spec_json, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return {"metrics": {"params": float(sum(p.numel() for p in merged.parameters()))}}


# --- the Prefect task -----------------------------------------------------------------------------------------------


post_training_task = training_task("post_training", post_training_config_from_dict, build_post_training)
