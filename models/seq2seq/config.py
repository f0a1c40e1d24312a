"""The RNN encoder-decoder's config: a plain dataclass, no torch (validating a pipeline config never imports torch)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from corpusforge.models.configs import FROM_TOKENIZER


@dataclass(frozen=True)
class Seq2SeqConfig:
    """Shape of an RNN encoder-decoder; ``attention`` chooses how the decoder reads the source."""

    vocab_size: int = field(default=10000, metadata={
        "doc": "Number of token ids, one vocabulary for both sides (set from the tokenizer).", "derived": FROM_TOKENIZER})
    pad_id: int | None = field(default=None, metadata={"doc": "The pad token's id (set from the tokenizer's pad role).",
                                                       "derived": FROM_TOKENIZER})
    bos_id: int | None = field(default=None, metadata={"doc": "The bos token's id: the decoder's first input.",
                                                       "derived": FROM_TOKENIZER})
    eos_id: int | None = field(default=None, metadata={"doc": "The eos token's id: ends a translation.",
                                                       "derived": FROM_TOKENIZER})
    cell: Literal["gru", "lstm"] = field(default="gru", metadata={"doc": "GRU or LSTM, encoder and decoder."})
    attention: Literal["none", "bahdanau", "luong-dot", "luong-general"] = field(default="bahdanau", metadata={
        "doc": "none (the source as one fixed vector: the bottleneck baseline), bahdanau (additive, queried by the "
               "previous decoder state), luong-dot or luong-general (multiplicative, queried by the current state)."})
    n_embd: int = field(default=256, metadata={"doc": "Embedding size (source and target each have their own)."})
    n_hidden: int = field(default=512, metadata={"doc": "Encoder hidden units per direction."})
    dec_hidden: int = field(default=0, metadata={
        "doc": "Decoder hidden units (0: the encoder's output width, n_hidden x directions; luong-dot needs that)."})
    n_layer: int = field(default=1, metadata={"doc": "Stacked recurrent layers, in the encoder and in the decoder."})
    bidirectional: bool = field(default=True, metadata={"doc": "Read the source in both directions."})
    dropout: float = field(default=0.0, metadata={"doc": "Dropout on embeddings, between layers and before the head."})
    teacher_forcing: float = field(default=1.0, metadata={
        "doc": "Training: the chance that a decoder step reads the true previous token rather than its own greedy "
               "guess (1.0: always the true one; drawn once per step for the batch)."})
    max_len: int = field(default=128, metadata={"doc": "Longest sequence trained on (longer ones are cut) and decoded."})

    @property
    def memory_width(self) -> int:
        """Width of the encoder's outputs (what attention reads)."""
        return self.n_hidden * (2 if self.bidirectional else 1)

    @property
    def decoder_width(self) -> int:
        return self.dec_hidden or self.memory_width

    def __post_init__(self) -> None:
        for name in ("vocab_size", "n_embd", "n_hidden", "n_layer", "max_len"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}: must be >= 1, got {getattr(self, name)}")
        if self.dec_hidden < 0:
            raise ValueError(f"dec_hidden: must be >= 0, got {self.dec_hidden}")
        if self.attention == "luong-dot" and self.decoder_width != self.memory_width:
            raise ValueError(f"dec_hidden: luong-dot scores q . h_j, so the decoder must be as wide as the encoder's "
                             f"outputs ({self.memory_width}), got {self.dec_hidden}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout: must be in [0, 1), got {self.dropout}")
        if not 0.0 <= self.teacher_forcing <= 1.0:
            raise ValueError(f"teacher_forcing: must be in [0, 1], got {self.teacher_forcing}")
        check_special_ids(self)


def check_special_ids(cfg) -> None:
    """pad/bos/eos are ids inside the vocabulary when set (None until the tokenizer sets them)."""
    for name in ("pad_id", "bos_id", "eos_id"):
        value = getattr(cfg, name)
        if value is not None and not 0 <= value < cfg.vocab_size:
            raise ValueError(f"{name}: must be a token id below vocab_size {cfg.vocab_size}, got {value}")
