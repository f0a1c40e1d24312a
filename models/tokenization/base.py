"""The one tokenizer API (minbpe-style): the same verbs for every kind.

    tok = make_tokenizer("byte-bpe", vocab_size=1000)
    tok.train(texts)                  # an iterable of documents
    ids = tok.encode("hello")         # list[int]
    tok.decode(ids)                   # str
    tok.tokenize("hello")             # the token strings
    tok.save(directory); load_tokenizer(directory)

``special_tokens`` maps each special token's text to its id. Roles: ``unk_token`` (unknown symbol) and
``eot_token`` (end of a document in encoded streams) as ever, and ``roles`` for the rest, by transformers' names
(``pad, bos, eos, cls, sep, mask``). ``role_ids`` gives every role's id, inside the vocabulary (models derive
``pad_id``/``mask_id`` from it, never "one past the vocabulary"). With ``cls``/``sep`` (or ``bos``/``eos``) set,
``encode(text, add_special_tokens=True)`` and ``encode_pair(a, b)`` apply the template (:func:`template`):
``[CLS] A [SEP] B [SEP]`` with segment ids 0/1, or ``<s> A </s> <s> B </s>``.

Every saved tokenizer writes ``tokenizer_meta.json`` ({"kind", "vocab_size", "special_tokens", ...}) next to its
files, and ``tokenizer.json`` (loadable with ``tokenizers.Tokenizer.from_file``) wherever the kind allows. With roles
it also writes ``tokenizer_config.json``, so ``transformers.AutoTokenizer.from_pretrained(folder)`` knows each
role (models/tokenization/hf_export.py), and the meta lists ``roles``: role -> {token, id}. A tokenizer without
roles saves exactly the files it saved before roles existed (the artifact ids of every preset assume it).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

META_FILE = "tokenizer_meta.json"
HF_FILE = "tokenizer.json"
TRANSFORMERS_FILE = "tokenizer_config.json"  # what transformers reads beside tokenizer.json: the roles
ROLES = ("pad", "bos", "eos", "cls", "sep", "mask")  # set by ``roles``; unk and eot have their own keys
# The roles a post-processor template puts around a sequence: split on whitespace and ':' by ``tokenizers``
TEMPLATE_ROLES = ("bos", "eos", "cls", "sep")
Template = list[tuple[str, int]]  # pieces: "$A", "$B" or a special token, each with its segment (type) id


def check_roles(roles: Mapping[str, str]) -> dict[str, str]:
    """``roles`` in role order, each checked: a known role, a non-empty token, and for the template roles a
    token the template syntax can hold (no whitespace, no ':')."""
    for role, token in roles.items():
        if role == "unk":
            raise ValueError("roles.unk: the unknown token has its own key, unk_token")
        if role == "eot":
            raise ValueError("roles.eot: the end-of-text token has its own key, eot_token")
        if role not in ROLES:
            raise ValueError(f"roles.{role}: not a role; use {', '.join(ROLES)} (more tokens: special_tokens)")
        if not isinstance(token, str) or not token:
            raise ValueError(f"roles.{role}: must be a non-empty token")
        if role in TEMPLATE_ROLES and (":" in token or token.startswith("$") or any(c.isspace() for c in token)):
            raise ValueError(f"roles.{role}: {token!r} cannot stand in a template (no whitespace or ':', "
                             "no leading '$')")
    return {role: roles[role] for role in ROLES if role in roles}


def template(roles: Mapping[str, str]) -> tuple[Template, Template] | None:
    """The (single, pair) templates the roles imply, or None: BERT's ``[CLS] $A [SEP]`` / ``... $B:1 [SEP]:1``
    when cls or sep is set, else ``<s> $A </s>`` / ``... <s>:1 $B:1 </s>:1`` (transformers' Llama template) when
    bos or eos is. A missing half of a pair of roles is left out."""
    if "cls" in roles or "sep" in roles:
        head, tail = roles.get("cls"), roles.get("sep")
        b_head = None
    elif "bos" in roles or "eos" in roles:
        head, tail = roles.get("bos"), roles.get("eos")
        b_head = head
    else:
        return None
    single: Template = [*([(head, 0)] if head else []), ("$A", 0), *([(tail, 0)] if tail else [])]
    pair: Template = [*single, *([(b_head, 1)] if b_head else []), ("$B", 1), *([(tail, 1)] if tail else [])]
    return single, pair


def apply_template(pieces: Template, ids: dict[str, list[int]], token_id) -> tuple[list[int], list[int]]:
    """Ids and segment ids of ``pieces`` with ``ids["$A"]``/``ids["$B"]`` filled in (what ``tokenizers``'
    TemplateProcessing does; classic-bpe encodes with it)."""
    out: list[int] = []
    types: list[int] = []
    for piece, type_id in pieces:
        part = ids[piece] if piece in ids else [token_id(piece)]
        out.extend(part)
        types.extend([type_id] * len(part))
    return out, types


class Tokenizer:
    """Base class. Subclasses implement train/encode/decode/tokenize/save/_load and the vocabulary."""

    kind: str = "base"
    lossless: bool = False  # decode(encode(text)) == text for every text (given no <unk>)

    def __init__(self, unk_token: str | None = "<unk>", eot_token: str | None = "<|endoftext|>",
                 extra_special_tokens: Sequence[str] = (), roles: Mapping[str, str] | None = None) -> None:
        self.unk_token = unk_token
        self.eot_token = eot_token
        self.extra_special_tokens = tuple(extra_special_tokens)
        self.roles = check_roles(roles or {})

    # --- the verbs -------------------------------------------------------------------------------
    def train(self, texts: Iterable[str]) -> None:
        raise NotImplementedError

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        """Token ids of ``text``; ``add_special_tokens``: wrapped in the roles' template (none: as is)."""
        raise NotImplementedError

    def encode_batch(self, texts: Sequence[str], add_special_tokens: bool = False) -> list[list[int]]:
        return [self.encode(t, add_special_tokens) for t in texts]

    def encode_pair(self, a: str, b: str, add_special_tokens: bool = True) -> tuple[list[int], list[int]]:
        """(ids, segment ids) of the pair ``a``, ``b`` through the pair template (without one, or with
        ``add_special_tokens=False``: the two encodings one after the other, typed 0 and 1)."""
        ids = {"$A": self.encode(a), "$B": self.encode(b)}
        pieces = self.template() if add_special_tokens else None
        return apply_template(pieces[1] if pieces else [("$A", 0), ("$B", 1)], ids, self.token_to_id)

    def template(self) -> tuple[Template, Template] | None:
        return template(self.roles)

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        """The text of ``ids``. ``skip_special_tokens`` leaves out every special token but the unknown one:
        ``<unk>`` stands for text that was there (PTB writes it literally), so it is given back, never dropped."""
        raise NotImplementedError

    def skipped_special_ids(self) -> set[int]:
        """The ids ``decode(..., skip_special_tokens=True)`` leaves out: every special token's but ``unk``'s."""
        return {i for t, i in self.special_tokens.items() if t != self.unk_token}

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
        """Specials in id order: unk, eot, the roles' tokens in role order, then the extra ones (duplicates
        dropped). Without roles: unk, eot, extras, as before roles existed (the same ids)."""
        out: list[str] = []
        for tok in (self.unk_token, self.eot_token, *self.roles.values(), *self.extra_special_tokens):
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

    @property
    def role_tokens(self) -> dict[str, str]:
        """Role -> token for every role this tokenizer has: unk, eot, then ``roles`` (a role whose token is not
        in the vocabulary, byte-bpe's unk, is left out)."""
        out = {"unk": self.unk_token, "eot": self.eot_token, **self.roles}
        return {r: t for r, t in out.items() if t and self.token_to_id(t) is not None}

    @property
    def role_ids(self) -> dict[str, int]:
        """Role -> id (``{"unk": 0, "eot": 1, "pad": 2, "mask": 5, ...}``): what models derive ``pad_id`` and
        ``mask_id`` from, as they derive ``vocab_size``."""
        return {r: self.token_to_id(t) for r, t in self.role_tokens.items()}

    # --- persistence -----------------------------------------------------------------------------
    def meta(self) -> dict[str, Any]:
        meta = {"kind": self.kind, "vocab_size": self.vocab_size, "special_tokens": self.special_tokens,
                "unk_token": self.unk_token, "eot_token": self.eot_token,
                "extra_special_tokens": list(self.extra_special_tokens), "lossless": self.lossless,
                "files": self.files()}
        if self.roles:  # only then: a tokenizer without roles keeps the meta bytes it had before roles
            meta["roles"] = {r: {"token": t, "id": self.token_to_id(t)} for r, t in self.role_tokens.items()}
        return meta

    def files(self) -> list[str]:
        return [HF_FILE, *([TRANSFORMERS_FILE] if self.roles else [])]

    def save(self, directory: str | Path) -> Path:
        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        self._save_files(d)  # with roles, the kinds write TRANSFORMERS_FILE too (hf_export.write_transformers_config)
        (d / META_FILE).write_text(json.dumps(self.meta(), indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        return d

    def _save_files(self, directory: Path) -> None:
        raise NotImplementedError

    @classmethod
    def load(cls, directory: str | Path) -> Tokenizer:
        d = Path(directory)
        meta = read_meta(d)
        tok = cls(unk_token=meta.get("unk_token"), eot_token=meta.get("eot_token"),
                  extra_special_tokens=meta.get("extra_special_tokens", ()), roles=saved_roles(meta))
        tok._load_files(d, meta)
        return tok

    def _load_files(self, directory: Path, meta: dict[str, Any]) -> None:
        raise NotImplementedError


def saved_roles(meta: Mapping[str, Any]) -> dict[str, str]:
    """The ``roles`` argument a saved tokenizer was made with (its meta's ``roles`` less unk and eot)."""
    return {r: v["token"] for r, v in meta.get("roles", {}).items() if r in ROLES}


def read_meta(directory: str | Path) -> dict[str, Any]:
    path = Path(directory) / META_FILE
    if not path.exists():
        raise FileNotFoundError(f"{path}: not a tokenizer directory (no {META_FILE})")
    return json.loads(path.read_text(encoding="utf-8"))


def document_stream(tokenizer: Any, documents: Sequence[str], end_id: int | None, add_special_tokens: bool = False):
    """The documents encoded (``tokenizer.encode_batch``) into one flat int64 array, each followed by ``end_id``
    (None: back to back): the token stream the language-model objectives read."""
    import numpy as np

    ids: list[int] = []
    for doc in tokenizer.encode_batch(documents, add_special_tokens) if len(documents) else []:
        ids.extend(doc)
        if end_id is not None:
            ids.append(end_id)
    return np.asarray(ids, dtype=np.int64)
