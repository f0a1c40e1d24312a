"""The sentence encoder's config: BERT's shape (taken from a pre-trained checkpoint when it starts from one), the
pooling, and the in-batch contrastive loss's scale; a plain dataclass, no torch."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from corpusforge.models.configs import FROM_TOKENIZER
from corpusforge.models.gpt.config import GPTConfig


@dataclass(frozen=True)
class SBertConfig(GPTConfig):
    """GPTConfig's shape fields (without the causal mask), segments, the pooling and the loss."""

    type_vocab_size: int = field(default=2, metadata={"doc": "Segment embeddings (2, as BERT's)."})
    pooling: Literal["mean", "max", "cls"] = field(default="mean", metadata={
        "doc": "One vector per sentence from its token states: mean (SBERT's default), max, or the [CLS] state."})
    scale: float = field(default=20.0, metadata={
        "doc": "In-batch contrastive loss: cosine similarities are multiplied by this before the softmax "
               "(sentence-transformers' MultipleNegativesRankingLoss: 20)."})
    symmetric: bool = field(default=True, metadata={
        "doc": "Score the pairs both ways (a sentence finds its partner among the batch's partners, and back)."})
    cls_id: int | None = field(default=None, metadata={"doc": "[CLS]'s id (the tokenizer's cls role).",
                                                       "derived": FROM_TOKENIZER})
    sep_id: int | None = field(default=None, metadata={"doc": "[SEP]'s id (the tokenizer's sep role).",
                                                       "derived": FROM_TOKENIZER})
    pad_id: int | None = field(default=None, metadata={"doc": "[PAD]'s id (the tokenizer's pad role).",
                                                       "derived": FROM_TOKENIZER})

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.scale <= 0:
            raise ValueError(f"scale: must be > 0, got {self.scale}")
        if self.block_size < 3:
            raise ValueError(f"block_size: [CLS] text [SEP] needs at least 3 positions, got {self.block_size}")
