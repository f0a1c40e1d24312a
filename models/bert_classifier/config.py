"""The BERT classifier's config: the encoder's shape (taken from the pre-trained checkpoint when fine-tuning one),
the special tokens its input is built from, and the head; a plain dataclass, no torch."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from corpusforge.models.configs import FROM_TOKENIZER
from corpusforge.models.gpt.config import GPTConfig

FROM_LABELS = "set from the labels"
# the fields a pre-trained checkpoint fixes (classify.init): its shape, its vocabulary
SHAPE_FIELDS = ("vocab_size", "block_size", "n_layer", "n_head", "n_embd", "bias", "positional", "norm", "activation",
                "tie_weights", "rope_base", "type_vocab_size")


@dataclass(frozen=True)
class BertClassifierConfig(GPTConfig):
    """GPTConfig's shape fields (without the causal mask), segments, and the classification head."""

    type_vocab_size: int = field(default=2, metadata={"doc": "Segment embeddings (2: sentences A and B)."})
    n_classes: int = field(default=2, metadata={"doc": "Number of classes (set from the labels).",
                                                "derived": FROM_LABELS})
    pooling: Literal["cls", "mean", "max"] = field(default="cls", metadata={
        "doc": "What the classifier reads: cls (BERT: the pooled [CLS] state, dense + tanh), mean or max of the "
               "real tokens' states."})
    classifier_dropout: float = field(default=0.1, metadata={"doc": "Dropout before the classifier."})
    cls_id: int | None = field(default=None, metadata={"doc": "[CLS]'s id (the tokenizer's cls role).",
                                                       "derived": FROM_TOKENIZER})
    sep_id: int | None = field(default=None, metadata={"doc": "[SEP]'s id (the tokenizer's sep role).",
                                                       "derived": FROM_TOKENIZER})
    pad_id: int | None = field(default=None, metadata={"doc": "[PAD]'s id (the tokenizer's pad role).",
                                                       "derived": FROM_TOKENIZER})

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.n_classes < 2:
            raise ValueError(f"n_classes: a classifier needs at least 2 classes, got {self.n_classes}")
        if self.type_vocab_size < 1:
            raise ValueError(f"type_vocab_size: must be >= 1, got {self.type_vocab_size}")
        if not 0.0 <= self.classifier_dropout < 1.0:
            raise ValueError(f"classifier_dropout: must be in [0, 1), got {self.classifier_dropout}")
        if self.block_size < 3:
            raise ValueError(f"block_size: [CLS] text [SEP] needs at least 3 positions, got {self.block_size}")
