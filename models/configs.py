"""The training config (a plain dataclass, no torch) and the marker of fields a tokenizer sets.

Each family's own config lives in its folder (models/<family>/config.py, corpusforge.models.family); the stages'
configs are typed with these, so validating a pipeline config never imports torch."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Literal

# vocab_size and special-token ids are set from the tokenizer: a config file may not set them (tasks.config: "derived")
FROM_TOKENIZER = "set from the tokenizer"


@dataclass(frozen=True)
class TrainConfig:
    """How to train: optimiser, schedule, batches, evaluation, checkpoints, precision."""

    max_iters: int = field(default=2000, metadata={"doc": "Optimiser steps."})
    batch_size: int = field(default=12, metadata={"doc": "Sequences per micro-batch (per GPU under DDP)."})
    grad_accum: int = field(default=1, metadata={"doc": (
        "Micro-batches per optimiser step, over all processes: with train.processes N each runs grad_accum / N of "
        "them (nanoGPT's rule), so a step is the same batch, and the model the same, for any N.")})
    optimizer: Literal["adamw", "sgd"] = field(default="adamw", metadata={"doc": "AdamW, or plain SGD (Zaremba et al.)."})
    lr: float = field(default=1e-3, metadata={"doc": "Peak learning rate."})
    min_lr: float = field(default=1e-4, metadata={"doc": "Learning rate at the end of the cosine decay."})
    lr_schedule: Literal["cosine", "constant", "step", "noam"] = field(default="cosine", metadata={
        "doc": "After warmup: cosine to min_lr, constant, step decay, or noam (the inverse square root, lr * "
               "sqrt(warmup_iters / step): Vaswani et al. 2017's schedule with lr = d_model^-0.5 * warmup^-0.5)."})
    warmup_iters: int = field(default=100, metadata={"doc": "Linear warmup steps."})
    lr_decay_iters: int = field(default=0, metadata={"doc": "Cosine ends here (0: at max_iters)."})
    step_decay_start: int = field(default=0, metadata={"doc": "step schedule: first decay at this step."})
    step_decay_every: int = field(default=1000, metadata={"doc": "step schedule: decay again every this many steps."})
    step_decay_factor: float = field(default=0.5, metadata={"doc": "step schedule: multiply the rate by this."})
    weight_decay: float = field(default=0.1, metadata={"doc": "AdamW decoupled weight decay (matrices only)."})
    beta1: float = field(default=0.9, metadata={"doc": "AdamW beta1."})
    beta2: float = field(default=0.99, metadata={"doc": "AdamW beta2."})
    grad_clip: float = field(default=1.0, metadata={"doc": "Clip the global gradient norm to this (0: off)."})
    eval_interval: int = field(default=250, metadata={"doc": "Evaluate every this many steps (and at the end)."})
    eval_iters: int = field(default=200, metadata={"doc": "Batches per evaluation (0: the whole split)."})
    log_interval: int = field(default=10, metadata={"doc": "Report train loss, lr and speed every this many steps."})
    early_stopping_patience: int = field(default=0, metadata={"doc": "Stop after this many evaluations without improvement (0: never)."})
    keep_best: bool = field(default=True, metadata={"doc": "End with the weights of the best evaluation, not the last step."})
    seed: int = field(default=1337, metadata={"doc": "Seeds weights, batches and dropout."})
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = field(
        default="auto", metadata={"doc": "Autocast dtype on CUDA (auto: bf16 where supported); CPU always float32."})
    compile: bool = field(default=False, metadata={"doc": "torch.compile the model."})
    device: str = field(default="auto", metadata={"doc": "auto (CUDA when present), cpu, cuda, cuda:N."})
    processes: int | Literal["auto"] = field(default=1, metadata={"identity": False,  # the same model for any N: not in the id
        "doc": "Training processes (data parallel, torch.distributed: nccl on GPUs, gloo on CPU), started by the "
               "step's task with torch's elastic launch (what torchrun runs), or by Ray Train when runner.kind is ray; "
               "auto: one per visible GPU (1 without one). Must divide train.grad_accum. The artifact id does not "
               "depend on it; the manifest records it."})
    strategy: Literal["ddp", "fsdp"] = field(default="ddp", metadata={"identity": False,
        "doc": "With train.processes > 1: ddp (every process holds the whole model; gradients all-reduced) or fsdp "
               "(FSDP2, torch.distributed.fsdp.fully_shard: each layer's weights, gradients and optimizer state "
               "sharded over the processes, for models that do not fit one device; checkpoints and the artifact are "
               "gathered to whole tensors, which load in one process)."})
    timeout: float = field(default=1800.0, metadata={"identity": False,
        "doc": "With train.processes > 1: seconds a process waits for the others at a collective before the step "
               "fails (a rank that hangs), naming the rank."})
    cpu_threads: int = field(default=0, metadata={"identity": False,  # speed only: not in the artifact id
        "doc": "CPU only: torch intra-op threads (0: torch's default). On a machine shared with other jobs, 1 can "
               "be many times faster than spinning threads that fight over cores (the corpusforge command sets "
               "OMP_WAIT_POLICY=PASSIVE; docs: the lm guide, 'CPU threads')."})

    def __post_init__(self) -> None:
        for name in ("max_iters", "batch_size", "grad_accum", "eval_interval", "log_interval"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}: must be >= 1, got {getattr(self, name)}")
        for name in ("cpu_threads", "warmup_iters", "lr_decay_iters", "eval_iters", "early_stopping_patience", "step_decay_start"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name}: must be >= 0, got {getattr(self, name)}")
        if self.lr <= 0 or self.min_lr < 0 or self.min_lr > self.lr:
            raise ValueError(f"lr: need 0 <= min_lr <= lr and lr > 0, got lr={self.lr} min_lr={self.min_lr}")
        if self.grad_clip < 0:
            raise ValueError(f"grad_clip: must be >= 0, got {self.grad_clip}")
        if self.processes != "auto":
            if isinstance(self.processes, bool) or not isinstance(self.processes, int) or self.processes < 1:
                raise ValueError(f"processes: a number >= 1 or auto, got {self.processes!r}")
            if self.grad_accum % self.processes:
                raise ValueError(
                    f"processes: {self.processes} processes cannot share grad_accum {self.grad_accum} micro-batches "
                    f"evenly; set train.grad_accum to a multiple of {self.processes} (a step is grad_accum "
                    "micro-batches of batch_size, split over the processes: the same model for any number of them)")
        if self.timeout <= 0:
            raise ValueError(f"timeout: must be > 0 seconds, got {self.timeout}")


# the targets a LoRA section names when it names none are the family's (corpusforge.models.family:
# FamilySpec.lora_targets; GPT's are its fused q,k,v and output projections). Before families declared them, this
# tuple was the default itself: an unnamed default still enters an artifact's id under it, so the ids made then stay.
LORA_DEFAULT_TARGETS: tuple[str, ...] = ("attn.c_attn", "attn.c_proj")


def _targets_identity(cfg: Any, value: Any) -> list[str]:
    return list(LORA_DEFAULT_TARGETS if value is None else value)


@dataclass(frozen=True)
class LoraSettings:
    """LoRA adapters (Hu et al. 2021): W stays frozen, h = Wx + (alpha / r) * B A x with B = 0 at the start
    (corpusforge.models.lora). ``to_dict`` is JSON (an adapter artifact's config.json)."""

    r: int = field(default=8, metadata={"doc": "Rank of the update B A."})
    alpha: float = field(default=16.0, metadata={"doc": "Scale numerator: the update is multiplied by alpha / r."})
    dropout: float = field(default=0.0, metadata={"doc": "Dropout on the adapter's input."})
    targets: tuple[str, ...] | None = field(default=None, metadata={
        "identity_value": _targets_identity,
        "doc": "Linear layers to adapt, by name suffix; null: the family's (its spec's lora_targets: the attention "
               "projections, attn.c_attn (the fused q,k,v) and attn.c_proj for gpt and the BERT-bodied families, "
               "W_q and W_v for the encoder-decoder transformer). Others: mlp.c_fc, mlp.c_proj."})
    train_norms: bool = field(default=False, metadata={
        "doc": "Also train every LayerNorm's gain and bias beside the adapters (a few thousand parameters; they are "
               "saved in the adapter artifact and folded in by the merge). Lets a small model shift its output "
               "distribution, which adapters on the attention projections alone barely move."})

    def __post_init__(self) -> None:
        if self.targets is not None:
            object.__setattr__(self, "targets", tuple(self.targets))
        if self.r < 1:
            raise ValueError(f"r: must be >= 1, got {self.r}")
        if self.alpha <= 0:
            raise ValueError(f"alpha: must be > 0, got {self.alpha}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout: must be in [0, 1), got {self.dropout}")
        if self.targets is not None and not self.targets:
            raise ValueError("targets: name at least one Linear layer (or null: the family's)")
        for t in self.targets or ():
            if ":" in t:
                raise ValueError(
                    f"targets: {t!r}: adapting only some of a fused projection's outputs (q and v apart in c_attn) is "
                    "not supported; c_attn packs q, k, v in one matrix and an adapter on it adapts all three. "
                    "Separate (A_q, B_q), (A_v, B_v) need split projections in the model.")

    def for_family(self, family: Any) -> LoraSettings:
        """These settings with ``targets`` named: the family's (its FamilySpec's ``lora_targets``) when null. A
        family that names none needs them given: a one-line error says so."""
        if self.targets is not None:
            return self
        if not family.lora_targets:
            raise ValueError(f"targets: the {family.name} family names no LoRA targets (no Linear layers it adapts "
                             "by default); give lora.targets, Linear module name suffixes")
        return dataclasses.replace(self, targets=tuple(family.lora_targets))

    def to_dict(self) -> dict:
        if self.targets is None:
            raise ValueError("LoRA settings without targets: resolve them for the family first (for_family)")
        out = {"r": self.r, "alpha": self.alpha, "dropout": self.dropout, "targets": list(self.targets)}
        if self.train_norms:  # only when set: adapters made before the option keep their config (and ids)
            out["train_norms"] = True
        return out

