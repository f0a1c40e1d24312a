"""Tokenizers backed by the HF ``tokenizers`` library: word, char, bpe, byte-bpe, wordpiece, unigram.

Each kind is a model + trainer + default normalizer/pre-tokenizer/decoder; the normalizer and
pre-tokenizer can be chosen by name. The saved form is ``tokenizer.json`` (plus our meta file).

| kind      | model     | default pre-tokenizer                 | decoder        | lossless |
|-----------|-----------|---------------------------------------|----------------|----------|
| word      | WordLevel | ``whitespace`` (\\w+ and punctuation)   | join by space  | no       |
| char      | WordLevel | ``char`` (every character)            | Fuse (concat)  | yes*     |
| bpe       | BPE       | ``metaspace`` (SentencePiece-style)   | Metaspace      | no       |
| byte-bpe  | BPE       | ``byte_level`` (GPT-2)                | ByteLevel      | yes      |
| wordpiece | WordPiece | ``bert``                              | WordPiece (##) | no       |
| unigram   | Unigram   | ``metaspace``                         | Metaspace      | no       |

(*) as long as no character falls below ``min_frequency`` and becomes ``<unk>``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from corpusforge.models.tokenization.base import HF_FILE, Tokenizer, saved_roles
from corpusforge.models.tokenization.hf_export import template_processing, write_transformers_config

HF_KINDS = ("word", "char", "bpe", "byte-bpe", "wordpiece", "unigram")
PRE_TOKENIZERS = ("default", "whitespace", "whitespace_split", "metaspace", "byte_level", "bert", "char")
NORMALIZERS = ("nfc", "nfd", "nfkc", "nfkd", "lowercase", "strip_accents", "bert")
DEFAULT_PRE_TOKENIZER = {"word": "whitespace", "char": "char", "bpe": "metaspace", "byte-bpe": "byte_level",
                         "wordpiece": "bert", "unigram": "metaspace"}


def _normalizer(names: Sequence[str]):
    from tokenizers import normalizers as N

    table = {"nfc": N.NFC, "nfd": N.NFD, "nfkc": N.NFKC, "nfkd": N.NFKD, "lowercase": N.Lowercase,
             "strip_accents": N.StripAccents, "bert": lambda: N.BertNormalizer(lowercase=False)}
    steps = []
    for name in names:
        if name not in table:
            raise ValueError(f"normalizers: {name!r} is not allowed; use {', '.join(NORMALIZERS)}")
        steps.append(table[name]())
    return N.Sequence(steps) if steps else None


def _pre_tokenizer(name: str):
    from tokenizers import Regex
    from tokenizers import pre_tokenizers as P

    if name == "whitespace":
        return P.Whitespace()
    if name == "whitespace_split":
        return P.WhitespaceSplit()
    if name == "metaspace":
        return P.Metaspace(replacement="▁", prepend_scheme="first")
    if name == "byte_level":
        return P.ByteLevel(add_prefix_space=False, use_regex=True)
    if name == "bert":
        return P.BertPreTokenizer()
    if name == "char":
        return P.Split(Regex(r"[\s\S]"), behavior="isolated")
    raise ValueError(f"pre_tokenizer: {name!r} is not allowed; use {', '.join(PRE_TOKENIZERS)}")


class HFTokenizer(Tokenizer):
    """One of the HF-backed kinds; ``self.hf`` is the ``tokenizers.Tokenizer``."""

    def __init__(self, kind: str = "byte-bpe", unk_token: str | None = "<unk>",
                 eot_token: str | None = "<|endoftext|>", extra_special_tokens: Sequence[str] = (),
                 normalizers: Sequence[str] = (), pre_tokenizer: str = "default",
                 roles: Mapping[str, str] | None = None) -> None:
        if kind not in HF_KINDS:
            raise ValueError(f"kind: {kind!r} is not allowed; use one of {', '.join(HF_KINDS)}")
        if kind == "byte-bpe":
            unk_token = None  # every byte is in the alphabet: nothing is ever unknown
        super().__init__(unk_token, eot_token, extra_special_tokens, roles)
        self.kind = kind
        self.normalizers = tuple(normalizers)
        self.pre_tokenizer = DEFAULT_PRE_TOKENIZER[kind] if pre_tokenizer == "default" else pre_tokenizer
        self.lossless = kind in ("byte-bpe", "char") and not self.normalizers
        self.hf = None

    def _model_and_trainer(self, vocab_size: int, min_frequency: int, show_progress: bool = False):
        from tokenizers import models, pre_tokenizers, trainers

        specials = self.special_token_list()
        unk = self.unk_token
        common = {"vocab_size": vocab_size, "special_tokens": specials, "show_progress": show_progress}
        if self.kind in ("word", "char"):
            return models.WordLevel(unk_token=unk), trainers.WordLevelTrainer(min_frequency=min_frequency, **common)
        if self.kind == "bpe":
            return models.BPE(unk_token=unk), trainers.BpeTrainer(min_frequency=min_frequency, **common)
        if self.kind == "byte-bpe":
            return models.BPE(), trainers.BpeTrainer(min_frequency=min_frequency,
                                                     initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), **common)
        if self.kind == "wordpiece":
            return (models.WordPiece(unk_token=unk or "[UNK]"),
                    trainers.WordPieceTrainer(min_frequency=min_frequency, continuing_subword_prefix="##", **common))
        return models.Unigram(), trainers.UnigramTrainer(unk_token=unk, **common)

    def _decoder(self):
        from tokenizers import decoders

        if self.kind == "wordpiece":
            return decoders.WordPiece(prefix="##")
        return {"metaspace": lambda: decoders.Metaspace(replacement="▁", prepend_scheme="first"),
                "byte_level": decoders.ByteLevel, "char": decoders.Fuse}.get(self.pre_tokenizer, lambda: None)()

    def build(self, vocab_size: int, min_frequency: int = 0, show_progress: bool = False):
        """An untrained ``tokenizers.Tokenizer`` and its trainer, configured for this kind. ``show_progress``:
        the trainer draws its own progress bars (reading, counting pairs, merges) on stderr."""
        from tokenizers import Tokenizer as HF

        model, trainer = self._model_and_trainer(vocab_size, min_frequency, show_progress)
        hf = HF(model)
        normalizer = _normalizer(self.normalizers)
        if normalizer is not None:
            hf.normalizer = normalizer
        hf.pre_tokenizer = _pre_tokenizer(self.pre_tokenizer)
        decoder = self._decoder()
        if decoder is not None:
            hf.decoder = decoder
        return hf, trainer

    def train(self, texts: Iterable[str], vocab_size: int = 8000, min_frequency: int = 0,
              show_progress: bool = False) -> None:
        hf, trainer = self.build(vocab_size, min_frequency, show_progress)
        hf.train_from_iterator(texts, trainer=trainer)
        processor = template_processing(self.template(), hf.token_to_id)  # ids are known only now
        if processor is not None:  # none without template roles: tokenizer.json as before roles existed
            hf.post_processor = processor
        self.hf = hf

    # --- encoding --------------------------------------------------------------------------------
    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return self.hf.encode(text, add_special_tokens=add_special_tokens).ids

    def encode_batch(self, texts: Sequence[str], add_special_tokens: bool = False) -> list[list[int]]:
        return [e.ids for e in self.hf.encode_batch(list(texts), add_special_tokens=add_special_tokens)]

    def encode_pair(self, a: str, b: str, add_special_tokens: bool = True) -> tuple[list[int], list[int]]:
        enc = self.hf.encode(a, b, add_special_tokens=add_special_tokens)  # the template in tokenizer.json
        return enc.ids, enc.type_ids

    def tokenize(self, text: str) -> list[str]:
        return self.hf.encode(text, add_special_tokens=False).tokens

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        """``tokenizers``' decode, except that ``<unk>`` is kept (tokenizers' own skip_special_tokens drops it)."""
        ids = list(ids)
        if skip_special_tokens:
            skipped = self.skipped_special_ids()
            ids = [i for i in ids if i not in skipped]
        return self.hf.decode(ids, skip_special_tokens=False)

    def id_to_token(self, token_id: int) -> str:
        return self.hf.id_to_token(token_id)

    def token_to_id(self, token: str) -> int | None:
        return self.hf.token_to_id(token)

    @property
    def vocab_size(self) -> int:
        """One past the largest id. Not the number of entries: when the training text contains a
        special token literally (PTB's "<unk>"), HF's WordLevelTrainer gives it a word id and leaves the
        special's original id unused, so ids have a hole and the count would be one short."""
        vocab = self.hf.get_vocab(with_added_tokens=True)
        return max(vocab.values()) + 1 if vocab else 0

    # --- persistence -----------------------------------------------------------------------------
    def meta(self) -> dict[str, Any]:
        return {**super().meta(), "normalizers": list(self.normalizers), "pre_tokenizer": self.pre_tokenizer}

    def _save_files(self, directory: Path) -> None:
        self.hf.save(str(directory / HF_FILE))
        write_transformers_config(self, directory)

    @classmethod
    def load(cls, directory: str | Path) -> HFTokenizer:
        from tokenizers import Tokenizer as HF

        from corpusforge.models.tokenization.base import read_meta

        d = Path(directory)
        meta = read_meta(d)
        tok = cls(kind=meta["kind"], unk_token=meta.get("unk_token"), eot_token=meta.get("eot_token"),
                  extra_special_tokens=meta.get("extra_special_tokens", ()),
                  normalizers=meta.get("normalizers", ()), pre_tokenizer=meta.get("pre_tokenizer", "default"),
                  roles=saved_roles(meta))
        tok.hf = HF.from_file(str(d / HF_FILE))
        return tok
