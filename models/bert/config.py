"""The BERT family's config: the encoder's shape fields plus segments, next-sentence prediction and the special
tokens its input is built from; a plain dataclass, no torch."""

from __future__ import annotations

from dataclasses import dataclass, field

from corpusforge.models.configs import FROM_TOKENIZER
from corpusforge.models.encoder.config import EncoderConfig


@dataclass(frozen=True)
class BertConfig(EncoderConfig):
    """EncoderConfig's shape, architecture and masking fields, plus what BERT's input and second task add."""

    type_vocab_size: int = field(default=2, metadata={
        "doc": "Segment embeddings (BERT's token types): 2, sentence A and sentence B."})
    nsp: bool = field(default=True, metadata={
        "doc": "Also train next-sentence prediction on the [CLS] state (50% IsNext, 50% a random sentence); false: "
               "masked-LM only, each example one [CLS] sentence [SEP]."})
    cls_id: int | None = field(default=None, metadata={"doc": "[CLS]'s id (the tokenizer's cls role).",
                                                       "derived": FROM_TOKENIZER})
    sep_id: int | None = field(default=None, metadata={"doc": "[SEP]'s id (the tokenizer's sep role).",
                                                       "derived": FROM_TOKENIZER})
    pad_id: int | None = field(default=None, metadata={"doc": "[PAD]'s id (the tokenizer's pad role).",
                                                       "derived": FROM_TOKENIZER})
    eot_id: int | None = field(default=None, metadata={
        "doc": "The end-of-text id the encoded stream puts after every document (the tokenizer's eot_token): "
               "documents are the sentences that pairs are made of.", "derived": FROM_TOKENIZER})

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.type_vocab_size < 1:
            raise ValueError(f"type_vocab_size: must be >= 1, got {self.type_vocab_size}")
        if self.nsp and self.type_vocab_size < 2:
            raise ValueError("type_vocab_size: next-sentence prediction needs 2 segments")
        if self.block_size < 5:
            raise ValueError(f"block_size: [CLS] A [SEP] B [SEP] needs at least 5 positions, got {self.block_size}")
