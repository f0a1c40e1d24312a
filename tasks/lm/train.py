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

import contextlib
import dataclasses
import json
import shutil
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from corpusforge.storage.hashing import config_hash
from corpusforge.storage.store import ArtifactStore, resolve_recorded, store_relative
from corpusforge.tasks.config import identity
from corpusforge.tasks.lm.config import (  # noqa: F401
    GENERATE_DEFAULTS,
    LMConfig,
    SampleConfig,
    lm_config_from_dict,
)
from corpusforge.tasks.lm.inference import generate_text, load_tokenizer, render_ids  # noqa: F401
from corpusforge.tasks.orchestration import prefect_task
from corpusforge.tasks.step import NotPublished, StepResult, artifact_input, log_step_outcome, run_step

TIMING_KEYS = frozenset({"train_seconds", "tokens_per_s", "mfu", "seconds"})
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
             on_metrics: Callable[[int, dict[str, float]], None] | None = None) -> list[StepResult]:
    """Train (or reuse) the lm, then its sample (an ``lm_sample`` artifact, when one is asked for and the model
    can generate). Returns [sample, lm] or [lm]: the stage's main output, the lm, comes last."""
    config = identity(cfg)  # lm.sample is not in it: the sample is the next step's
    key = config_hash({"config": config, "input": upstream.id, "version": LM_VERSION})
    scratch = store.root / ".scratch" / "lm" / key[:16]
    result = run_step(
        store, step="lm", version=LM_VERSION, name=cfg.name, config=config, inputs=[artifact_input(upstream)],
        build=lambda out: _build(out, Path(upstream.path), cfg, scratch, on_metrics),
        libraries=("torch", "safetensors", "numpy"),
    )
    shutil.rmtree(scratch, ignore_errors=True)
    sample = build_lm_sample(result, cfg, store)
    return [sample, result] if sample is not None else [result]


def build_lm_sample(lm: StepResult, cfg: LMConfig, store: ArtifactStore) -> StepResult | None:
    """The sample of a trained lm (``sample.txt``, ``sample.json``), reused while lm.sample is unchanged. None
    when no sample is asked for (max_new_tokens 0) or the model is an encoder (it cannot generate)."""
    if cfg.sample.max_new_tokens == 0 or cfg.family == "encoder":
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


def _build(out: Path, encoded_dir: Path, cfg: LMConfig, scratch: Path, on_metrics) -> dict[str, Any]:
    import torch

    from corpusforge.models.training import evaluate, loss_metrics, pick_device, train
    from corpusforge.models.zoo import build_model, save_lm

    meta, splits = read_shards(encoded_dir)
    tokenizer_dir = resolve_recorded(meta["tokenizer_path"], encoded_dir) if meta.get("tokenizer_path") else None
    if splits["train"] is None:
        raise ValueError("the encoded train split is empty: nothing to train on")
    valid = splits["valid"] if splits["valid"] is not None else splits["test"]
    if valid is None:
        raise ValueError("the lm step needs a valid (or test) split: set corpus.split.valid > 0")
    tcfg = cfg.train_config()
    vocab_size, warnings = int(meta["vocab_size"]), []
    top = max(int(a.max()) for a in splits.values() if a is not None)
    if top >= vocab_size:  # an inconsistent encode artifact: still give every id present its row
        warnings.append(f"encoded shards contain token id {top} >= meta.json vocab_size {vocab_size}; "
                        f"the model uses vocab_size {top + 1}")
        vocab_size = top + 1
    mcfg = cfg.model_config(vocab_size)
    torch.manual_seed(tcfg.seed)  # the weights' init
    model = build_model(cfg.family, mcfg)
    history: list[dict[str, Any]] = []

    def record(step: int, metrics: dict[str, float]) -> None:
        history.append({"step": step, **metrics})
        if on_metrics:
            on_metrics(step, metrics)

    scratch.mkdir(parents=True, exist_ok=True)
    ckpt = scratch / "checkpoint.safetensors"
    started = time.perf_counter()
    result = train(model, splits["train"], valid, tcfg, on_metrics=record, checkpoint_path=ckpt,
                   resume_from=ckpt if ckpt.is_file() else None)
    seconds = time.perf_counter() - started
    device = pick_device(tcfg.device)
    metrics = {k: float(v) for k, v in result.metrics.items() if isinstance(v, (int, float))}
    if cfg.evaluate_test and splits["test"] is not None and valid is not splits["test"]:
        test = evaluate(model, splits["test"], mcfg.block_size, tcfg.batch_size, 0, next(model.parameters()).device)
        metrics.update(loss_metrics(test, "test"))
    metrics.update(params=float(sum(p.numel() for p in model.parameters())), train_seconds=seconds,
                   stopped_early=float(result.stopped_early))
    model = model.cpu().eval()
    save_lm(model, out)
    spec = json.loads((out / "config.json").read_text(encoding="utf-8"))
    spec["tokenizer"] = {"path": store_relative(tokenizer_dir, Path(out).resolve().parent.parent)
                         if tokenizer_dir else None, "id": meta.get("tokenizer_id"),
                         "vocab_size": meta["vocab_size"], "eot_id": meta.get("eot_id")}
    spec["train"] = dataclasses.asdict(tcfg)
    spec["device"] = str(device)
    (out / "config.json").write_text(json.dumps(spec, indent=2) + "\n", encoding="utf-8")
    # metrics.json holds what training computed, the same bytes on every rebuild; speeds and durations vary
    # run to run, so they go to the manifest's metrics and MLflow only.
    kept = {k: v for k, v in metrics.items() if k not in TIMING_KEYS}
    points = [{k: v for k, v in point.items() if k not in TIMING_KEYS} for point in history]
    (out / "metrics.json").write_text(json.dumps({"final": kept, "history": points}, indent=2) + "\n",
                                      encoding="utf-8")
    plot_loss_curve(history, out / "loss_curve.png", title=f"{cfg.family} {cfg.name}")
    return {"metrics": metrics, "device": str(device), "warnings": warnings}


