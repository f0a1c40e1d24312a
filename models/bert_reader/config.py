"""The BERT reader's config: the encoder's shape (taken from the pre-trained checkpoint), the special tokens its
input is built from, and the span head; a plain dataclass, no torch."""

from __future__ import annotations

from dataclasses import dataclass, field

from corpusforge.models.bert.config import BertInput


@dataclass(frozen=True)
class BertReaderConfig(BertInput):
    """BERT's shape and input (corpusforge.models.bert.config.BertInput) and the start/end head."""

    classifier_dropout: float = field(default=0.1, metadata={"doc": "Dropout before the start and end scores."})

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 0.0 <= self.classifier_dropout < 1.0:
            raise ValueError(f"classifier_dropout: must be in [0, 1), got {self.classifier_dropout}")
        if self.type_vocab_size < 2:
            raise ValueError("type_vocab_size: a reader reads the question as segment 0 and the passage as "
                             "segment 1: it needs 2 segments")
