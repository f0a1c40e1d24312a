"""The NPLM family's config (Bengio et al. 2003): a plain dataclass, no torch."""

from __future__ import annotations

from dataclasses import dataclass, field

from corpusforge.models.configs import FROM_TOKENIZER


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
    pad_id: int = field(default=0, metadata={
        "doc": "The id standing for the context before a sequence's first token (set from the tokenizer: its pad "
               "token, else its end-of-text token).", "derived": FROM_TOKENIZER})

    def __post_init__(self) -> None:
        for name in ("vocab_size", "context", "n_embd", "n_hidden", "block_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}: must be >= 1, got {getattr(self, name)}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout: must be in [0, 1), got {self.dropout}")
        if not 0 <= self.pad_id < self.vocab_size:
            raise ValueError(f"pad_id: must be a token id below vocab_size {self.vocab_size}, got {self.pad_id}")
