"""Tokenizers with one API (minbpe-style): word, char, classic BPE, bpe, byte-bpe, wordpiece, unigram.

    from corpusforge.models.tokenization import make_tokenizer, load_tokenizer
    tok = make_tokenizer("classic-bpe")
    tok.train(texts, merges=5)
    tok.save("out/");  tok = load_tokenizer("out/")

Classic BPE is ours (models/tokenization/classic_bpe.py); the others wrap the ``tokenizers`` library
(models/tokenization/hf_backend.py). Evaluation lives in models/tokenization/evaluation.py.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from corpusforge.models.tokenization.base import HF_FILE, META_FILE, Tokenizer, read_meta
from corpusforge.models.tokenization.classic_bpe import ClassicBPETokenizer
from corpusforge.models.tokenization.hf_backend import HF_KINDS, HFTokenizer

KINDS = ("word", "char", "classic-bpe", "bpe", "byte-bpe", "wordpiece", "unigram")

__all__ = ["HF_FILE", "KINDS", "META_FILE", "ClassicBPETokenizer", "HFTokenizer", "Tokenizer", "load_tokenizer",
           "make_tokenizer"]


def make_tokenizer(kind: str, unk_token: str | None = "<unk>", eot_token: str | None = "<|endoftext|>",
                   extra_special_tokens: Sequence[str] = (), normalizers: Sequence[str] = (),
                   pre_tokenizer: str = "default", roles: Mapping[str, str] | None = None) -> Tokenizer:
    """An untrained tokenizer of ``kind``; call ``train`` next. ``roles``: special tokens by role (``pad, bos, eos,
    cls, sep, mask``; base.py)."""
    if kind == "classic-bpe":
        if normalizers:
            raise ValueError("normalizers: classic-bpe trains on the text as given; clean it in the corpus stage")
        return ClassicBPETokenizer(unk_token, eot_token, extra_special_tokens,
                                   pre_tokenizer="whitespace" if pre_tokenizer == "default" else pre_tokenizer,
                                   roles=roles)
    if kind in HF_KINDS:
        return HFTokenizer(kind, unk_token, eot_token, extra_special_tokens, normalizers, pre_tokenizer, roles)
    raise ValueError(f"kind: {kind!r} is not allowed; use one of {', '.join(KINDS)}")


def load_tokenizer(directory: str | Path) -> Tokenizer:
    """Load any saved tokenizer (the kind is read from tokenizer_meta.json)."""
    kind = read_meta(directory)["kind"]
    if kind == "classic-bpe":
        return ClassicBPETokenizer.load(directory)
    if kind in HF_KINDS:
        return HFTokenizer.load(directory)
    raise ValueError(f"{directory}: unknown tokenizer kind {kind!r}")