def plot_loss_curve(history: list[dict[str, Any]], path: Path, title: str = "") -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4), dpi=100)
    train_pts = [(h["step"], h["train_loss"]) for h in history if "train_loss" in h and "lr" in h]
    val_pts = [(h["step"], h["val_loss"]) for h in history if "val_loss" in h]
    if train_pts:
        ax.plot(*zip(*train_pts), label="train loss", lw=1)
    if val_pts:
        ax.plot(*zip(*val_pts), "o-", label="val loss", lw=1.5)
    ax.set_xlabel("step")
    ax.set_ylabel("cross-entropy (nats/token)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


@contextlib.contextmanager
def training_progress(description: str, total: int) -> Iterator[Callable[[int, dict[str, float]], None]]:
    """A rich progress bar on stderr (step / max_iters, losses, tokens/s, ETA), fed by the trainer's metric
    callback. Silent when stderr is not a terminal (CI, logs, pipes): the task log has the same numbers."""
    if not sys.stderr.isatty():
        yield lambda step, metrics: None
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TextColumn("loss {task.fields[loss]}  val {task.fields[val]}  {task.fields[speed]}"),
                  TimeRemainingColumn(), console=Console(stderr=True), transient=True) as progress:
        task_id = progress.add_task(description, total=total, loss="-", val="-", speed="")

        def advance(step: int, metrics: dict[str, float]) -> None:
            fields = {}
            if "train_loss" in metrics:
                fields["loss"] = f"{metrics['train_loss']:.3f}"
            if "val_loss" in metrics:
                fields["val"] = f"{metrics['val_loss']:.3f} (ppl {metrics.get('val_ppl', 0):.1f})"
            if "tokens_per_s" in metrics:
                fields["speed"] = f"{metrics['tokens_per_s']:,.0f} tok/s"
            progress.update(task_id, completed=step, **fields)

        yield advance


# --- the Prefect task -----------------------------------------------------------------------------

@prefect_task(name="lm")
def lm_task(upstream: dict, config: dict, store_root: str,
            on_metrics: Callable[[int, dict[str, float]], None] | None = None) -> dict:
    """Train (or reuse) the lm; ``on_metrics`` also gets the trainer's metrics (the flow logs them to MLflow)."""
    from prefect import get_run_logger

    logger = get_run_logger()

    def log(step: int, metrics: dict[str, float]) -> None:
        if "val_loss" in metrics:
            logger.info("step %d: val loss %.4f (ppl %.2f)", step, metrics["val_loss"], metrics["val_ppl"])
        elif "tokens_per_s" in metrics:
            logger.info("step %d: train loss %.4f, lr %.3g, %.0f tokens/s", step, metrics["train_loss"], metrics["lr"],
                        metrics["tokens_per_s"])

    cfg = lm_config_from_dict(config)
    with training_progress(f"lm {cfg.name}", cfg.train_config().max_iters) as advance:
        def report(step: int, metrics: dict[str, float]) -> None:
            advance(step, metrics)
            log(step, metrics)
            if on_metrics:
                on_metrics(step, metrics)

        results = build_lm(StepResult.from_dict(upstream), cfg, ArtifactStore(store_root), on_metrics=report)
    for result in results:
        log_step_outcome(result)
    return [r.to_dict() for r in results]  # the lm last: the stage's main output
