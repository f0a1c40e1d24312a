"""The BERT tagger's config: the encoder's shape (taken from the pre-trained checkpoint), the special tokens its
input is built from, and the head; a plain dataclass, no torch."""

from __future__ import annotations

from dataclasses import dataclass, field

from corpusforge.models.bert.config import BertInput

FROM_TAGS = "set from the tag set"


@dataclass(frozen=True)
class BertTaggerConfig(BertInput):
    """BERT's shape and input (corpusforge.models.bert.config.BertInput) and the token classification head."""

    n_tags: int = field(default=2, metadata={"doc": "Number of tags (set from the tag set).", "derived": FROM_TAGS})
    classifier_dropout: float = field(default=0.1, metadata={"doc": "Dropout before the tag scores."})
    max_len: int = field(default=128, metadata={"doc": "Words read per sentence at once (their sub-words, with "
                                                       "[CLS] and [SEP], must also fit in block_size)."})

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.n_tags < 1:
            raise ValueError(f"n_tags: a tagger needs at least one tag, got {self.n_tags}")
        if not 0.0 <= self.classifier_dropout < 1.0:
            raise ValueError(f"classifier_dropout: must be in [0, 1), got {self.classifier_dropout}")
        if self.max_len < 1:
            raise ValueError(f"max_len: must be >= 1, got {self.max_len}")
