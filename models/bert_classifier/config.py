"""The BERT classifier's config: the encoder's shape (taken from the pre-trained checkpoint when fine-tuning one),
the special tokens its input is built from, and the head; a plain dataclass, no torch."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from corpusforge.models.bert.config import BertInput

FROM_LABELS = "set from the labels"


@dataclass(frozen=True)
class BertClassifierConfig(BertInput):
    """BERT's shape and input (corpusforge.models.bert.config.BertInput) and the classification head."""

    n_classes: int = field(default=2, metadata={"doc": "Number of classes (set from the labels).",
                                                "derived": FROM_LABELS})
    pooling: Literal["cls", "mean", "max"] = field(default="cls", metadata={
        "doc": "What the classifier reads: cls (BERT: the pooled [CLS] state, dense + tanh), mean or max of the "
               "real tokens' states."})
    classifier_dropout: float = field(default=0.1, metadata={"doc": "Dropout before the classifier."})

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.n_classes < 2:
            raise ValueError(f"n_classes: a classifier needs at least 2 classes, got {self.n_classes}")
        if not 0.0 <= self.classifier_dropout < 1.0:
            raise ValueError(f"classifier_dropout: must be in [0, 1), got {self.classifier_dropout}")
