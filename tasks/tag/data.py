"""A tagged corpus as the tag stage reads it, and the vocabularies the BiLSTM tagger looks words up in.

A corpus split's tagged records (corpus.reader.tags, storage/readers.py) hold ``tokens``, the words joined by one
space, and each tag field the same way, one tag per word; the record's surface text and each word's character
offsets are in its ``meta``. :class:`Vocab` is made from the training split alone: the words seen ``min_count``
times or more (the rest read as ``<unk>``, so the model learns what to do with a word it never saw), every character
of the training words, and the tags in a fixed order. It is saved beside the weights as ``vocab.json``.
"""

from __future__ import annotations

import collections
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from corpusforge.storage.tagged import ENTITY_TAG

PAD, UNK = "<pad>", "<unk>"


@dataclass
class TaggedSplit:
    """One split's sentences: words, tags, and (when the corpus kept them) surface texts and word offsets."""

    words: list[list[str]]
    tags: list[list[str]]
    texts: list[str | None]
    offsets: list[list[list[int]] | None]

    def __len__(self) -> int:
        return len(self.words)


def read_split(corpus_dir: Path, split: str, field: str) -> TaggedSplit | None:
    """The split's tagged sentences, or None when the corpus has no such split. A record whose tag count is not its
    word count is an error naming it (the corpus stage quarantines those: it means a corpus made otherwise)."""
    import polars as pl

    path = Path(corpus_dir) / f"{split}.parquet"
    if not path.exists():
        return None
    columns = pl.read_parquet_schema(path)
    if "tokens" not in columns or field not in columns:
        have = ", ".join(c for c in columns if c not in ("doc_id", "source", "locator", "split", "n_chars", "n_words",
                                                        "content_hash", "lang", "meta"))
        raise ValueError(f"the corpus's {split} split has no {'tokens' if 'tokens' not in columns else field!r} field "
                         f"(its fields: {have or 'text only'}): tag trains on tagged records (corpus.reader.tags)")
    frame = pl.read_parquet(path, columns=["locator", "tokens", field, "meta"])
    out = TaggedSplit([], [], [], [])
    for locator, tokens, tags, meta in frame.iter_rows():
        words, labels = tokens.split(" "), tags.split(" ")
        if len(words) != len(labels):
            raise ValueError(f"{split} record {locator}: {len(words)} words but {len(labels)} {field} tags")
        extra = json.loads(meta) if meta else {}
        out.words.append(words)
        out.tags.append(labels)
        out.texts.append(extra.get("text"))
        out.offsets.append(extra.get("offsets"))
    return out


def is_entity_tags(tags: Sequence[str]) -> bool:
    """Whether a tag set is entity tags (O, B-/I-/E-/S- + a type): scored by entities (seqeval), not per word."""
    return bool(tags) and any(t != "O" for t in tags) and all(ENTITY_TAG.match(t) for t in tags)


def scheme_of(tags: Sequence[str]) -> str:
    return "IOBES" if any(t[:2] in ("E-", "S-") for t in tags) else "IOB2"


class Vocab:
    """Word, character and tag vocabularies: id 0 the padding, id 1 the unknown word or character."""

    def __init__(self, words: Sequence[str], chars: Sequence[str], tags: Sequence[str], lowercase: bool = False):
        self.words, self.chars, self.tags, self.lowercase = list(words), list(chars), list(tags), bool(lowercase)
        self.word_id = {w: i for i, w in enumerate(self.words)}
        self.char_id = {c: i for i, c in enumerate(self.chars)}
        self.tag_id = {t: i for i, t in enumerate(self.tags)}

    @classmethod
    def build(cls, words: Sequence[Sequence[str]], tags: Sequence[Sequence[str]], min_count: int = 2,
              lowercase: bool = False) -> Vocab:
        counts = collections.Counter((w.lower() if lowercase else w) for ws in words for w in ws)
        chars = sorted({c for ws in words for w in ws for c in w})
        found = sorted({t for ts in tags for t in ts})
        return cls([PAD, UNK] + sorted(w for w, n in counts.items() if n >= min_count), [PAD, UNK] + chars, found,
                   lowercase)

    def encode(self, words: Sequence[str]) -> tuple[list[int], list[list[int]]]:
        """A sentence as the tagger reads it: word ids and each word's character ids."""
        look = (lambda w: w.lower()) if self.lowercase else (lambda w: w)
        return ([self.word_id.get(look(w), 1) for w in words],
                [[self.char_id.get(c, 1) for c in w] for w in words])

    def tag_ids(self, tags: Sequence[str], where: str) -> list[int]:
        try:
            return [self.tag_id[t] for t in tags]
        except KeyError as exc:
            raise ValueError(f"{where}: tag {exc.args[0]!r} is not one the training split has ("
                             f"{', '.join(self.tags[:20])}{', ...' if len(self.tags) > 20 else ''})") from None

    def coverage(self, words: Sequence[Sequence[str]]) -> float:
        """The share of ``words`` found in the word vocabulary."""
        look = (lambda w: w.lower()) if self.lowercase else (lambda w: w)
        total = sum(len(ws) for ws in words)
        return sum(look(w) in self.word_id for ws in words for w in ws) / total if total else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"words": self.words, "chars": self.chars, "tags": self.tags, "lowercase": self.lowercase}

    def save(self, path: Path) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), ensure_ascii=False) + "\n", encoding="utf-8")

    @classmethod
    def load(cls, path: Path) -> Vocab:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        return cls(data["words"], data["chars"], data["tags"], data.get("lowercase", False))


