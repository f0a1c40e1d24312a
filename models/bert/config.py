"""The BERT family's config: the encoder's shape fields plus segments, next-sentence prediction and the special
tokens its input is built from; a plain dataclass, no torch."""

from __future__ import annotations

from dataclasses import dataclass, field

from corpusforge.models.configs import FROM_TOKENIZER
from corpusforge.models.encoder.config import EncoderConfig
from corpusforge.models.gpt.config import GPTConfig


@dataclass(frozen=True)
class BertInput(GPTConfig):
    """GPTConfig's shape fields, read as BERT reads its input: segments, and the [CLS]/[SEP]/[PAD] ids. The base of
    every BERT-bodied family's config (bert, bert_classifier, sbert), so a checkpoint of one loads into another."""

    type_vocab_size: int = field(default=2, metadata={
        "doc": "Segment embeddings (BERT's token types): 2, sentence A and sentence B."})
    cls_id: int | None = field(default=None, metadata={"doc": "[CLS]'s id (the tokenizer's cls role).",
                                                       "derived": FROM_TOKENIZER})
    sep_id: int | None = field(default=None, metadata={"doc": "[SEP]'s id (the tokenizer's sep role).",
                                                       "derived": FROM_TOKENIZER})
    pad_id: int | None = field(default=None, metadata={"doc": "[PAD]'s id (the tokenizer's pad role).",
                                                       "derived": FROM_TOKENIZER})

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.type_vocab_size < 1:
            raise ValueError(f"type_vocab_size: must be >= 1, got {self.type_vocab_size}")
        if self.block_size < 3:
            raise ValueError(f"block_size: [CLS] text [SEP] needs at least 3 positions, got {self.block_size}")


@dataclass(frozen=True)
class BertConfig(EncoderConfig, BertInput):
    """EncoderConfig's shape, architecture and masking fields, BERT's input, and its second task."""

    nsp: bool = field(default=True, metadata={
        "doc": "Also train next-sentence prediction on the [CLS] state (50% IsNext, 50% a random sentence); false: "
               "masked-LM only, each example one [CLS] sentence [SEP]."})
    eot_id: int | None = field(default=None, metadata={
        "doc": "The end-of-text id the encoded stream puts after every document (the tokenizer's eot_token): "
               "documents are the sentences that pairs are made of.", "derived": FROM_TOKENIZER})

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.nsp and self.type_vocab_size < 2:
            raise ValueError("type_vocab_size: next-sentence prediction needs 2 segments")
        if self.block_size < 5:
            raise ValueError(f"block_size: [CLS] A [SEP] B [SEP] needs at least 5 positions, got {self.block_size}")
