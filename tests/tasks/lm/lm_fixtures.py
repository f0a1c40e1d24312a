"""Tiny char-level encoded shards in the contract's format (meta.json + flat little-endian .bin files)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from corpusforge.tasks.step import StepResult

TEXT = ("the cat sat on the mat. the dog sat on the log. a cat and a dog sat on a mat and a log.\n" * 40)


def write_char_shards(root: Path, text: str = TEXT, roles: dict[str, str] | None = None) -> StepResult:
    """Train a char tokenizer on ``text`` (with special-token ``roles``, if given) and write train/valid/test
    shards (90/5/5 by documents)."""
    from corpusforge.models.tokenization import make_tokenizer

    tok_dir, enc_dir = root / "tokenizer", root / "encoded"
    tok = make_tokenizer("char", roles=roles)
    docs = [line for line in text.split("\n") if line]
    tok.train(docs)
    tok.save(tok_dir)
    eot = tok.eot_id
    n = len(docs)
    parts = {"train": docs[: int(n * 0.9)], "valid": docs[int(n * 0.9): int(n * 0.95)], "test": docs[int(n * 0.95):]}
    enc_dir.mkdir(parents=True)
    tokens = {}
    for split, split_docs in parts.items():
        ids = [i for d in split_docs for i in (*tok.encode(d), eot)]
        np.asarray(ids, dtype="<u2").tofile(enc_dir / f"{split}.bin")
        tokens[split] = len(ids)
    meta = {"dtype": "uint16", "vocab_size": tok.vocab_size, "eot_id": eot, "tokenizer_id": "f" * 64,
            "tokenizer_path": str(tok_dir), "tokens": tokens, "documents": {k: len(v) for k, v in parts.items()}}
    if roles:  # what the encode step writes for a tokenizer with roles
        meta["special_ids"] = tok.role_ids
    (enc_dir / "meta.json").write_text(json.dumps(meta))
    return StepResult(id="e" * 64, step="encode", name="fixture", path=str(enc_dir), reused=False, seconds=0.0)
