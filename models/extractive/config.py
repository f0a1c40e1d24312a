"""The extractive summarizer's config; a plain dataclass, no torch."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from corpusforge.models.configs import FROM_TOKENIZER


@dataclass(frozen=True)
class ExtractiveConfig:
    """Shape of a sentence scorer: a BiLSTM reads each sentence, a second one reads the sentences of the document."""

    vocab_size: int = field(default=10000, metadata={"doc": "Number of token ids (set from the tokenizer).",
                                                     "derived": FROM_TOKENIZER})
    pad_id: int | None = field(default=None, metadata={"doc": "Padding id (the tokenizer's pad role).",
                                                       "derived": FROM_TOKENIZER})
    cell: Literal["lstm", "gru"] = field(default="lstm", metadata={"doc": "The recurrent cell: lstm or gru."})
    n_embd: int = field(default=128, metadata={"doc": "Embedding size."})
    n_hidden: int = field(default=128, metadata={"doc": "Hidden units per direction of the sentence reader."})
    n_doc_hidden: int = field(default=128, metadata={"doc": "Hidden units per direction of the document reader."})
    dropout: float = field(default=0.3, metadata={"doc": "Dropout on the embeddings and the sentence vectors."})
    max_len: int = field(default=64, metadata={"doc": "Tokens read per sentence (longer ones are cut)."})
    max_sentences: int = field(default=40, metadata={
        "doc": "Sentences read per document (later ones are never chosen)."})

    def __post_init__(self) -> None:
        for name in ("vocab_size", "n_embd", "n_hidden", "n_doc_hidden", "max_len", "max_sentences"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}: must be >= 1, got {getattr(self, name)}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout: must be in [0, 1), got {self.dropout}")
