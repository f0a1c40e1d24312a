"""One trainer for every LM family, reading top to bottom like nanoGPT's train.py.

It reports through callbacks only (``on_metrics(step, dict)``, ``on_checkpoint(path)``); the task wires
them to the manifest, MLflow and a progress bar. What it does:

- AdamW (or SGD, for the Zaremba recipes), linear warmup then cosine (or step) decay, gradient clipping,
  gradient accumulation;
- bf16/fp16 autocast on CUDA only (fp16 with a GradScaler), optional ``torch.compile``;
- periodic evaluation: loss, perplexity and bits per token over fixed, deterministic windows;
- early stopping on the validation loss;
- checkpoints as one safetensors file: weights, optimizer state, RNG states, the RNN state carried
  across batches, step and history (JSON in the file's metadata). No pickle anywhere;
- exact resume: a run resumed from a checkpoint ends with the same weights, bit for bit on CPU, as one
  that was never interrupted (every source of randomness is a saved generator);
- DDP when launched by ``torchrun`` (WORLD_SIZE > 1); rank 0 evaluates, reports and saves;
- tokens/s always, MFU on CUDA (FLOPs per token from the model, peak from the device name).

Batches: attention and window models (GPT, NPLM) take random windows, as nanoGPT does; recurrent models
read ``batch_size`` contiguous streams in order so the hidden state can flow from one batch to the next
(truncated BPTT: it is detached at every batch boundary).
"""

from __future__ import annotations

import contextlib
import math
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from corpusforge.models.checkpoint import read_checkpoint, restore_checkpoint, save_checkpoint
from corpusforge.models.configs import TrainConfig  # noqa: F401 - the config lives with the others, torch-free
from corpusforge.models.rnn import detach_state
from corpusforge.models.zoo import load_state, unique_state_dict

LN2 = math.log(2.0)
# dense bf16 peak FLOP/s by device name (no sparsity); MFU is reported only where we know the peak
PEAK_FLOPS = {"H100": 989e12, "H200": 989e12, "A100": 312e12, "L40S": 362e12, "A10": 125e12, "L4": 121e12}
# torch.compile the model and its loss as one graph (False: the model alone, the loss eager, as before
# 2026-11-27; kept so that benchmarks/lm_gpu.py can measure the difference in one run)
COMPILE_WITH_LOSS = True


@dataclass
class TrainResult:
    step: int
    best_val_loss: float
    metrics: dict[str, float]
    history: list[dict[str, Any]]
    stopped_early: bool = False


