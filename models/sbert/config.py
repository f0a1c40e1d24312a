"""The sentence encoder's config: BERT's shape (taken from a pre-trained checkpoint when it starts from one), the
pooling, and the in-batch contrastive loss's scale; a plain dataclass, no torch."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from corpusforge.models.bert.config import BertInput


@dataclass(frozen=True)
class SBertConfig(BertInput):
    """BERT's shape and input (corpusforge.models.bert.config.BertInput), the pooling and the loss."""

    pooling: Literal["mean", "max", "cls"] = field(default="mean", metadata={
        "doc": "One vector per sentence from its token states: mean (SBERT's default), max, or the [CLS] state."})
    scale: float = field(default=20.0, metadata={
        "doc": "In-batch contrastive loss: cosine similarities are multiplied by this before the softmax "
               "(sentence-transformers' MultipleNegativesRankingLoss: 20)."})
    symmetric: bool = field(default=True, metadata={
        "doc": "Score the pairs both ways (a sentence finds its partner among the batch's partners, and back)."})

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.scale <= 0:
            raise ValueError(f"scale: must be > 0, got {self.scale}")
