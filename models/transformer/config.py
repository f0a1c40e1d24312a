"""The encoder-decoder Transformer's config: a plain dataclass, no torch. Field names follow the 2017 paper
(d_model, d_ff, h = n_head, N = n_enc_layer / n_dec_layer); the defaults are its base model."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from corpusforge.models.configs import FROM_TOKENIZER
from corpusforge.models.seq2seq.config import check_special_ids


@dataclass(frozen=True)
class TransformerConfig:
    """Shape and architecture of an encoder-decoder Transformer."""

    vocab_size: int = field(default=10000, metadata={
        "doc": "Number of token ids, one vocabulary for both sides (set from the tokenizer).", "derived": FROM_TOKENIZER})
    pad_id: int | None = field(default=None, metadata={"doc": "The pad token's id (set from the tokenizer's pad role).",
                                                       "derived": FROM_TOKENIZER})
    bos_id: int | None = field(default=None, metadata={"doc": "The bos token's id: the decoder's first input.",
                                                       "derived": FROM_TOKENIZER})
    eos_id: int | None = field(default=None, metadata={"doc": "The eos token's id: ends a translation.",
                                                       "derived": FROM_TOKENIZER})
    d_model: int = field(default=512, metadata={"doc": "Model width."})
    n_head: int = field(default=8, metadata={"doc": "Attention heads; must divide d_model."})
    n_enc_layer: int = field(default=6, metadata={"doc": "Encoder layers."})
    n_dec_layer: int = field(default=6, metadata={"doc": "Decoder layers."})
    d_ff: int = field(default=2048, metadata={"doc": "Inner width of the position-wise feed-forward network."})
    dropout: float = field(default=0.1, metadata={
        "doc": "Dropout on each sub-layer's output (before the residual add) and on embeddings + positions."})
    attention_dropout: float = field(default=0.0, metadata={"doc": "Dropout on the attention weights (the paper: none)."})
    norm: Literal["post", "pre"] = field(default="post", metadata={
        "doc": "post: LayerNorm(x + sublayer(x)), the paper's Add & Norm; pre: x + sublayer(LayerNorm(x)), plus a "
               "final LayerNorm (trains deeper stacks without a long warmup)."})
    positional: Literal["sinusoidal", "learned"] = field(default="sinusoidal", metadata={
        "doc": "Sinusoidal encodings (the paper) or learned position embeddings."})
    activation: Literal["relu", "gelu"] = field(default="relu", metadata={"doc": "Feed-forward non-linearity."})
    bias: bool = field(default=True, metadata={"doc": "Biases in the linear layers and LayerNorms."})
    share_embeddings: bool = field(default=True, metadata={
        "doc": "One embedding matrix for source and target tokens (one joint vocabulary, as the paper's BPE)."})
    tie_output: bool = field(default=True, metadata={"doc": "The output projection is the target embedding, transposed."})
    max_len: int = field(default=256, metadata={"doc": "Positions: the longest source or target (longer ones are "
                                                       "cut in training) and the longest decode."})

    def __post_init__(self) -> None:
        for name in ("vocab_size", "d_model", "n_head", "n_enc_layer", "n_dec_layer", "d_ff", "max_len"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}: must be >= 1, got {getattr(self, name)}")
        if self.d_model % self.n_head:
            raise ValueError(f"n_head: must divide d_model ({self.d_model}), got {self.n_head}")
        if self.positional == "sinusoidal" and self.d_model % 2:
            raise ValueError("positional: sinusoidal needs an even d_model")
        for name in ("dropout", "attention_dropout"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise ValueError(f"{name}: must be in [0, 1), got {getattr(self, name)}")
        check_special_ids(self)
