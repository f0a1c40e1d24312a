"""The one trainer, for any objective, reading top to bottom like nanoGPT's train.py.

``train(model, objective, cfg)``: the objective (corpusforge.models.objectives) makes the batches, wraps the model
in the module that computes its loss and evaluates with its own metrics; the trainer knows no task. It reports
through callbacks only (``on_metrics(step, dict)``, ``on_checkpoint(path)``); the task wires them to the manifest,
MLflow and a progress bar. What it does:

- AdamW (or SGD, for the Zaremba recipes); linear warmup then cosine, step, constant or inverse-square-root
  ("noam", Vaswani et al. 2017) decay; gradient clipping; gradient accumulation, a step's loss the mean over all its
  terms (tokens or examples) across micro-batches and ranks, not a mean of per-batch means (:func:`micro_weights`);
- bf16/fp16 autocast on CUDA only (fp16 with a GradScaler), optional ``torch.compile`` of the model and its
  loss as one graph;
- periodic evaluation with the objective's metrics (``val_loss`` first: the best weights are kept by it);
- early stopping on the validation loss;
- checkpoints as one safetensors file: weights, optimizer state, RNG states, the state an objective carries
  across batches, step and history (JSON in the file's metadata). No pickle anywhere;
- exact resume: a run resumed from a checkpoint ends with the same weights, bit for bit on CPU, as one
  that was never interrupted (every source of randomness is a saved generator);
- DDP when launched by ``torchrun`` (WORLD_SIZE > 1); rank 0 evaluates, reports and saves;
- tokens/s always (the input tokens the objective counts), MFU on CUDA (FLOPs per token from the objective,
  peak from the device name).

Starting from another artifact's weights (a stage's ``init``: a fresh optimizer, a backbone under a new head) is
:func:`corpusforge.models.zoo.load_weights`, before ``train``; resuming is ``resume_from``.
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn

from corpusforge.models.checkpoint import read_checkpoint, restore_checkpoint, save_checkpoint
from corpusforge.models.configs import TrainConfig
from corpusforge.models.objectives import Objective
from corpusforge.models.zoo import load_state, unique_state_dict

# dense bf16 peak FLOP/s by device name (no sparsity); MFU is reported only where we know the peak
PEAK_FLOPS = {"H100": 989e12, "H200": 989e12, "A100": 312e12, "L40S": 362e12, "A10": 125e12, "L4": 121e12}


@dataclass
class TrainResult:
    step: int
    best_val_loss: float
    metrics: dict[str, float]
    history: list[dict[str, Any]]
    stopped_early: bool = False


# --- small pure helpers ---------------------------------------------------------------------------

def learning_rate(it: int, cfg: TrainConfig) -> float:
    """Linear warmup, then the chosen decay."""
    if it < cfg.warmup_iters:
        return cfg.lr * (it + 1) / (cfg.warmup_iters + 1)
    if cfg.lr_schedule == "constant":
        return cfg.lr
    if cfg.lr_schedule == "noam":  # inverse square root after the warmup: lr * sqrt(warmup / step)
        return cfg.lr * math.sqrt(max(1, cfg.warmup_iters) / (it + 1))
    if cfg.lr_schedule == "step":
        if it < cfg.step_decay_start:
            return cfg.lr
        return cfg.lr * cfg.step_decay_factor ** (1 + (it - cfg.step_decay_start) // cfg.step_decay_every)
    decay_iters = cfg.lr_decay_iters or cfg.max_iters
    if it >= decay_iters:
        return cfg.min_lr
    ratio = (it - cfg.warmup_iters) / max(1, decay_iters - cfg.warmup_iters)
    return cfg.min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (cfg.lr - cfg.min_lr)


def pick_device(name: str = "auto") -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def make_optimizer(model: nn.Module, cfg: TrainConfig, device: torch.device) -> torch.optim.Optimizer:
    params = [p for p in model.parameters() if p.requires_grad]
    if cfg.optimizer == "sgd":
        return torch.optim.SGD(params, lr=cfg.lr)
    # decay matrices and embeddings, not biases and LayerNorm gains (nanoGPT)
    groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": cfg.weight_decay},
              {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=(cfg.beta1, cfg.beta2), fused=fused_adamw(params, device))


def fused_adamw(params: Sequence[torch.Tensor], device: torch.device) -> bool:
    """Whether AdamW runs its fused kernel: on GPU. On CPU torch has one too, 2.8-3.1x faster per optimizer step
    (benchmarks/optimizer_cpu.py, issue 51 item 2), but it is not used there yet: its rounding (the same update to
    ~1e-7) moved the post-training DPO test's answer accuracy from 0.97 to 0.89 (tests/tasks/post_training), a
    sensitivity to be understood before CPU results change. Never for sparse gradients or non-float weights."""
    return device.type == "cuda" and all(p.is_floating_point() and not p.is_sparse for p in params)


# --- the loop --------------------------------------------------------------------------------------

def _ddp_env() -> tuple[int, int, int]:
    world = int(os.environ.get("WORLD_SIZE", "1"))
    return world, int(os.environ.get("RANK", "0")), int(os.environ.get("LOCAL_RANK", "0"))


def micro_weights(terms: Sequence[int | None], world: int = 1, device: torch.device | None = None) -> list[float]:
    """Each micro-batch's weight in its step: ``terms_i * k * world / (the step's terms on all ranks)`` for ``k``
    micro-batches, so that (with the trainer's ``/ k`` and DDP's mean over ranks) the step's gradient is that of the
    mean loss over every term (token, example) of the step, not the mean of per-micro-batch means: with padded,
    length-bucketed batches two micro-batches of 10 and 30 target tokens weigh 1:3, as the same 40 tokens in one
    batch do. Every weight is exactly 1.0 when all micro-batches have as many terms (fixed-size token windows), and
    when a loss declares none (``Batch.terms`` None). ``device``: under DDP, where the ranks' counts are summed
    (one all-reduce of one number per step)."""
    if any(t is None for t in terms) or not terms:
        return [1.0] * len(terms)
    total, ranks = sum(int(t) for t in terms), 1
    if device is not None and world > 1:
        import torch.distributed as dist

        count = torch.tensor([total], dtype=torch.float64, device=device)
        dist.all_reduce(count)
        total, ranks = int(count.item()), world
    if total == 0:
        return [1.0] * len(terms)
    return [int(t) * len(terms) * ranks / total for t in terms]


_SPIN_WARNED = False


def spin_warning() -> str | None:
    """Once per process, on stderr: torch was imported before corpusforge with OMP_WAIT_POLICY unset, so its OpenMP
    threads spin while they wait (``import corpusforge`` sets PASSIVE, but OpenMP reads it only when torch loads).
    Returns what was said (None when nothing was: one thread, the setting in place, or said already)."""
    global _SPIN_WARNED
    package = sys.modules.get("corpusforge")
    if _SPIN_WARNED or not getattr(package, "TORCH_BEFORE_US", False) or torch.get_num_threads() < 2:
        return None
    _SPIN_WARNED = True
    said = ("corpusforge: torch was imported before corpusforge, with OMP_WAIT_POLICY unset: its OpenMP threads spin "
            "while they wait, which can make CPU training several times slower on a busy machine. Import corpusforge "
            "first, or set OMP_WAIT_POLICY=PASSIVE before Python starts (the corpusforge command does).")
    print(said, file=sys.stderr)
    return said


def train(
    model: nn.Module,
    objective: Objective,
    cfg: TrainConfig,
    *,
    on_metrics: Callable[[int, dict[str, float]], None] | None = None,
    on_checkpoint: Callable[[Path], None] | None = None,
    checkpoint_path: Path | None = None,
    resume_from: Path | None = None,
    stop_after: int | None = None,
) -> TrainResult:
    """Train ``model`` in place on ``objective``. ``stop_after`` ends the run early at that step (with a
    checkpoint), as if interrupted: resuming from it must reach the same weights as never stopping."""
    world, rank, local_rank = _ddp_env()
    ddp = world > 1
    if ddp:
        import torch.distributed as dist

        if not dist.is_initialized():
            dist.init_process_group(backend="nccl" if torch.cuda.is_available() else "gloo")
        device = torch.device(f"cuda:{local_rank}") if torch.cuda.is_available() else torch.device("cpu")
        if device.type == "cuda":
            torch.cuda.set_device(device)
    else:
        device = pick_device(cfg.device)
    master = rank == 0
    report = on_metrics if (on_metrics and master) else (lambda step, m: None)
    emitted: list[dict[str, Any]] = []  # every report, kept in the checkpoint so a resumed run has the whole curve

    def emit(at: int, m: dict[str, float]) -> None:
        emitted.append({"step": at, **m})
        report(at, m)

    # precision: autocast only on CUDA; fp16 needs loss scaling, bf16 does not
    if device.type == "cuda":
        dtype = cfg.dtype if cfg.dtype != "auto" else ("bfloat16" if torch.cuda.is_bf16_supported() else "float16")
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    else:
        dtype = "float32"
        if cfg.cpu_threads:
            torch.set_num_threads(cfg.cpu_threads)
        if master:
            spin_warning()
    amp_dtype = {"bfloat16": torch.bfloat16, "float16": torch.float16}.get(dtype)
    autocast = (lambda: torch.autocast("cuda", dtype=amp_dtype)) if amp_dtype else contextlib.nullcontext
    scaler = torch.amp.GradScaler("cuda", enabled=(dtype == "float16"))

    torch.manual_seed(cfg.seed + rank)  # dropout stream; the weights were seeded by whoever built the model
    data_gen = torch.Generator().manual_seed(cfg.seed + 1000 * (rank + 1))  # batch sampling stream
    raw_model = model.to(device)
    optimizer = make_optimizer(raw_model, cfg, device)
    objective.setup(raw_model, cfg.batch_size, rank, world)
    if not (objective.has_split("valid") or objective.has_split("test")):
        raise ValueError("training needs a valid (or test) split to evaluate on")
    eval_split = "valid" if objective.has_split("valid") else "test"

    step, best_val, bad_evals, history, carried, best_weights = 0, math.inf, 0, [], None, None
    best_metrics: dict[str, float] = {}
    if resume_from is not None:
        tensors, meta = read_checkpoint(Path(resume_from))
        carried, best_weights, rng = restore_checkpoint(tensors, meta, raw_model, optimizer, device)
        step, best_val, bad_evals, history = meta["step"], meta["best_val"], meta["bad_evals"], meta["history"]
        best_metrics = meta.get("best_metrics", {})
        for past in meta.get("emitted", []):  # replay what the earlier process reported, up to its checkpoint
            emit(int(past["step"]), {k: v for k, v in past.items() if k != "step"})
        torch.set_rng_state(rng["torch"])
        data_gen.set_state(rng["data"])
        if "cuda" in rng and device.type == "cuda":
            torch.cuda.set_rng_state(rng["cuda"], device)

    run_model: nn.Module = objective.loss_module(raw_model)
    if cfg.compile:  # the model and its loss as one graph (the loss fuses into the head's output)
        run_model = torch.compile(run_model)
    if ddp:
        from torch.nn.parallel import DistributedDataParallel

        run_model = DistributedDataParallel(run_model, device_ids=[local_rank] if device.type == "cuda" else None)

    flops_per_token = objective.flops_per_token(raw_model)
    peak = next((v for k, v in PEAK_FLOPS.items() if device.type == "cuda" and k in torch.cuda.get_device_name(device)), None)

    def checkpoint(at: int) -> None:
        if not (checkpoint_path and master):
            return
        rng = {"torch": torch.get_rng_state(), "data": data_gen.get_state()}
        if device.type == "cuda":
            rng["cuda"] = torch.cuda.get_rng_state(device)
        meta = {"step": at, "best_val": best_val, "bad_evals": bad_evals, "history": history,
                "best_metrics": best_metrics,
                "emitted": [e for e in emitted if e["step"] <= at], "train_config": asdict(cfg)}
        path = save_checkpoint(Path(checkpoint_path), raw_model, optimizer, meta, rng, carried, best_weights)
        if on_checkpoint:
            on_checkpoint(path)

    def run_eval(at: int, train_loss: float | None) -> dict[str, float]:
        nonlocal best_val, bad_evals, best_weights, best_metrics
        scores = objective.evaluate(raw_model, eval_split, cfg.batch_size, cfg.eval_iters, device, autocast)
        m = {f"val_{k}": v for k, v in scores.items()}
        val = m["val_loss"]
        if train_loss is not None:
            m["train_loss"] = train_loss
        if val < best_val:
            best_val, bad_evals = val, 0
            best_metrics = {k: v for k, v in m.items() if k != "train_loss"}
            if cfg.keep_best:
                best_weights = {k: v.clone() for k, v in unique_state_dict(raw_model).items()}
        else:
            bad_evals += 1
        history.append({"step": at, **m})
        emit(at, {k: v for k, v in m.items() if k != "train_loss"})  # the train loss was reported at its step
        return m

    raw_model.train()
    first_step = step  # steps before this one ran in an earlier process (resume)
    stopped_early = False
    window_start, window_tokens, train_time, run_tokens = time.perf_counter(), 0, 0.0, 0
    last_loss = None
    while step < cfg.max_iters:
        lr = learning_rate(step, cfg)
        for group in optimizer.param_groups:
            group["lr"] = lr
        t0 = time.perf_counter()
        step_tokens = 0
        # the step's micro-batches first (drawn in the same order as one by one): their terms weigh their losses
        batches = [objective.batch(step * cfg.grad_accum + micro, data_gen) for micro in range(cfg.grad_accum)]
        weights = micro_weights([b.terms for b in batches], world, device if ddp else None)
        for micro, batch in enumerate(batches):
            if batch.fresh:
                carried = None  # a new pass over the data: forget the last row's end
            tensors = [t.to(device, non_blocking=True) for t in batch.tensors]
            sync = contextlib.nullcontext() if (not ddp or micro == cfg.grad_accum - 1) else run_model.no_sync()
            with sync, autocast():
                loss, new_state = run_model(*tensors, carried)
                if weights[micro] != 1.0:  # 1.0 when every micro-batch has as many terms: the arithmetic of before
                    loss = loss * weights[micro]
                loss = loss / cfg.grad_accum
            scaler.scale(loss).backward()
            carried = objective.carry(new_state)  # truncated BPTT detaches it; others carry nothing
            step_tokens += batch.tokens * world
        if cfg.grad_clip:
            scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(raw_model.parameters(), cfg.grad_clip)
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)
        step += 1
        train_time += time.perf_counter() - t0
        window_tokens += step_tokens
        run_tokens += step_tokens

        if step % cfg.log_interval == 0 or step == cfg.max_iters:
            last_loss = loss.item() * cfg.grad_accum  # the only host sync in the loop
            elapsed = time.perf_counter() - window_start
            tps = window_tokens / max(elapsed, 1e-9)
            m = {"train_loss": last_loss, "lr": lr, "tokens_per_s": tps}
            if peak and flops_per_token:
                m["mfu"] = flops_per_token * tps / (peak * world)
            emit(step, m)
            window_start, window_tokens = time.perf_counter(), 0
        if master and (step % cfg.eval_interval == 0 or step == cfg.max_iters):
            run_eval(step, last_loss)
            window_start, window_tokens = time.perf_counter(), 0  # speed excludes evaluation
            if cfg.early_stopping_patience and bad_evals >= cfg.early_stopping_patience:
                stopped_early = True
            checkpoint(step)
        if ddp and cfg.early_stopping_patience:
            import torch.distributed as dist

            flag = torch.tensor([int(stopped_early)], device=device)
            dist.broadcast(flag, 0)
            stopped_early = bool(flag.item())
        if stopped_early or (stop_after is not None and step >= stop_after):
            break

    if stop_after is not None and step < cfg.max_iters and not stopped_early:
        if step % cfg.eval_interval:
            checkpoint(step)
        return TrainResult(step, best_val, history[-1] if history else {}, history, False)
    if cfg.keep_best and best_weights is not None:
        load_state(raw_model, best_weights)
    final = dict(history[-1]) if history else {}
    if cfg.keep_best:  # the figures of the weights it ends with
        final.update(best_metrics)
    final["best_val_loss"] = best_val
    final["steps"] = step
    final["tokens_per_s"] = run_tokens / max(train_time, 1e-9)
    if peak and flops_per_token:
        final["mfu"] = flops_per_token * final["tokens_per_s"] / (peak * world)
    return TrainResult(step, best_val, final, history, stopped_early)
