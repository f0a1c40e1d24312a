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
- data parallel on N processes (DDP, or FSDP2 with ``strategy: fsdp``: corpusforge.models.sharding) when started by
  torch's elastic launch or
  Ray Train (corpusforge.tasks.launch; WORLD_SIZE > 1, or a process group already set up): a step's ``grad_accum``
  micro-batches are drawn in one order by every process and split over them (process r runs micro-batches r, r + N,
  ...), and the dropout of each micro-batch is seeded by its number, so the weights are the same (within float
  rounding) for any N that divides ``grad_accum``, and a checkpoint resumes on another N; rank 0 evaluates, reports
  and saves;
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
    return device.type == "cuda" and all(p.is_floating_point() and not p.is_sparse and type(p).__name__ != "DTensor"
                                         for p in params)


# --- the loop --------------------------------------------------------------------------------------

def _ddp_env() -> tuple[int, int, int]:
    """(world size, rank, local rank): of the process group when one is set up (Ray Train does), else from the
    environment torch's elastic launch (torchrun) sets."""
    import torch.distributed as dist

    local = int(os.environ.get("LOCAL_RANK", "0"))
    if dist.is_available() and dist.is_initialized():
        return dist.get_world_size(), dist.get_rank(), local
    return int(os.environ.get("WORLD_SIZE", "1")), int(os.environ.get("RANK", "0")), local


def micro_seed(seed: int, index: int) -> int:
    """The dropout seed of micro-batch ``index`` (a running count over the run): the same whichever process runs it,
    so the number of processes does not change the model, and a resumed run needs no saved dropout stream."""
    return (seed * 1_000_003 + index * 7_919 + 1) % (2**63 - 1)


def _device_for(local_rank: int, cfg: TrainConfig) -> torch.device:
    """A rank's device: GPU ``local_rank`` (modulo the GPUs visible: ranks may share one), else the CPU."""
    if torch.cuda.is_available() and cfg.device != "cpu":
        return torch.device(f"cuda:{local_rank % torch.cuda.device_count()}")
    return torch.device("cpu")


def _init_group(cfg: TrainConfig, local_rank: int) -> None:
    """The process group of an elastic launch: nccl when every rank has a GPU of its own, gloo otherwise (CPU, or
    ranks sharing a GPU, which nccl refuses); collectives time out after ``cfg.timeout`` seconds (a hung rank)."""
    import datetime

    import torch.distributed as dist

    world = int(os.environ.get("WORLD_SIZE", "1"))
    own_gpu = torch.cuda.is_available() and cfg.device != "cpu" and torch.cuda.device_count() >= world
    dist.init_process_group(backend="nccl" if own_gpu else "gloo",
                            timeout=datetime.timedelta(seconds=cfg.timeout))


def micro_weights(terms: Sequence[int | None]) -> list[float]:
    """Each micro-batch's weight in its step: ``terms_i * k / (the step's terms)`` for the step's ``k`` micro-batches
    (all of them, on every rank: each rank draws the whole step), so that (with the trainer's division by the
    micro-batches a rank runs, and DDP's mean over ranks) the step's gradient is that of the mean loss over every term
    (token, example) of the step, not the mean of per-micro-batch means: with padded, length-bucketed batches two
    micro-batches of 10 and 30 target tokens weigh 1:3, as the same 40 tokens in one batch do. Every weight is
    exactly 1.0 when all micro-batches have as many terms (fixed-size token windows), and when a loss declares none
    (``Batch.terms`` None)."""
    if any(t is None for t in terms) or not terms:
        return [1.0] * len(terms)
    total = sum(int(t) for t in terms)
    if total == 0:
        return [1.0] * len(terms)
    return [int(t) * len(terms) / total for t in terms]


