"""The one tokenizer API (minbpe-style): the same verbs for every kind.

    tok = make_tokenizer("byte-bpe", vocab_size=1000)
    tok.train(texts)                  # an iterable of documents
    ids = tok.encode("hello")         # list[int]
    tok.decode(ids)                   # str
    tok.tokenize("hello")             # the token strings
    tok.save(directory); load_tokenizer(directory)

``special_tokens`` maps each special token's text to its id; ``unk_token`` and ``eot_token`` name the
ones with a role (unknown symbol, end of a document in encoded streams). Every saved tokenizer writes
``tokenizer_meta.json`` ({"kind", "vocab_size", "special_tokens", ...}) next to its files, and
``tokenizer.json`` (loadable with ``tokenizers.Tokenizer.from_file``) wherever the kind allows.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

META_FILE = "tokenizer_meta.json"
HF_FILE = "tokenizer.json"


class Tokenizer:
    """Base class. Subclasses implement train/encode/decode/tokenize/save/_load and the vocabulary."""

    kind: str = "base"
    lossless: bool = False  # decode(encode(text)) == text for every text (given no <unk>)

    def __init__(self, unk_token: str | None = "<unk>", eot_token: str | None = "<|endoftext|>",
                 extra_special_tokens: Sequence[str] = ()) -> None:
        self.unk_token = unk_token
        self.eot_token = eot_token
        self.extra_special_tokens = tuple(extra_special_tokens)

    # --- the verbs -------------------------------------------------------------------------------
    def train(self, texts: Iterable[str]) -> None:
        raise NotImplementedError

    def encode(self, text: str) -> list[int]:
        raise NotImplementedError

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        return [self.encode(t) for t in texts]

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        raise NotImplementedError

    def tokenize(self, text: str) -> list[str]:
        """The token strings of ``text`` (what ``encode`` returns, as text)."""
        return [self.id_to_token(i) for i in self.encode(text)]

    def id_to_token(self, token_id: int) -> str:
        raise NotImplementedError

    def token_to_id(self, token: str) -> int | None:
        raise NotImplementedError

    @property
    def vocab_size(self) -> int:
        raise NotImplementedError

    # --- special tokens --------------------------------------------------------------------------
    def special_token_list(self) -> list[str]:
        """Specials in id order: unk, eot, then the extra ones (duplicates dropped)."""
        out: list[str] = []
        for tok in (self.unk_token, self.eot_token, *self.extra_special_tokens):
            if tok and tok not in out:
                out.append(tok)
        return out

    @property
    def special_tokens(self) -> dict[str, int]:
        out = {}
        for tok in self.special_token_list():
            tid = self.token_to_id(tok)
            if tid is not None:
                out[tok] = tid
        return out

    @property
    def eot_id(self) -> int | None:
        return self.token_to_id(self.eot_token) if self.eot_token else None

    @property
    def unk_id(self) -> int | None:
        return self.token_to_id(self.unk_token) if self.unk_token else None

    # --- persistence -----------------------------------------------------------------------------
    def meta(self) -> dict[str, Any]:
        return {"kind": self.kind, "vocab_size": self.vocab_size, "special_tokens": self.special_tokens,
                "unk_token": self.unk_token, "eot_token": self.eot_token,
                "extra_special_tokens": list(self.extra_special_tokens), "lossless": self.lossless,
                "files": self.files()}

    def files(self) -> list[str]:
        return [HF_FILE]

    def save(self, directory: str | Path) -> Path:
        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        self._save_files(d)
        (d / META_FILE).write_text(json.dumps(self.meta(), indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        return d

    def _save_files(self, directory: Path) -> None:
        raise NotImplementedError

    @classmethod
    def load(cls, directory: str | Path) -> Tokenizer:
        d = Path(directory)
        meta = read_meta(d)
        tok = cls(unk_token=meta.get("unk_token"), eot_token=meta.get("eot_token"),
                  extra_special_tokens=meta.get("extra_special_tokens", ()))
        tok._load_files(d, meta)
        return tok

    def _load_files(self, directory: Path, meta: dict[str, Any]) -> None:
        raise NotImplementedError


def read_meta(directory: str | Path) -> dict[str, Any]:
    path = Path(directory) / META_FILE
    if not path.exists():
        raise FileNotFoundError(f"{path}: not a tokenizer directory (no {META_FILE})")
    return json.loads(path.read_text(encoding="utf-8"))
