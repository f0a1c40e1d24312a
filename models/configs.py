"""The model families' configs and the training config: plain dataclasses, no torch.

The lm stage's config (corpusforge.tasks.lm.config) is typed with these, so validating a pipeline config never
imports torch; the model modules import their config from here."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

# vocab_size is set from the tokenizer: a config file may not set it (tasks.config: "derived")
FROM_TOKENIZER = "set from the tokenizer"


@dataclass(frozen=True)
class GPTConfig:
    """Shape and architecture of a GPT decoder."""

    vocab_size: int = field(default=65, metadata={"doc": "Number of token ids (set from the tokenizer).", "derived": FROM_TOKENIZER})
    block_size: int = field(default=256, metadata={"doc": "Context length in tokens."})
    n_layer: int = field(default=6, metadata={"doc": "Transformer blocks."})
    n_head: int = field(default=6, metadata={"doc": "Attention heads per block; must divide n_embd."})
    n_embd: int = field(default=384, metadata={"doc": "Model width d_model."})
    dropout: float = field(default=0.0, metadata={"doc": "Dropout on embeddings, attention weights and residuals."})
    bias: bool = field(default=False, metadata={"doc": "Biases in Linear and LayerNorm layers (GPT-2: true)."})
    positional: Literal["learned", "sinusoidal", "rope", "alibi"] = field(
        default="learned", metadata={"doc": "How positions enter: learned, sinusoidal, rope or alibi."})
    norm: Literal["pre", "post"] = field(default="pre", metadata={"doc": "LayerNorm before (pre) or after (post) each sublayer."})
    activation: Literal["gelu", "relu"] = field(default="gelu", metadata={"doc": "Feed-forward non-linearity."})
    tie_weights: bool = field(default=True, metadata={"doc": "Share the token embedding with the output head."})
    rope_base: float = field(default=10000.0, metadata={"doc": "RoPE frequency base."})

    def __post_init__(self) -> None:
        for name in ("vocab_size", "block_size", "n_layer", "n_head", "n_embd"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}: must be >= 1, got {getattr(self, name)}")
        if self.n_embd % self.n_head:
            raise ValueError(f"n_head: must divide n_embd ({self.n_embd}), got {self.n_head}")
        if self.positional == "rope" and (self.n_embd // self.n_head) % 2:
            raise ValueError("positional: rope needs an even head size (n_embd / n_head)")
        if self.positional == "sinusoidal" and self.n_embd % 2:
            raise ValueError("positional: sinusoidal needs an even n_embd")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout: must be in [0, 1), got {self.dropout}")


@dataclass(frozen=True)
class EncoderConfig(GPTConfig):
    """GPTConfig's shape and architecture fields, plus the masking rate."""

    mask_prob: float = field(default=0.15, metadata={"doc": "Share of positions chosen for the masked-LM loss."})

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 0.0 < self.mask_prob < 1.0:
            raise ValueError(f"mask_prob: must be in (0, 1), got {self.mask_prob}")


@dataclass(frozen=True)
class RNNConfig:
    """Shape of a recurrent LM (or encoder)."""

    cell: Literal["rnn", "lstm", "gru"] = field(default="lstm", metadata={"doc": "Elman RNN, LSTM or GRU."})
    impl: Literal["fused", "ours"] = field(default="fused", metadata={"doc": "torch.nn fused modules or our readable cells."})
    vocab_size: int = field(default=10000, metadata={"doc": "Number of token ids (set from the tokenizer).", "derived": FROM_TOKENIZER})
    block_size: int = field(default=35, metadata={"doc": "Truncated-BPTT length: time steps per batch."})
    n_embd: int = field(default=200, metadata={"doc": "Embedding size."})
    n_hidden: int = field(default=200, metadata={"doc": "Hidden units per layer."})
    n_layer: int = field(default=2, metadata={"doc": "Stacked recurrent layers."})
    dropout: float = field(default=0.0, metadata={"doc": "Dropout on embeddings, between layers and before the head."})
    tie_weights: bool = field(default=False, metadata={"doc": "Share embedding and output weights (needs n_embd == n_hidden)."})
    init_range: float = field(default=0.0, metadata={"doc": "If > 0, init every weight uniform in [-r, r] (Zaremba: 0.1 / 0.05)."})
    gru_reset: Literal["after", "before"] = field(
        default="after", metadata={"doc": "GRU reset gate after the recurrent matmul (torch/cuDNN) or before it (Cho 2014, impl=ours only)."})

    def __post_init__(self) -> None:
        for name in ("vocab_size", "block_size", "n_embd", "n_hidden", "n_layer"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}: must be >= 1, got {getattr(self, name)}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout: must be in [0, 1), got {self.dropout}")
        if self.tie_weights and self.n_embd != self.n_hidden:
            raise ValueError(f"tie_weights: needs n_embd == n_hidden, got {self.n_embd} and {self.n_hidden}")
        if self.gru_reset == "before" and self.impl == "fused":
            raise ValueError("gru_reset: 'before' (the textbook GRU) exists only with impl: ours")


@dataclass(frozen=True)
class NPLMConfig:
    """Shape of a Bengio neural probabilistic LM."""

    vocab_size: int = field(default=10000, metadata={"doc": "Number of token ids (set from the tokenizer).", "derived": FROM_TOKENIZER})
    context: int = field(default=5, metadata={"doc": "Context words n-1 (the paper's best PTB-sized runs use 4-5)."})
    n_embd: int = field(default=60, metadata={"doc": "Embedding size m."})
    n_hidden: int = field(default=100, metadata={"doc": "Hidden tanh units h."})
    direct: bool = field(default=True, metadata={"doc": "The direct connection W x from embeddings to outputs."})
    dropout: float = field(default=0.0, metadata={"doc": "Dropout on the concatenated embeddings and the hidden layer."})
    block_size: int = field(default=64, metadata={"doc": "Positions per training sequence (predictions still see only `context`)."})

    def __post_init__(self) -> None:
        for name in ("vocab_size", "context", "n_embd", "n_hidden", "block_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}: must be >= 1, got {getattr(self, name)}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout: must be in [0, 1), got {self.dropout}")


@dataclass(frozen=True)
class TrainConfig:
    """How to train: optimiser, schedule, batches, evaluation, checkpoints, precision."""

    max_iters: int = field(default=2000, metadata={"doc": "Optimiser steps."})
    batch_size: int = field(default=12, metadata={"doc": "Sequences per micro-batch (per GPU under DDP)."})
    grad_accum: int = field(default=1, metadata={"doc": "Micro-batches per optimiser step."})
    optimizer: Literal["adamw", "sgd"] = field(default="adamw", metadata={"doc": "AdamW, or plain SGD (Zaremba et al.)."})
    lr: float = field(default=1e-3, metadata={"doc": "Peak learning rate."})
    min_lr: float = field(default=1e-4, metadata={"doc": "Learning rate at the end of the cosine decay."})
    lr_schedule: Literal["cosine", "constant", "step"] = field(default="cosine", metadata={"doc": "After warmup: cosine to min_lr, constant, or step decay."})
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
    cpu_threads: int = field(default=0, metadata={"identity": False,  # speed only: not in the artifact id
        "doc": "CPU only: torch intra-op threads (0: torch's default). On a machine shared with other jobs, 1 can "
               "be many times faster than spinning threads that fight over cores (see OMP_WAIT_POLICY in README)."})

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


FAMILY_CONFIGS: dict[str, type] = {"gpt": GPTConfig, "rnn": RNNConfig, "nplm": NPLMConfig, "encoder": EncoderConfig}
