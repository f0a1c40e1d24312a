"""The BiLSTM tagger's config; a plain dataclass, no torch."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from corpusforge.models.configs import FROM_TOKENIZER

FROM_TAGS = "set from the tag set"
FROM_CHARS = "set from the character vocabulary"


@dataclass(frozen=True)
class TaggerConfig:
    """Shape of a BiLSTM tagger: word embeddings joined to a character CNN's vector of each word, a (stacked)
    bidirectional LSTM over the sentence's words, a score per tag at each word (the emissions), and a softmax or a
    CRF over them."""

    vocab_size: int = field(default=10000, metadata={"doc": "Number of word ids (set from the word vocabulary).",
                                                     "derived": FROM_TOKENIZER})
    pad_id: int | None = field(default=None, metadata={"doc": "The padding word id.", "derived": FROM_TOKENIZER})
    n_tags: int = field(default=2, metadata={"doc": "Number of tags (set from the tag set).", "derived": FROM_TAGS})
    n_chars: int = field(default=0, metadata={
        "doc": "Number of character ids, 0 the padding (set from the character vocabulary); 0: no character "
               "features.", "derived": FROM_CHARS})
    n_embd: int = field(default=100, metadata={"doc": "Word embedding size."})
    char_embd: int = field(default=30, metadata={"doc": "Character embedding size (Ma & Hovy 2016: 30)."})
    char_filters: int = field(default=50, metadata={"doc": "Character CNN filters: the size of a word's character "
                                                           "vector (0: no character features)."})
    char_kernel: int = field(default=3, metadata={"doc": "Characters each CNN filter reads at once."})
    n_hidden: int = field(default=200, metadata={"doc": "LSTM hidden units per direction."})
    n_layer: int = field(default=1, metadata={"doc": "Stacked bidirectional LSTM layers."})
    dropout: float = field(default=0.33, metadata={"doc": "Dropout on the word vectors, between layers and before "
                                                          "the tag scores."})
    head: Literal["softmax", "crf"] = field(default="softmax", metadata={
        "doc": "softmax: each word's tag chosen on its own; crf: a linear-chain CRF scores whole tag sequences "
               "(learned transitions between neighbouring tags, Viterbi decoding)."})
    max_len: int = field(default=256, metadata={"doc": "Words read per sentence (longer sentences are cut)."})
    max_word_len: int = field(default=30, metadata={"doc": "Characters read per word (the first ones)."})

    def __post_init__(self) -> None:
        for name in ("vocab_size", "n_embd", "n_hidden", "n_layer", "max_len", "max_word_len", "char_kernel"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}: must be >= 1, got {getattr(self, name)}")
        for name in ("n_chars", "char_embd", "char_filters"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name}: must be >= 0, got {getattr(self, name)}")
        if self.n_tags < 1:
            raise ValueError(f"n_tags: a tagger needs at least one tag, got {self.n_tags}")
        if self.head not in ("softmax", "crf"):
            raise ValueError(f"head: softmax or crf, got {self.head!r}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout: must be in [0, 1), got {self.dropout}")

    @property
    def uses_chars(self) -> bool:
        return self.n_chars > 1 and self.char_filters > 0 and self.char_embd > 0