class SubwordVocab(Vocab):
    """The tags, and a pre-trained checkpoint's tokenizer that splits each word into its sub-word ids (BERT token
    classification: models/bert_tagger). ``encode`` gives a sentence's words as sub-word id lists; a word the
    tokenizer has no piece for reads as its unknown token."""

    def __init__(self, tokenizer, tags: Sequence[str]):
        super().__init__([], [], tags)
        self.tokenizer = tokenizer
        self._cache: dict[str, list[int]] = {}
        unk = getattr(tokenizer, "unk_id", None)
        self._unk = [] if unk is None else [int(unk)]

    def _pieces(self, words: Sequence[str]) -> list[list[int]]:
        new = [w for w in dict.fromkeys(words) if w not in self._cache]
        if new:
            for w, ids in zip(new, self.tokenizer.encode_batch(list(new))):
                self._cache[w] = list(ids) or list(self._unk)
        return [self._cache[w] for w in words]

    def encode(self, words: Sequence[str]) -> list[list[int]]:  # type: ignore[override]
        return self._pieces(words)

    def coverage(self, words: Sequence[Sequence[str]]) -> float:
        """The share of ``words`` that are not only the unknown token."""
        flat = [w for ws in words for w in ws]
        if not flat:
            return 0.0
        return sum(p != self._unk for p in self._pieces(flat)) / len(flat)

    def to_dict(self) -> dict[str, Any]:
        return {"tags": self.tags, "subwords": True}


def load_vocab(model_dir: Path, tokenizer_dir: Path | None = None) -> Vocab:
    """A trained tagger's vocabulary (``vocab.json``): words and characters, or, for a sub-word tagger, the tags and
    the tokenizer its config.json records (``tokenizer_dir`` when given: a registered model carries its own copy)."""
    data = json.loads((Path(model_dir) / "vocab.json").read_text(encoding="utf-8"))
    if not data.get("subwords"):
        return Vocab(data["words"], data["chars"], data["tags"], data.get("lowercase", False))
    from corpusforge.models.tokenization import load_tokenizer
    from corpusforge.tasks.encoded import model_tokenizer_dir

    return SubwordVocab(load_tokenizer(tokenizer_dir or model_tokenizer_dir(Path(model_dir))), data["tags"])


# Raw text into words as tagged corpora split them (Universal Dependencies, CoNLL, WNUT tweets): a URL, an
# @mention or #hashtag, a number with its separators, a word with inner hyphens, clitics split off the way the
# Penn Treebank and UD English write them (do|n't, it|'s, we|'re), any other symbol on its own.
_WORD = re.compile(r"""
    https?://\S+|www\.\S+
  | [@#][\w_]+
  | \d+(?:[.,:/]\d+)*
  | \w+(?=n't\b) | n't\b
  | '(?:s|re|ve|ll|d|m)\b
  | \w+(?:[-.]\w+)*(?<![.])
  | \.\.\.|--
  | \S
""", re.VERBOSE | re.IGNORECASE)


def split_words(text: str) -> tuple[list[str], list[list[int]]]:
    """Raw text -> (words, each word's [start, end) in the text)."""
    words, offsets = [], []
    for m in _WORD.finditer(text):
        words.append(m.group())
        offsets.append([m.start(), m.end()])
    return words, offsets