def _check_in_sync(model: nn.Module, device: torch.device, world: int) -> None:
    """Every rank ends with the same weights, bit for bit (DDP's averaged gradients, the same optimizer steps): a
    digest of each rank's weights is gathered, and a difference fails the run, naming the ranks."""
    import hashlib

    import torch.distributed as dist

    digest = hashlib.sha256()
    for name, tensor in sorted(unique_state_dict(model).items()):
        digest.update(name.encode())
        digest.update(tensor.detach().cpu().contiguous().view(-1).view(torch.uint8).numpy().tobytes())
    mine = torch.tensor([int.from_bytes(digest.digest()[:7], "little")], dtype=torch.int64, device=device)
    every = [torch.zeros_like(mine) for _ in range(world)]
    dist.all_gather(every, mine)
    values = [int(t.item()) for t in every]
    if len(set(values)) > 1:
        apart = [r for r, v in enumerate(values) if v != values[0]]
        raise RuntimeError(f"the ranks ended with different weights (ranks {apart} differ from rank 0)")


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
            _init_group(cfg, local_rank)
        device = _device_for(local_rank, cfg)
        if device.type == "cuda":
            torch.cuda.set_device(device)
        if cfg.grad_accum % world:
            raise ValueError(f"train.grad_accum {cfg.grad_accum} is not a multiple of the {world} processes")
        if getattr(objective, "carries_state", False):
            raise ValueError(f"the {type(objective).__name__} objective reads its streams in one order, carrying the "
                             "recurrent state from batch to batch: it trains on one process (train.processes: 1)")
    else:
        device = pick_device(cfg.device)
    per_rank = cfg.grad_accum // world  # this process's micro-batches per step
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

    torch.manual_seed(cfg.seed)  # the weights were seeded by whoever built the model; dropout: micro_seed
    data_gen = torch.Generator().manual_seed(cfg.seed + 1000)  # batch sampling: one stream, the same on every rank
    raw_model = model.to(device)
    fsdp = ddp and cfg.strategy == "fsdp"
    if fsdp:  # the layers sharded over the ranks, the rest kept whole (corpusforge.models.sharding)
        from corpusforge.models import sharding

        sharding.shard(raw_model)
    optimizer = make_optimizer(raw_model, cfg, device)
    objective.setup(raw_model, cfg.batch_size)  # the whole data on every rank: the trainer splits the steps
    if not (objective.has_split("valid") or objective.has_split("test")):
        raise ValueError("training needs a valid (or test) split to evaluate on")
    eval_split = "valid" if objective.has_split("valid") else "test"

    step, best_val, bad_evals, history, carried, best_weights = 0, math.inf, 0, [], None, None
    best_metrics: dict[str, float] = {}
    if resume_from is not None:
        tensors, meta = read_checkpoint(Path(resume_from))
        carried, best_weights, rng = restore_checkpoint(tensors, meta, raw_model, optimizer, device, sharded=fsdp)
        if fsdp and best_weights is not None:  # kept as this rank's shards, as the run keeps them
            current = raw_model.state_dict()
            best_weights = {k: sharding.shaped_like(v, current[k]) for k, v in best_weights.items() if k in current}
        step, best_val, bad_evals, history = meta["step"], meta["best_val"], meta["bad_evals"], meta["history"]
        if master and int(meta.get("world", 1)) != world:
            print(f"corpusforge: resuming a checkpoint of {meta.get('world', 1)} process(es) on {world}: the same "
                  "micro-batches and dropout follow (float rounding aside)", file=sys.stderr)
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
    if ddp and not fsdp:
        from torch.nn.parallel import DistributedDataParallel

        # some models leave weights out of a forward (a tagger's unused head, a char CNN on a batch without
        # characters): DDP must look for them, or the next step fails
        run_model = DistributedDataParallel(run_model, device_ids=[device.index] if device.type == "cuda" else None,
                                            find_unused_parameters=True)

    flops_per_token = objective.flops_per_token(raw_model)
    peak = next((v for k, v in PEAK_FLOPS.items() if device.type == "cuda" and k in torch.cuda.get_device_name(device)), None)

    def checkpoint(at: int) -> None:
        if not checkpoint_path:
            return
        gathered: dict[str, Any] = {}
        if fsdp:  # whole tensors (every rank joins the gathers); rank 0 writes what a one-process run writes
            gathered = {"weights": sharding.gathered_state(raw_model),
                        "optimizer_state": sharding.full_optimizer_state(optimizer)}
            best = sharding.full_state(best_weights) if best_weights is not None else None
        if not master:
            return
        rng = {"torch": torch.get_rng_state(), "data": data_gen.get_state()}
        if device.type == "cuda":
            rng["cuda"] = torch.cuda.get_rng_state(device)
        meta = {"step": at, "best_val": best_val, "bad_evals": bad_evals, "history": history,
                "best_metrics": best_metrics, "world": world,
                "emitted": [e for e in emitted if e["step"] <= at], "train_config": asdict(cfg)}
        path = save_checkpoint(Path(checkpoint_path), raw_model, optimizer, meta, rng, carried,
                               best if fsdp else best_weights, **gathered)
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
                kept = raw_model.state_dict() if fsdp else unique_state_dict(raw_model)
                best_weights = {k: v.detach().clone() for k, v in kept.items()}
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
        # the step's micro-batches, all drawn in one order by every rank (their terms weigh their losses); this rank
        # runs micro-batches rank, rank + world, ...: the step is the same for any number of processes
        first = step * cfg.grad_accum
        batches = [objective.batch(first + micro, data_gen) for micro in range(cfg.grad_accum)]
        weights = micro_weights([b.terms for b in batches])
        step_tokens = sum(b.tokens for b in batches)
        step_loss = torch.zeros((), device=device)
        mine = range(rank, cfg.grad_accum, world)
        for n, micro in enumerate(mine):
            batch = batches[micro]
            if batch.fresh:
                carried = None  # a new pass over the data: forget the last row's end
            tensors = [t.to(device, non_blocking=True) for t in batch.tensors]
            last = n == per_rank - 1
            sync = run_model.no_sync() if (ddp and not fsdp and not last) else contextlib.nullcontext()
            torch.manual_seed(micro_seed(cfg.seed, first + micro))
            with sync, autocast():
                loss, new_state = run_model(*tensors, carried)
                if weights[micro] != 1.0:  # 1.0 when every micro-batch has as many terms: the arithmetic of before
                    loss = loss * weights[micro]
                loss = loss / per_rank
            scaler.scale(loss).backward()
            step_loss += loss.detach()
            carried = objective.carry(new_state)  # truncated BPTT detaches it; others carry nothing
        if fsdp:  # FSDP reduced the layers' gradients; the whole weights' are averaged here
            sharding.sync_replicated(raw_model.parameters(), world)
        if cfg.grad_clip:
            scaler.unscale_(optimizer)
            if fsdp:
                sharding.clip_grad_norm(raw_model.parameters(), cfg.grad_clip)
            else:
                torch.nn.utils.clip_grad_norm_(raw_model.parameters(), cfg.grad_clip)
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)
        step += 1
        train_time += time.perf_counter() - t0
        window_tokens += step_tokens
        run_tokens += step_tokens

        if step % cfg.log_interval == 0 or step == cfg.max_iters:
            if ddp:  # the step's loss over every rank's terms: each rank holds world x its share
                import torch.distributed as dist

                dist.all_reduce(step_loss)
                step_loss /= world
            last_loss = step_loss.item()  # the only host sync in the loop
            elapsed = time.perf_counter() - window_start
            tps = window_tokens / max(elapsed, 1e-9)
            m = {"train_loss": last_loss, "lr": lr, "tokens_per_s": tps}
            if peak and flops_per_token:
                m["mfu"] = flops_per_token * tps / (peak * world)
            emit(step, m)
            window_start, window_tokens = time.perf_counter(), 0
        if (master or fsdp) and (step % cfg.eval_interval == 0 or step == cfg.max_iters):  # fsdp: every rank
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

    if ddp and not fsdp:
        _check_in_sync(raw_model, device, world)
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
    if first_step:
        final["resumed_from_step"] = first_step
    final["tokens_per_s"] = run_tokens / max(train_time, 1e-9)
    if peak and flops_per_token:
        final["mfu"] = flops_per_token * final["tokens_per_s"] / (peak * world)
    return TrainResult(step, best_val, final, history, stopped_early)
