"""The recurrent family's config (Elman RNN, LSTM, GRU): a plain dataclass, no torch."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from corpusforge.models.configs import FROM_TOKENIZER


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
