"""The recurrent classifier's config; a plain dataclass, no torch."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from corpusforge.models.configs import FROM_TOKENIZER

FROM_LABELS = "set from the labels"


@dataclass(frozen=True)
class RNNClassifierConfig:
    """Shape of a many-to-one LSTM/GRU classifier."""

    vocab_size: int = field(default=10000, metadata={"doc": "Number of token ids (set from the tokenizer).",
                                                     "derived": FROM_TOKENIZER})
    pad_id: int | None = field(default=None, metadata={"doc": "Padding id (the tokenizer's pad role).",
                                                       "derived": FROM_TOKENIZER})
    n_classes: int = field(default=2, metadata={"doc": "Number of classes (set from the labels).",
                                                "derived": FROM_LABELS})
    cell: Literal["lstm", "gru"] = field(default="lstm", metadata={"doc": "The recurrent cell: lstm or gru."})
    n_embd: int = field(default=300, metadata={
        "doc": "Embedding size (set from the vectors when classify.embeddings initialises them)."})
    n_hidden: int = field(default=300, metadata={"doc": "Hidden units per direction."})
    n_layer: int = field(default=1, metadata={"doc": "Stacked recurrent layers."})
    bidirectional: bool = field(default=True, metadata={
        "doc": "Read the text both ways and join the two directions' vectors (a BiLSTM)."})
    pooling: Literal["last", "max", "mean"] = field(default="last", metadata={
        "doc": "The text's vector: last (the final hidden state of the top layer, each direction's), max or mean "
               "of the top layer's outputs over the real tokens."})
    dropout: float = field(default=0.5, metadata={"doc": "Dropout on the embeddings, between layers and before "
                                                         "the classifier."})
    max_len: int = field(default=256, metadata={"doc": "Tokens read per text (longer texts are cut)."})

    def __post_init__(self) -> None:
        for name in ("vocab_size", "n_embd", "n_hidden", "n_layer", "max_len"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}: must be >= 1, got {getattr(self, name)}")
        if self.n_classes < 2:
            raise ValueError(f"n_classes: a classifier needs at least 2 classes, got {self.n_classes}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout: must be in [0, 1), got {self.dropout}")
