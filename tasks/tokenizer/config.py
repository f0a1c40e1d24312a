"""The tokenizer stage's config: which tokenizer to train, and how to encode the corpus with it.

A leaf module: it imports no step module of its stage, so the pipeline can validate a config cheaply."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from corpusforge.tasks.config import NOT_IN_ID, check_artifact_name, from_dict, identity

Kind = Literal["word", "char", "classic-bpe", "bpe", "byte-bpe", "wordpiece", "unigram"]
# what a WordPiece tokenizer has unless its section says otherwise: BERT's special tokens with their roles
# (Devlin et al. 2019; transformers' BertTokenizer), so AutoTokenizer and the BERT families know them
WORDPIECE_UNK = "[UNK]"
WORDPIECE_ROLES = {"pad": "[PAD]", "cls": "[CLS]", "sep": "[SEP]", "mask": "[MASK]"}


def _set(name: str):
    """Field metadata: in the id only when set, so a config without the field keeps the id it had before."""
    return {"identity": lambda cfg: bool(getattr(cfg, name))}


@dataclass(frozen=True)
class TokenizerConfig:
    """Which tokenizer to train on the corpus's train split, and whether to encode the corpus with it."""

    name: str = field(default="tokenizer", metadata={"steps": (), "doc": "Artifact name of the tokenizer (and its encoding).",
                                                     **NOT_IN_ID})  # the store keeps it beside the id
    kind: Kind = field(default="byte-bpe", metadata={"steps": ("tokenizer",),
        "doc": "word | char | classic-bpe (ours, Sennrich, '</w>') | bpe (SentencePiece-style) | byte-bpe (GPT-2) "
               "| wordpiece (BERT, ##; unless unk_token and roles are given: [UNK], and [PAD] [CLS] [SEP] [MASK] "
               "as the pad, cls, sep and mask roles) | unigram (SentencePiece unigram LM)."})
    vocab_size: int = field(default=8000, metadata={"steps": ("tokenizer",),
        "doc": "Target vocabulary size, special tokens included (classic-bpe: used when merges is null)."})
    merges: int | None = field(default=None, metadata={"steps": ("tokenizer",), "doc": "classic-bpe only: number of merges to learn."})
    min_frequency: int | None = field(default=None, metadata={"steps": ("tokenizer",),
        "doc": "word/char: least count to enter the vocabulary; bpe kinds/wordpiece: least pair count; "
               "null: 2 for classic-bpe, 0 otherwise.",
        "identity_value": lambda cfg, _: cfg.effective_min_frequency})
    unk_token: str | None = field(default="<unk>", metadata={"steps": ("tokenizer",),
        "doc": "Token for what is not in the vocabulary (null: none; byte-bpe never needs one)."})
    eot_token: str | None = field(default="<|endoftext|>", metadata={"steps": ("tokenizer",),
        "doc": "End-of-text special token, appended after every document in encoded shards (null: none)."})
    special_tokens: tuple[str, ...] = field(default=(), metadata={"steps": ("tokenizer",), "doc": "More special tokens (never split)."})
    roles: dict[str, str] = field(default_factory=dict, metadata={"steps": ("tokenizer",), **_set("roles"),
        "doc": "Special tokens by role: {pad, bos, eos, cls, sep, mask: token}. Saved with the tokenizer "
               "(tokenizer_config.json: transformers' AutoTokenizer knows each role); cls/sep (else bos/eos) make "
               "the template of add_special_tokens and of pairs. A role may reuse eot_token."})
    fields: tuple[str, ...] = field(default=(), metadata={"steps": ("tokenizer", "encode"), **_set("fields"),
        "doc": "Text fields of a named-field corpus: trained on together, each encoded into a `<field>_ids` "
               "column (format parquet). Empty: the corpus's `text`."})
    normalizers: tuple[str, ...] = field(default=(), metadata={"steps": ("tokenizer",),
        "doc": "HF normalizers in order: nfc, nfd, nfkc, nfkd, lowercase, strip_accents, bert (not classic-bpe)."})
    pre_tokenizer: str = field(default="default", metadata={"steps": ("tokenizer",),
        "doc": "default (per kind) | whitespace | whitespace_split | metaspace | byte_level | bert | char; "
               "classic-bpe: whitespace | punct."})
    trace: bool = field(default=False, metadata={"steps": ("tokenizer",), "doc": "classic-bpe: record each merge and the token table."})
    trace_top: int = field(default=10, metadata={"steps": ("tokenizer",), "doc": "Rows of the token table per trace iteration (0: all)."})
    # The encoding options belong to the encode step (its own artifact), not to the tokenizer's id.
    encode: bool = field(default=True, metadata={"steps": (), "doc": "Encode every split of the corpus into token-id shards.",
                                                 **NOT_IN_ID})
    format: Literal["bin", "parquet"] = field(default="bin", metadata={"steps": ("encode",),
        "doc": "Encoded shards: nanoGPT-style flat .bin (uint16/uint32) or Parquet with one id list per doc."})
    labels: tuple[str, ...] = field(default=(), metadata={"steps": ("encode",), **_set("labels"),
        "doc": "Corpus columns passed through to the encoded Parquet unchanged (a class label, a score)."})
    add_special_tokens: bool = field(default=False, metadata={"steps": ("encode",), **_set("add_special_tokens"),
        "doc": "Wrap each document (each field) in the roles' template: [CLS] ... [SEP] or <s> ... </s>."})
    workers: int = field(default=0, metadata={"steps": (), "doc": "Encoding processes for classic-bpe; 0: one per CPU core.",
                                              **NOT_IN_ID})

    def __post_init__(self) -> None:
        from corpusforge.models.tokenization.classic_bpe import PRE_TOKENIZERS as CLASSIC_PRE
        from corpusforge.models.tokenization.hf_backend import NORMALIZERS, PRE_TOKENIZERS

        check_artifact_name(self.name)
        if self.kind == "wordpiece":  # BERT's tokens where the section names none
            if self.unk_token == "<unk>":
                object.__setattr__(self, "unk_token", WORDPIECE_UNK)
            if not self.roles:
                object.__setattr__(self, "roles", dict(WORDPIECE_ROLES))
        if self.vocab_size < 1:
            raise ValueError(f"vocab_size: must be >= 1, got {self.vocab_size}")
        if self.merges is not None and (self.kind != "classic-bpe" or self.merges < 0):
            raise ValueError("merges: only for kind classic-bpe, and >= 0")
        if self.min_frequency is not None and self.min_frequency < 0:
            raise ValueError(f"min_frequency: must be >= 0 or null, got {self.min_frequency}")
        allowed = ("default", *CLASSIC_PRE) if self.kind == "classic-bpe" else PRE_TOKENIZERS
        if self.pre_tokenizer not in allowed:
            raise ValueError(f"pre_tokenizer: {self.pre_tokenizer!r} is not allowed for {self.kind}; "
                             f"use one of {', '.join(allowed)}")
        bad = [n for n in self.normalizers if n not in NORMALIZERS]
        if bad or (self.normalizers and self.kind == "classic-bpe"):
            raise ValueError(f"normalizers: use names from {', '.join(NORMALIZERS)} (none for classic-bpe)")
        if self.trace and self.kind != "classic-bpe":
            raise ValueError("trace: only for kind classic-bpe")
        if self.trace_top < 0 or self.workers < 0:
            raise ValueError("trace_top/workers: must be >= 0")
        self._check_roles_and_fields()

    def _check_roles_and_fields(self) -> None:
        from corpusforge.models.tokenization.base import check_roles, template

        check_roles(self.roles)  # "roles.<role>: ..." naming the roles (unk and eot: their own keys, it says)
        if self.add_special_tokens and template(self.roles) is None:
            raise ValueError("add_special_tokens: needs a template role (roles.cls/sep or roles.bos/eos)")
        for name, columns in (("fields", self.fields), ("labels", self.labels)):
            if len(set(columns)) != len(columns) or not all(columns):
                raise ValueError(f"{name}: column names must be non-empty and distinct")
        if set(self.fields) & set(self.labels):
            raise ValueError("labels: a column cannot be both a text field and a label")
        if (self.fields or self.labels) and self.format != "parquet":
            raise ValueError("fields/labels: need format parquet (bin is one flat token stream of `text`)")

    @property
    def effective_min_frequency(self) -> int:
        if self.min_frequency is not None:
            return self.min_frequency
        return 2 if self.kind == "classic-bpe" else 0


def tokenizer_config_from_dict(data: dict[str, Any], path: str = "tokenizer") -> TokenizerConfig:
    return from_dict(TokenizerConfig, data, path)


def identity_config(cfg: TokenizerConfig) -> dict[str, Any]:
    """Everything that changes the tokenizer artifact, as TokenizerConfig's field metadata declares it (not
    the name, not the encoding options)."""
    return identity(cfg, "tokenizer")
