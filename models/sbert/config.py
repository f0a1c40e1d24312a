"""The sentence encoder's config: BERT's shape (taken from a pre-trained checkpoint when it starts from one), the
pooling; a plain dataclass, no torch (the contrastive loss's scale and symmetry are the objective's:
corpusforge.models.objectives.ContrastiveSettings)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from corpusforge.models.bert.config import BertInput


@dataclass(frozen=True)
class SBertConfig(BertInput):
    """BERT's shape and input (corpusforge.models.bert.config.BertInput) and the pooling."""

    pooling: Literal["mean", "max", "cls"] = field(default="mean", metadata={
        "doc": "One vector per sentence from its token states: mean (SBERT's default), max, or the [CLS] state."})
