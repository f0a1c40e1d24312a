"""The GPT family's config: a plain dataclass, no torch (validating a pipeline config never imports torch)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from corpusforge.models.configs import FROM_TOKENIZER


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