class WithLoss(nn.Module):
    """A model and its mean next-token cross-entropy as one module: ``(x, state, y) -> (loss, state)``.

    Compiled as one graph, the cross-entropy is fused into the head's output: the float32 copy of the
    (batch, block, vocab) logits and its log-softmax are never written out (nanoGPT computes its loss
    inside the compiled forward for the same reason). Targets of -100 are ignored (masked models)."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, x: torch.Tensor, state: Any, y: torch.Tensor) -> tuple[torch.Tensor, Any]:
        logits, new_state = self.model(x, state)
        return F.cross_entropy(logits.float().flatten(0, 1), y.flatten()), new_state


# --- small pure helpers ---------------------------------------------------------------------------

def learning_rate(it: int, cfg: TrainConfig) -> float:
    """Linear warmup, then the chosen decay."""
    if it < cfg.warmup_iters:
        return cfg.lr * (it + 1) / (cfg.warmup_iters + 1)
    if cfg.lr_schedule == "constant":
        return cfg.lr
    if cfg.lr_schedule == "step":
        if it < cfg.step_decay_start:
            return cfg.lr
        return cfg.lr * cfg.step_decay_factor ** (1 + (it - cfg.step_decay_start) // cfg.step_decay_every)
    decay_iters = cfg.lr_decay_iters or cfg.max_iters
    if it >= decay_iters:
        return cfg.min_lr
    ratio = (it - cfg.warmup_iters) / max(1, decay_iters - cfg.warmup_iters)
    return cfg.min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (cfg.lr - cfg.min_lr)


def loss_metrics(loss: float, prefix: str) -> dict[str, float]:
    """Mean cross-entropy in nats -> loss, perplexity exp(loss), bits per token loss / ln 2."""
    return {f"{prefix}_loss": loss, f"{prefix}_ppl": math.exp(min(loss, 700.0)), f"{prefix}_bpt": loss / LN2}


def pick_device(name: str = "auto") -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def as_tokens(data: Any) -> np.ndarray:
    arr = np.asarray(data)
    if arr.ndim != 1:
        raise ValueError("token data must be a flat 1-D array of ids")
    return arr


def random_windows(data: np.ndarray, block: int, batch: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """``batch`` random windows of ``block`` tokens and their one-step-shifted targets (nanoGPT)."""
    starts = torch.randint(len(data) - block - 1 + 1, (batch,), generator=gen).numpy()
    rows = starts[:, None] + np.arange(block + 1)
    chunk = torch.from_numpy(data[rows].astype(np.int64))
    return chunk[:, :-1], chunk[:, 1:]


class StreamBatches:
    """Contiguous streams for recurrent models: the data is cut into ``batch`` equal rows and read left to
    right ``block`` steps at a time, so row b of batch k+1 continues row b of batch k."""

    def __init__(self, data: np.ndarray, block: int, batch: int, part: int = 0, parts: int = 1):
        n = (len(data) - 1) // (batch * parts)
        if n <= block:
            raise ValueError(f"a split of {len(data)} tokens is too short for {batch * parts} streams of >{block} tokens")
        rows = range(part * batch, (part + 1) * batch)  # under DDP each rank reads its own rows
        self.x = np.stack([data[b * n: b * n + n] for b in rows])
        self.y = np.stack([data[b * n + 1: b * n + n + 1] for b in rows])
        self.block, self.per_epoch = block, n // block

    def get(self, k: int) -> tuple[torch.Tensor, torch.Tensor, bool]:
        """Batch k (wrapping around); the flag says a new pass starts (the state must be reset)."""
        j = k % self.per_epoch
        s = slice(j * self.block, (j + 1) * self.block)
        return (torch.from_numpy(self.x[:, s].astype(np.int64)), torch.from_numpy(self.y[:, s].astype(np.int64)), j == 0)


@torch.no_grad()
def evaluate(model: nn.Module, data: np.ndarray, block: int, batch: int, max_batches: int = 0,
             device: torch.device | str = "cpu", autocast=contextlib.nullcontext) -> float:
    """Mean next-token cross-entropy (nats) over consecutive windows of the split; deterministic.

    Recurrent models read the split as ``batch`` contiguous streams, carrying their state; window models
    read non-overlapping windows. ``max_batches`` caps the work (0: the whole split). A masked model
    (corpusforge.models.encoder) is scored on the masked tokens instead, with the same masks every time (seed 0)."""
    was_training = model.training
    model.eval()
    total, count = 0.0, 0
    try:
        if getattr(model, "stateful", False):
            streams = StreamBatches(data, block, min(batch, max(1, (len(data) - 1) // (block + 1))))
            n = streams.per_epoch if not max_batches else min(max_batches, streams.per_epoch)
            state = None
            for k in range(n):
                x, y, _ = streams.get(k)
                with autocast():
                    logits, state = model(x.to(device), state)
                total += F.cross_entropy(logits.float().flatten(0, 1), y.to(device).flatten(), reduction="sum").item()
                count += y.numel()
        else:
            masked = getattr(model, "objective", "causal") == "masked"
            mask_gen = torch.Generator().manual_seed(0)
            windows = (len(data) - 1) // block
            starts = np.arange(windows) * block
            if max_batches:
                starts = starts[: max_batches * batch]
            for i in range(0, len(starts), batch):
                rows = starts[i: i + batch, None] + np.arange(block + 1)
                chunk = torch.from_numpy(data[rows].astype(np.int64))
                x, y = chunk[:, :-1], chunk[:, 1:]
                if masked:
                    x, y = model.mask_batch(x, mask_gen)
                x, y = x.to(device), y.to(device)
                with autocast():
                    logits, _ = model(x)
                total += F.cross_entropy(logits.float().flatten(0, 1), y.flatten(), reduction="sum").item()
                count += int((y != -100).sum())
    finally:
        model.train(was_training)
    if count == 0:
        raise ValueError(f"the evaluation split ({len(data)} tokens) is shorter than one window of {block + 1}")
    return total / count


def make_optimizer(model: nn.Module, cfg: TrainConfig, device: torch.device) -> torch.optim.Optimizer:
    params = [p for p in model.parameters() if p.requires_grad]
    if cfg.optimizer == "sgd":
        return torch.optim.SGD(params, lr=cfg.lr)
    # decay matrices and embeddings, not biases and LayerNorm gains (nanoGPT)
    groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": cfg.weight_decay},
              {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
    fused = device.type == "cuda"
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=(cfg.beta1, cfg.beta2), fused=fused)


# --- the loop --------------------------------------------------------------------------------------

def _ddp_env() -> tuple[int, int, int]:
    world = int(os.environ.get("WORLD_SIZE", "1"))
    return world, int(os.environ.get("RANK", "0")), int(os.environ.get("LOCAL_RANK", "0"))


def train(
    model: nn.Module,
    train_data: Any,
    val_data: Any,
    cfg: TrainConfig,
    *,
    on_metrics: Callable[[int, dict[str, float]], None] | None = None,
    on_checkpoint: Callable[[Path], None] | None = None,
    checkpoint_path: Path | None = None,
    resume_from: Path | None = None,
    stop_after: int | None = None,
) -> TrainResult:
    """Train ``model`` in place on flat token arrays. ``stop_after`` ends the run early at that step (with
    a checkpoint), as if interrupted: resuming from it must reach the same weights as never stopping."""
    train_data, val_data = as_tokens(train_data), as_tokens(val_data)
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
    amp_dtype = {"bfloat16": torch.bfloat16, "float16": torch.float16}.get(dtype)
    autocast = (lambda: torch.autocast("cuda", dtype=amp_dtype)) if amp_dtype else contextlib.nullcontext
    scaler = torch.amp.GradScaler("cuda", enabled=(dtype == "float16"))

    torch.manual_seed(cfg.seed + rank)  # dropout stream; the weights were seeded by whoever built the model
    data_gen = torch.Generator().manual_seed(cfg.seed + 1000 * (rank + 1))  # batch sampling stream
    raw_model = model.to(device)
    optimizer = make_optimizer(raw_model, cfg, device)
    stateful = getattr(raw_model, "stateful", False)
    masked = getattr(raw_model, "objective", "causal") == "masked"  # corpusforge.models.encoder: predict masked tokens
    block = raw_model.cfg.block_size
    streams = StreamBatches(train_data, block, cfg.batch_size, rank, world) if stateful else None

    step, best_val, bad_evals, history, carried, best_weights = 0, math.inf, 0, [], None, None
    if resume_from is not None:
        tensors, meta = read_checkpoint(Path(resume_from))
        carried, best_weights, rng = restore_checkpoint(tensors, meta, raw_model, optimizer, device)
        step, best_val, bad_evals, history = meta["step"], meta["best_val"], meta["bad_evals"], meta["history"]
        for past in meta.get("emitted", []):  # replay what the earlier process reported, up to its checkpoint
            emit(int(past["step"]), {k: v for k, v in past.items() if k != "step"})
        torch.set_rng_state(rng["torch"])
        data_gen.set_state(rng["data"])
        if "cuda" in rng and device.type == "cuda":
            torch.cuda.set_rng_state(rng["cuda"], device)

    run_model: nn.Module = WithLoss(torch.compile(raw_model) if cfg.compile and not COMPILE_WITH_LOSS else raw_model)
    if cfg.compile and COMPILE_WITH_LOSS:
        run_model = torch.compile(run_model)
    if ddp:
        from torch.nn.parallel import DistributedDataParallel

        run_model = DistributedDataParallel(run_model, device_ids=[local_rank] if device.type == "cuda" else None)

    flops_per_token = raw_model.flops_per_token(block) if hasattr(raw_model, "flops_per_token") else 0.0
    peak = next((v for k, v in PEAK_FLOPS.items() if device.type == "cuda" and k in torch.cuda.get_device_name(device)), None)
    tokens_per_step = cfg.batch_size * block * cfg.grad_accum * world

    def checkpoint(at: int) -> None:
        if not (checkpoint_path and master):
            return
        rng = {"torch": torch.get_rng_state(), "data": data_gen.get_state()}
        if device.type == "cuda":
            rng["cuda"] = torch.cuda.get_rng_state(device)
        meta = {"step": at, "best_val": best_val, "bad_evals": bad_evals, "history": history,
                "emitted": [e for e in emitted if e["step"] <= at], "train_config": asdict(cfg)}
        path = save_checkpoint(Path(checkpoint_path), raw_model, optimizer, meta, rng, carried, best_weights)
        if on_checkpoint:
            on_checkpoint(path)

    def run_eval(at: int, train_loss: float | None) -> dict[str, float]:
        nonlocal best_val, bad_evals, best_weights
        val = evaluate(raw_model, val_data, block, cfg.batch_size, cfg.eval_iters, device, autocast)
        m = {**loss_metrics(val, "val")}
        if train_loss is not None:
            m["train_loss"] = train_loss
        if val < best_val:
            best_val, bad_evals = val, 0
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
    window_start, window_tokens, train_time = time.perf_counter(), 0, 0.0
    last_loss = None
    while step < cfg.max_iters:
        lr = learning_rate(step, cfg)
        for group in optimizer.param_groups:
            group["lr"] = lr
        t0 = time.perf_counter()
        for micro in range(cfg.grad_accum):
            if stateful:
                x, y, fresh = streams.get(step * cfg.grad_accum + micro)
                if fresh:
                    carried = None  # a new pass over the data: forget the last row's end
            else:
                x, y = random_windows(train_data, block, cfg.batch_size, data_gen)
                if masked:
                    x, y = raw_model.mask_batch(x, data_gen)
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            sync = contextlib.nullcontext() if (not ddp or micro == cfg.grad_accum - 1) else run_model.no_sync()
            with sync, autocast():
                loss, new_state = run_model(x, carried, y)
                loss = loss / cfg.grad_accum
            scaler.scale(loss).backward()
            carried = detach_state(new_state) if stateful else None  # truncated BPTT
        if cfg.grad_clip:
            scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(raw_model.parameters(), cfg.grad_clip)
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)
        step += 1
        train_time += time.perf_counter() - t0
        window_tokens += tokens_per_step

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
    final.update(loss_metrics(best_val if cfg.keep_best else final.get("val_loss", best_val), "val"))
    final["best_val_loss"] = best_val
    final["steps"] = step
    final["tokens_per_s"] = (step - first_step) * tokens_per_step / max(train_time, 1e-9)
    if peak and flops_per_token:
        final["mfu"] = flops_per_token * final["tokens_per_s"] / (peak * world)
    return TrainResult(step, best_val, final, history, stopped_early)
