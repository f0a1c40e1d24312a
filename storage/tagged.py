"""Token-aligned records: sentences whose words each carry one or more tags (part of speech, named-entity BIO tags),
read from CoNLL-U files (Universal Dependencies, through the ``conllu`` package) and CoNLL column files (a word and
its tags on each line, a blank line between sentences: CoNLL-2003, WNUT-17).

Each good sentence is a :class:`~corpusforge.storage.records.RawRecord` whose ``fields`` hold ``tokens`` (the words)
and one list per tag column, all of the same length, and whose ``text`` is the sentence as it was written (CoNLL-U:
the words joined as their ``SpaceAfter=No`` marks say; column files: joined by single spaces), with
``meta["offsets"]``: each word's [start, end) in that text. A sentence that cannot be aligned is quarantined with its
reason and the line it starts on (or the bad line): ``malformed_line`` (a line without the columns the file's other
lines have, a CoNLL-U line conllu rejects), ``unknown_tag`` (a tag outside the column's tag set: the 17 universal POS tags for UPOS, ``O`` / ``B-``/``I-``/``E-``/
``S-`` + a type for entity tags), ``empty_sentence`` (a CoNLL-U sentence with no word) and ``invalid_utf8``.
What cannot be read at all is a :class:`TaggedError` (one line): a tag column the file does not have, a file with
no tag column, a column of entity tags that mixes BIO and BIOES.

The corpus stage (``corpus.reader.tags``, corpusforge.storage.readers) reads these files from the stream it hashes
(``stream=``: decompressed, the digest checked after the last sentence) with ``joined=True``: ``tokens`` is then the
words joined by one space and each tag field its tags joined so, a string per field as every corpus column is, and
``meta`` is ``{"text": the surface text, "offsets": [[start, end], ...]}``. Joined by spaces, a word or tag must not
be empty nor hold whitespace (a CoNLL-U FORM may, as may a LEMMA): such a sentence is quarantined as
``token_whitespace``, naming the line. A sentence over ``limit`` bytes (reader.max_document_bytes) is ``too_large``,
only its first bytes kept: a file without blank lines does not become one sentence held in memory whole.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from corpusforge.storage.records import RAW_CAP, RawRecord

CONLLU_COLUMNS = ("id", "form", "lemma", "upos", "xpos", "feats", "head", "deprel", "deps", "misc")
UPOS = frozenset({"ADJ", "ADP", "ADV", "AUX", "CCONJ", "DET", "INTJ", "NOUN", "NUM", "PART", "PRON", "PROPN",
                  "PUNCT", "SCONJ", "SYM", "VERB", "X"})  # universaldependencies.org/u/pos/
ENTITY_TAG = re.compile(r"^(?:O|[BIES]-\S+)$")


# columns kept as written (conllu parses feats, misc and deps into dicts and lists by default: a third of the reading
# time, and a tag is the column's text anyway); ids, forms and the rest parsed by conllu
RAW_FIELDS = {name: (lambda line, i: line[i]) for name in ("feats", "head", "deps", "misc")}


class TaggedError(ValueError):
    """A tagged file that cannot be read as asked (one line: the file and why)."""


@dataclass
class Scheme:
    """What a column's entity tags show of their scheme: the first line with an E-/S- tag (BIOES only) and the
    first entity that ends without one (BIO only: a B- or I- tag not followed by I- or E- of its type)."""

    bioes_at: int | None = None
    bio_at: int | None = None

    def see(self, tags: Sequence[str], lines: Sequence[int]) -> None:
        for i, tag in enumerate(tags):
            if tag[:2] in ("E-", "S-") and self.bioes_at is None:
                self.bioes_at = lines[i]
            if tag[:2] in ("B-", "I-") and self.bio_at is None:
                after = tags[i + 1] if i + 1 < len(tags) else "O"
                if after[:2] not in ("I-", "E-") or after[2:] != tag[2:]:
                    self.bio_at = lines[i]


@dataclass
class TagColumns:
    """Which tag columns to keep, by name (``{"upos": "upos"}``: record field -> the file's column, a name or a
    0-based index) and the tag set each is checked against (None: any tag; the default for a column named
    upos is UPOS, for one whose tags look like entity tags the BIO/BIOES pattern)."""

    columns: Mapping[str, str | int]
    tagsets: Mapping[str, frozenset[str] | None] = field(default_factory=dict)


def _tagset(name: str, column: str | int, given: Mapping[str, frozenset[str] | None]) -> frozenset[str] | None:
    if name in given:
        return given[name]
    return UPOS if str(column).lower() == "upos" else None


def _check_tags(name: str, tags: Sequence[str], tagset: frozenset[str] | None,
                entity: bool) -> str | None:
    for tag in tags:
        if tagset is not None and tag not in tagset:
            return f"{name}: tag {tag!r} is not in the tag set ({len(tagset)} tags)"
        if entity and not ENTITY_TAG.match(tag):
            return f"{name}: tag {tag!r} is neither O nor B-/I-/E-/S- followed by a type"
    return None


def _is_entity(decided: dict[str, bool], field_name: str, column: Sequence[str]) -> bool:
    """Whether a column holds entity tags, decided by its first sentence with a tag other than O: all its tags
    of the O / B- / I- / E- / S- form. Until then (only O so far) its tags are valid either way."""
    if field_name not in decided:
        if all(t == "O" for t in column):
            return True
        decided[field_name] = all(ENTITY_TAG.match(t) for t in column)
    return decided[field_name]


def _quarantine(locator: str, reason: str, detail: str, raw: bytes) -> RawRecord:
    return RawRecord(locator, reason=reason, detail=detail, raw=raw[:RAW_CAP])


def _offsets(tokens: Sequence[str], space_after: Sequence[bool]) -> tuple[str, list[list[int]]]:
    parts, offsets, at = [], [], 0
    for token, space in zip(tokens, space_after):
        offsets.append([at, at + len(token)])
        parts.append(token + (" " if space else ""))
        at += len(token) + (1 if space else 0)
    return "".join(parts).rstrip(" "), offsets


Lines = Path | str | BinaryIO | Iterable[bytes]


def _lines(source: Lines, limit: int | None) -> Iterator[tuple[int, bytes]]:
    """(line number, line without its end) of a file (a path), a binary stream or an iterable of lines. With
    ``limit``, a stream's line over it comes cut to limit + 1 bytes, the rest read and dropped (its sentence is
    too large whatever the rest holds), so no line is held whole past the limit."""
    if isinstance(source, (str, os.PathLike)):
        with open(source, "rb") as fh:
            yield from _lines(fh, limit)
        return
    if limit is not None and hasattr(source, "readline"):
        number = 0
        while line := source.readline(limit + 1):
            number += 1
            if len(line) > limit and not line.endswith(b"\n"):
                while (more := source.readline(1 << 16)) and not more.endswith(b"\n"):
                    pass
            yield number, line.rstrip(b"\r\n")
        return
    for number, line in enumerate(source, 1):
        yield number, line.rstrip(b"\r\n")


def _blocks(source: Lines, limit: int | None = None) -> Iterator[tuple[int, list[tuple[int, bytes]], int]]:
    """(first line number, [(line number, line bytes)], the sentence's size in bytes) per sentence: lines between
    lines that are empty after stripping whitespace (WNUT-17's train file also ends sentences at a line holding
    only a tab). ``source``: a path, or the binary stream (or lines) of one. Past ``limit`` bytes a sentence keeps
    only its first lines (about RAW_CAP bytes, for its quarantine record); its size says it was cut."""
    block: list[tuple[int, bytes]] = []
    size = kept = 0
    for number, line in _lines(source, limit):
        if not line.strip():
            if block:
                yield block[0][0], block, size
                block, size, kept = [], 0, 0
            continue
        size += len(line) + (1 if block else 0)
        if limit is None or size <= limit or kept < RAW_CAP:
            block.append((number, line))
            kept += len(line) + 1
    if block:
        yield block[0][0], block, size


def _too_large(locator: str, first: int, size: int, limit: int, block: list[tuple[int, bytes]]) -> RawRecord:
    return _quarantine(locator, "too_large", f"line {first}: a sentence of {size} bytes > max_document_bytes {limit}",
                       b"\n".join(line for _, line in block))


def _decode(block: list[tuple[int, bytes]], locator: str) -> tuple[list[tuple[int, str]] | None, RawRecord | None]:
    out = []
    for number, line in block:
        try:
            out.append((number, line.decode("utf-8")))
        except UnicodeDecodeError as exc:
            return None, _quarantine(locator, "invalid_utf8", f"line {number}: invalid UTF-8 at byte {exc.start}",
                                     b"\n".join(raw for _, raw in block))
    return out, None


def read_conllu(path: str | Path, tags: TagColumns, name: str | None = None, *, stream: Lines | None = None,
                joined: bool = False, limit: int | None = None) -> Iterator[RawRecord]:
    """Sentences of a CoNLL-U file: the words (integer ids: a multiword token's range line and empty nodes are
    skipped, as UD's POS tags are on the syntactic words) with the tag columns asked for (``upos``, ``xpos``,
    ``lemma``, ``deprel``, ... or 0-based indices into the ten CoNLL-U columns). ``name`` starts each locator
    (``name:line``; the file's name by default). ``stream``: the file's lines read from there (a binary stream,
    e.g. a decompressed one) instead of opening ``path``, which then only names the file in errors. ``joined``
    and ``limit``: the corpus stage's form of the records and its size bound (the module docstring)."""
    import conllu

    path = Path(path)
    name = name or path.name
    wanted = {}
    for field_name, column in tags.columns.items():
        if isinstance(column, str) and column.isdigit():  # "3" as --set or a CSV-minded config writes it
            column = int(column)
        key = CONLLU_COLUMNS[column] if isinstance(column, int) and 0 <= column < 10 else str(column).lower()
        if key not in CONLLU_COLUMNS or key in ("id", "form"):
            raise TaggedError(f"{path}: CoNLL-U has no tag column {column!r} (its columns: "
                              f"{', '.join(CONLLU_COLUMNS[2:])}, or their indices 2-9)")
        wanted[field_name] = key
    if not wanted:
        raise TaggedError(f"{path}: no tag column asked for (reader.tags, e.g. {{upos: upos}})")
    schemes = {f: Scheme() for f in wanted}
    entity: dict[str, bool] = {}
    for first, block, size in _blocks(path if stream is None else stream, limit):
        locator = f"{name}:{first}"
        if limit is not None and size > limit:
            yield _too_large(locator, first, size, limit, block)
            continue
        lines, bad = _decode(block, locator)
        if bad is not None:
            yield bad
            continue
        raw = "\n".join(text for _, text in lines).encode("utf-8")
        body = [(n, t) for n, t in lines if not t.startswith("#")]
        if not body:
            yield _quarantine(locator, "empty_sentence", f"line {first}: a sentence without a word", raw)
            continue
        for n, t in body:
            if len(t.split("\t")) != 10:
                yield _quarantine(locator, "malformed_line",
                                  f"line {n}: {len(t.split(chr(9)))} tab-separated columns, CoNLL-U has 10", raw)
                break
        else:
            try:
                (sentence,) = conllu.parse("\n".join(t for _, t in lines) + "\n\n", field_parsers=RAW_FIELDS)
            except Exception as exc:  # conllu's ParseException and the ValueErrors of its field parsers
                yield _quarantine(locator, "malformed_line", f"line {first}: {exc}".splitlines()[0], raw)
                continue
            numbers = [n for n, t in body]
            words = [(tok, numbers[i]) for i, tok in enumerate(sentence) if isinstance(tok["id"], int)]
            if not words:
                yield _quarantine(locator, "empty_sentence", f"line {first}: a sentence without a word", raw)
                continue
            columns = {f: (key, ["_" if tok[key] is None else _as_tag(tok[key]) for tok, _ in words])
                       for f, key in wanted.items()}
            yield _record(locator, first, raw, [str(tok["form"]) for tok, _ in words], columns,
                          [n for _, n in words], tags, entity, schemes, lambda: _surface(sentence), joined)
    _check_schemes(path, schemes)


def _record(locator: str, first: int, raw: bytes, tokens: list[str], columns: Mapping[str, tuple[str, list[str]]],
            numbers: Sequence[int], tags: TagColumns, entity: dict[str, bool], schemes: Mapping[str, Scheme],
            text_offsets, joined: bool = False) -> RawRecord:
    """A sentence's record (its text and each word's offsets from ``text_offsets()``), or its quarantine when a tag
    is outside its column's set (or, ``joined``, when a word or tag cannot be joined by spaces); ``columns``: field
    -> (the column's name for its tag set, its tags). The entity columns of a good sentence feed their scheme check
    (``numbers``: each word's line)."""
    fields = {"tokens": tokens}
    for field_name, (key, column) in columns.items():
        problem = _check_tags(field_name, column, _tagset(field_name, key, tags.tagsets),
                              _is_entity(entity, field_name, column))
        if problem:
            return _quarantine(locator, "unknown_tag", f"line {first}: {problem}", raw)
        fields[field_name] = column
    if joined:
        problem = _unjoinable(fields, numbers)
        if problem:
            return _quarantine(locator, "token_whitespace", problem, raw)
    for field_name in columns:
        if entity.get(field_name):
            schemes[field_name].see(fields[field_name], numbers)
    text, offsets = text_offsets()
    if joined:
        return RawRecord(locator, text=text, meta={"text": text, "offsets": offsets},
                         fields={f: " ".join(values) for f, values in fields.items()})
    return RawRecord(locator, text=text, meta={"offsets": offsets}, fields=fields)


_WHITESPACE = re.compile(r"\s")


def _unjoinable(fields: Mapping[str, Sequence[str]], numbers: Sequence[int]) -> str | None:
    """Why a sentence's words and tags cannot be joined by single spaces and split back (a word or tag that is empty
    or holds whitespace: a CoNLL-U FORM or LEMMA may hold a space), naming its line; None when they can."""
    for field_name, values in fields.items():
        for i, value in enumerate(values):
            if not value or _WHITESPACE.search(value):
                what = "word" if field_name == "tokens" else f"{field_name} tag"
                how = "is empty" if not value else "holds whitespace"
                return (f"line {numbers[i]}: {what} {i + 1} {value!r} {how} (a tagged corpus joins a sentence's words, "
                        "and each tag column, with single spaces)")
    return None


def _surface(sentence) -> tuple[str, list[list[int]]]:
    """The sentence as written and each word's [start, end) in it: surface forms joined as their SpaceAfter=No
    marks say; the words of a multiword token ("didn't" = did + n't) share its span, its form and mark being the
    ones on the text."""
    parts: list[str] = []
    offsets: list[list[int]] = []
    at, inside_until, span = 0, 0, [0, 0]
    for tok in sentence:
        tid = tok["id"]
        if isinstance(tid, int) and tid <= inside_until:
            offsets.append(list(span))  # a word of the multiword token just written
            continue
        if not isinstance(tid, int) and not (len(tid) == 3 and tid[1] == "-"):
            continue  # an empty node (8.1): no text
        form = str(tok["form"])
        span = [at, at + len(form)]
        space = "SpaceAfter=No" not in str(tok["misc"] or "").split("|")
        parts.append(form + (" " if space else ""))
        at += len(form) + (1 if space else 0)
        if isinstance(tid, int):
            offsets.append(span)
        else:
            inside_until = tid[2]
    return "".join(parts).rstrip(" "), offsets


def _as_tag(value) -> str:
    if isinstance(value, Mapping):  # feats, misc: back to their CoNLL-U form
        return "|".join(f"{k}={v}" for k, v in value.items()) or "_"
    return str(value)


def read_columns(path: str | Path, tags: TagColumns, token: str | int = 0, names: Sequence[str] | None = None,
                 name: str | None = None, *, stream: Lines | None = None, joined: bool = False,
                 limit: int | None = None) -> Iterator[RawRecord]:
    """Sentences of a CoNLL column file: one word per line, its columns split by tabs (by whitespace on a line
    without a tab), a line empty after stripping whitespace between sentences, ``-DOCSTART-`` lines skipped.
    ``names`` names the columns (CoNLL-2003: token, pos, chunk, ner) so ``token`` and the tag columns may be given by
    name; otherwise they are 0-based indices (the word first, the tag last is ``{"ner": -1}``). ``name``,
    ``stream``, ``joined`` and ``limit`` as for :func:`read_conllu`."""
    path = Path(path)
    name = name or path.name

    def index(column: str | int, what: str) -> int:
        if isinstance(column, int):
            return column
        if names and column in names:
            return list(names).index(column)
        if str(column).lstrip("-").isdigit():
            return int(column)
        raise TaggedError(f"{path}: no column named {column!r} for {what} (columns: "
                          + (", ".join(names) if names else "unnamed: give reader.columns, or 0-based indices") + ")")

    token_at = index(token, "the words")
    wanted = {field_name: index(column, field_name) for field_name, column in tags.columns.items()}
    if not wanted:
        raise TaggedError(f"{path}: no tag column asked for (reader.tags, e.g. {{ner: -1}})")
    schemes = {f: Scheme() for f in wanted}
    entity: dict[str, bool] = {}
    width: int | None = None
    for first, block, size in _blocks(path if stream is None else stream, limit):
        locator = f"{name}:{first}"
        if limit is not None and size > limit:
            yield _too_large(locator, first, size, limit, block)
            continue
        lines, bad = _decode(block, locator)
        if bad is not None:
            yield bad
            continue
        if lines[0][1].startswith("-DOCSTART-"):
            lines = [(n, t) for n, t in lines if not t.startswith("-DOCSTART-")]
            if not lines:
                continue
        raw = "\n".join(t for _, t in lines).encode("utf-8")
        rows = [(n, t.split("\t") if "\t" in t else t.split()) for n, t in lines]
        if width is None:
            width = len(rows[0][1])
            if width < 2:
                raise TaggedError(f"{path}: line {rows[0][0]} has one column: no tags to learn from (a tagged file "
                                  "has the word and its tags on each line)")
            for field_name, at in {"tokens": token_at, **wanted}.items():
                if not -width <= at < width:
                    raise TaggedError(f"{path}: column {at} ({field_name}) does not exist: its lines have {width} "
                                      "columns")
        short = next(((n, len(cols)) for n, cols in rows if len(cols) != width), None)
        if short is not None:
            yield _quarantine(locator, "malformed_line",
                              f"line {short[0]}: {short[1]} columns, the file's lines have {width}", raw)
            continue
        tokens = [cols[token_at] for _, cols in rows]
        columns = {f: (f, [cols[at] for _, cols in rows]) for f, at in wanted.items()}
        yield _record(locator, first, raw, tokens, columns, [n for n, _ in rows], tags, entity, schemes,
                      lambda: _offsets(tokens, [True] * len(tokens)), joined)
    _check_schemes(path, schemes)


def _check_schemes(path: Path, schemes: Mapping[str, Scheme]) -> None:
    for field_name, scheme in schemes.items():
        if scheme.bioes_at is not None and scheme.bio_at is not None:
            raise TaggedError(f"{path}: {field_name} mixes BIO and BIOES: an E-/S- tag on line {scheme.bioes_at}, an "
                              f"entity ending without E- on line {scheme.bio_at} (convert the file to one scheme)")
