"""Source discovery and record reading for raw text corpora.

Discovery walks directories recursively in sorted order. A symlink is followed only while its target
stays inside the root the user named; a link that escapes it, or that loops, is *refused*: it becomes a
:class:`SourceFile` with a reason instead of being read, so it still shows up in the accounting.
Hidden entries (names starting with '.') and files excluded by the ``include``/``exclude`` globs are
skipped and listed.

Formats (by suffix, under an optional .gz/.bz2/.xz/.zst): .txt/.text/.md (documents per line, per
paragraph or per file), .jsonl/.ndjson, .json (an array of objects, streamed, or one object), .csv and
.tsv (header row; a text column), .parquet (a text column). A .tsv file is read without quoting, as GLUE, SST-2 and
CoNLL write it (a double quote is text; ``tsv_quoting: true`` reads quotes as CSV does); a row with another number
of fields than the header is quarantined as ``ragged_row``, naming its line. The text field may be a dotted path for
JSON. Decoding is strict UTF-8 (a UTF-8 BOM is dropped; UTF-16/32 files are recognised by their BOM);
nothing undecodable becomes text unless the charset-normalizer fallback is switched on, and then the
detected encoding is kept in the record's meta.

Tagged records (``tags``, issue 46): a sentence whose words each carry their tags, read from ``.conllu`` (CoNLL-U)
and CoNLL column files (``.conll``, ``.bio``, ``.iob``: a word and its tags per line, a blank line between sentences)
by corpusforge.storage.tagged, from the same hashed and decompressed stream as every format. A record is the
sentence: ``tokens``, its words joined by one space, and one field per tag column, its tags joined so (one tag per
word: ``tokens.split(" ")`` and ``upos.split(" ")`` line up), with ``meta = {"text": the sentence as written,
"offsets": each word's [start, end) in it}``. Only a tagged corpus reads these formats and it reads nothing else:
either way the other file is ``unsupported_format``. A tag column a file does not have is a TaggedError (the whole
file is wrong: the build stops, naming it), never a quarantine.

Question-answering records (``squad``, issue 48): a ``.json`` file (optionally compressed) in SQuAD v1.1 form is
read by corpusforge.storage.squad, one record per paragraph: its ``text`` is the paragraph's context exactly as
written, a ``title`` label the article's title, and ``meta = {"qas": [{"id", "question", "answers": [{"text",
"answer_start"}]}]}``; the locator is ``data[i].paragraphs[j]``. A paragraph whose answers do not read off its
context at their offsets is quarantined whole (``answer_offset``, ``malformed_qa``, ``control_character``); a .json
file that is not SQuAD-shaped is a SquadError (one line). A SQuAD corpus reads only .json files (another file is
``unsupported_format``); without ``squad`` a .json file is read as before.

Named fields (``fields``/``labels``, :class:`corpusforge.storage.records.FieldSpec`): a record is several text
fields and labels read from the columns (CSV/TSV/Parquet) or keys (JSON/JSONL) of one row, or from line ``i`` of
each of several line-aligned files (``train.de`` + ``train.en``: corpusforge.storage.aligned). A record with any bad
field is one quarantine record whose detail names the field. These go through the per-record readers (the
vectorized fast paths handle the one ``text`` field only). Line-aligned files: corpusforge.storage.aligned.

Reason codes (stable, used in manifests): ``empty_file``, ``no_records``, ``binary_file``,
``invalid_utf8``, ``invalid_utf16``, ``invalid_utf32``, ``invalid_json``, ``not_an_object``, ``missing_text_field``, ``text_not_string``,
``invalid_csv``, ``ragged_row``, ``invalid_parquet``, ``corrupt_compressed``, ``too_large``, ``unreadable``,
``symlink_escape``, ``symlink_loop``, ``unsupported_format``, ``not_a_regular_file``; with named fields also
``missing_label``, ``bad_label`` and ``missing_pair_line`` (a line that one of line-aligned files has and
another lacks); with tagged records also ``malformed_line``, ``unknown_tag``, ``empty_sentence`` and
``token_whitespace`` (a word or tag that is empty or holds whitespace, so cannot be joined by spaces; the detail
names its line), as corpusforge.storage.tagged says; with SQuAD records also ``answer_offset``, ``malformed_qa``
and ``control_character``, as corpusforge.storage.squad says.
"""

from __future__ import annotations

import errno
import fnmatch
import os
import re
import stat
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from corpusforge.storage.compression import CorruptSource, SourceBytes, compression_of, inner_suffix, open_source
from corpusforge.storage.fast_csv import fast_csv
from corpusforge.storage.fast_jsonl import fast_jsonl
from corpusforge.storage.formats import (TextRecords, csv_records, json_records, jsonl_records, normalize_line_ends,
                             parquet_records)
from corpusforge.storage.line_blocks import fast_lines
from corpusforge.storage.records import (LABEL_TYPES, RAW_CAP, RESERVED_COLUMNS, FieldSpec, RawRecord, RecordBatch,
                                         meta_json)

__all__ = ["RAW_CAP", "FieldSpec", "LabelSpec", "RawRecord", "RecordBatch", "ReaderConfig", "SourceChanged", "SourceError", "SourceFile", "Discovery",
           "discover_sources", "read_records", "read_batches"]
BATCH_ROWS = 65536

FORMATS = {
    ".txt": "txt", ".text": "txt", ".md": "txt",
    ".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "json",
    ".csv": "csv", ".tsv": "tsv", ".parquet": "parquet",
    ".conllu": "conllu", ".conll": "conll", ".bio": "conll", ".iob": "conll",
}
TAGGED_FORMATS = ("conllu", "conll")  # read only into a tagged corpus (ReaderConfig.tags), which reads only these
SUPPORTED_SUFFIXES = set(FORMATS)
TXT_MODES = ("line", "paragraph", "file")
DEFAULT_MAX_DOCUMENT_BYTES = 8 << 20


FIELD_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,63}")  # a column name; no leading _ (internal columns)


@dataclass(frozen=True)
class LabelSpec:
    """A label field: the source column (or JSON key) it is read from, and its type."""

    column: str = field(metadata={"doc": "The CSV/TSV/Parquet column or JSON key (dotted paths allowed) of the label."})
    type: Literal["int", "str"] = field(
        default="int",
        metadata={"doc": "int: integers (JSON/Parquet integers, or CSV cells of decimal digits) stored as Int64; str: "
                         "text labels (an integer is written in decimal). A label that is not one is quarantined as "
                         "bad_label."})


@dataclass(frozen=True)
class ReaderConfig:
    """How raw files are found and split into records."""

    txt_mode: Literal["line", "paragraph", "file"] = field(
        default="line",
        metadata={"doc": "Text files: one document per line, per blank-line-separated paragraph, or per file."},
    )
    text_field: str = field(
        default="text",
        metadata={"doc": "JSON/JSONL: the field with the text (dotted paths allowed, e.g. doc.body); "
                         "CSV/TSV/Parquet: the text column. Other fields go to meta."},
    )
    include: tuple[str, ...] = field(
        default=(), metadata={"doc": "Globs on paths inside a source dir (e.g. '**/*.txt'); empty = all files."}
    )
    exclude: tuple[str, ...] = field(default=(), metadata={"doc": "Globs of files to skip (listed in the manifest)."})
    max_document_bytes: int = field(
        default=DEFAULT_MAX_DOCUMENT_BYTES,
        metadata={"doc": "Largest document kept whole (bytes, default 8 MiB). Memory stays bounded by it."},
    )
    oversize: Literal["quarantine", "split"] = field(
        default="quarantine",
        metadata={"doc": "An oversize document is quarantined as too_large, or split on whitespace into parts."},
    )
    tsv_quoting: bool = field(
        default=False, metadata={
            "identity": lambda cfg: cfg.tsv_quoting,
            "doc": ".tsv files: read double quotes as CSV quoting (a quoted field may hold tabs and newlines). Off by "
                   "default: TSV files in this field (GLUE, SST-2, CoNLL) have no quoting, a quote is text and each "
                   "line is one row."})
    encoding_fallback: Literal["none", "charset-normalizer"] = field(
        default="none",
        metadata={"doc": "Decode non-UTF-8 text records with charset-normalizer's guess (kept in meta._encoding)."},
    )
    tags: dict[str, str | int] = field(
        default_factory=dict, metadata={
            "identity": lambda cfg: bool(cfg.tags),
            "doc": "Tagged records (token classification: POS tags, named entities) from .conllu and CoNLL column "
                   "files (.conll, .bio, .iob): {field: column}, the tag columns to keep. CoNLL-U columns by name "
                   "(upos, xpos, lemma, feats, head, deprel, deps, misc) or index (2-9); column files by 0-based "
                   "index (-1: the last column) or by a name that reader.columns gives. E.g. {upos: upos} or "
                   "{ner: -1}. A record is a sentence: `tokens` (its words joined by one space) and each tag field "
                   "(its tags joined so, one per word); meta keeps the text as written and each word's offsets. "
                   "Cleaning is per word and may not split, merge or drop words; such a corpus reads no other "
                   "format, and no other corpus reads these. Not with fields or labels."})
    columns: tuple[str, ...] = field(
        default=(), metadata={
            "identity": lambda cfg: bool(cfg.columns),
            "doc": "Names for the columns of CoNLL column files, in order (CoNLL-2003: [token, pos, chunk, ner]), so "
                   "reader.tags may name them ({ner: ner}); the words are the column named token (or word, form), "
                   "else the first. Needs reader.tags."})

    squad: bool = field(
        default=False, metadata={
            "identity": lambda cfg: cfg.squad,
            "doc": "Question-answering records from .json files in SQuAD v1.1 form (SQuAD, XQuAD; optionally "
                   "compressed): one record per paragraph, its text the context exactly as written, a title label "
                   "(the article's title) and meta.qas (each question's id, question and answers with their "
                   "answer_start offsets into the text). A paragraph whose answer is not the context's text at its "
                   "offset is quarantined whole (answer_offset). Needs corpus.clean.preset: raw (cleaning would move "
                   "the offsets); such a corpus reads no other format. Exact dedup keys on the context: a repeated "
                   "paragraph is dropped with its questions (dedup.exact: false keeps it). Not with tags, fields or "
                   "labels."})

    fields: dict[str, str] = field(
        default_factory=dict, metadata={
            "identity": lambda cfg: bool(cfg.fields),
            "doc": "Named text fields instead of one text: {field: source column or JSON key}, e.g. {src: de, tgt: en} "
                   "or {prompt: prompt, chosen: chosen, rejected: rejected}. Each becomes a column of the corpus named "
                   "after the field; every field is cleaned and filtered, dedup keys on all of them, and a record with "
                   "any bad field is quarantined whole. text_field is then not used. Line-aligned files need no "
                   "fields here: their keys are the fields (corpus.sources: [{fields: {de: train.de, en: train.en}}])."})
    labels: dict[str, str | LabelSpec] = field(
        default_factory=dict, metadata={
            "identity": lambda cfg: bool(cfg.labels),
            "doc": "Label fields, carried with the record and never cleaned: {field: column} (an int label) or "
                   "{field: {column: c, type: int|str}}. Without fields, the text is {text: text_field}. The same "
                   "text with another label than its first occurrence is dropped as conflicting_label."})
    join_lists: str | None = field(
        default=None, metadata={
            "identity": lambda cfg: cfg.join_lists is not None,
            "doc": "Named fields (reader.fields) whose JSON/Parquet value is a list of strings, such as an abstract's "
                   "sentences or a paper's several reference summaries: the items joined by this separator (\"\\n\": "
                   "one item per line, which the seq2seq stage's summarize task reads back as sentences and "
                   "references), each stripped, the separator inside an item made a space, empty items left out. "
                   "null: a list is quarantined as text_not_string."})

    def __post_init__(self) -> None:
        if self.join_lists is not None and (not isinstance(self.join_lists, str) or not self.join_lists):
            raise ValueError(f"join_lists: a non-empty separator such as \"\\n\", got {self.join_lists!r}")
        if not self.text_field:
            raise ValueError("text_field: must be a non-empty field name")
        self._check_tags()
        self._check_squad()
        if self.max_document_bytes < 1024:
            raise ValueError(f"max_document_bytes: must be at least 1024, got {self.max_document_bytes}")
        labels = {name: LabelSpec(spec) if isinstance(spec, str) else spec for name, spec in self.labels.items()}
        object.__setattr__(self, "labels", labels)  # one form, so {label: label} and its long form share an id
        for kind, names in (("fields", self.fields), ("labels", labels)):
            for name in names:
                if not isinstance(name, str) or not FIELD_NAME.fullmatch(name):
                    raise ValueError(f"{kind}: {name!r} is not a field name (a letter, then letters, digits or _)")
                if name in RESERVED_COLUMNS:
                    raise ValueError(f"{kind}: {name!r} is a column every corpus has; name the field otherwise "
                                     f"(reserved: {', '.join(RESERVED_COLUMNS)})")
        for name, column in self.fields.items():
            if not isinstance(column, str) or not column:
                raise ValueError(f"fields.{name}: the source column or key to read, a non-empty string")
        for name, spec in labels.items():
            if not isinstance(spec, LabelSpec) or not spec.column or spec.type not in LABEL_TYPES:
                raise ValueError(f"labels.{name}: a column name, or {{column: name, type: int|str}}")
        text = set(self.fields) or ({"text"} if labels else set())
        both = sorted(text & set(labels))
        if both:
            raise ValueError(f"labels: {both[0]!r} is also a text field; a field is text or a label")
        clash = sorted(set(labels) & {f"{f}_ids" for f in text})
        if clash:  # the encode step writes <field>_ids beside the labels
            raise ValueError(f"labels: {clash[0]!r} would clash with the token ids column of a text field")

    def _check_tags(self) -> None:
        if not isinstance(self.tags, dict) or not isinstance(self.columns, tuple):
            raise ValueError("tags: a mapping {field: column}; columns: a list of column names")
        if self.columns and not self.tags:
            raise ValueError("columns: names the columns of tagged column files; set reader.tags too (e.g. "
                             "{ner: ner})")
        if not self.tags:
            return
        if self.fields or self.labels:
            raise ValueError(f"tags: a tagged corpus's fields are tokens and its tags; leave reader."
                             f"{'fields' if self.fields else 'labels'} empty")
        for name, column in self.tags.items():
            if not isinstance(name, str) or not FIELD_NAME.fullmatch(name):
                raise ValueError(f"tags: {name!r} is not a field name (a letter, then letters, digits or _)")
            if name in RESERVED_COLUMNS or name == "tokens":
                raise ValueError(f"tags: {name!r} is a column every tagged corpus has; name the field otherwise "
                                 f"(reserved: tokens, {', '.join(RESERVED_COLUMNS)})")
            if isinstance(column, bool) or not isinstance(column, (str, int)) or column == "":
                raise ValueError(f"tags.{name}: a column name (upos) or a 0-based index (-1: the last), not {column!r}")
        for i, name in enumerate(self.columns):
            if not isinstance(name, str) or not name or self.columns.index(name) != i:
                raise ValueError(f"columns: {name!r}: each column a non-empty name, each name once")

    def _check_squad(self) -> None:
        if not isinstance(self.squad, bool):
            raise ValueError(f"squad: true or false, not {self.squad!r}")
        if not self.squad:
            return
        for name in ("tags", "fields", "labels", "join_lists"):
            if getattr(self, name):
                raise ValueError(f"squad: a SQuAD corpus's fields are text (the context) and title; leave reader."
                                 f"{name} unset")

    @property
    def tagged(self) -> bool:
        """Whether records are tagged sentences (``tags``), read from .conllu and CoNLL column files only."""
        return bool(self.tags)

    @property
    def word_column(self) -> str | int:
        """The column of a CoNLL column file that holds the words: the one ``columns`` names token (or word, form),
        else the first."""
        return next((name for name in ("token", "word", "form") if name in self.columns), 0)

    def field_spec(self, aligned_keys: tuple[str, ...] = ()) -> FieldSpec | None:
        """The named fields records are read with, or None for one ``text`` per record (as before fields existed).
        ``aligned_keys``: the keys of the corpus's line-aligned files, the fields when ``fields`` is empty. A tagged
        corpus's: the text field ``tokens`` and each tag field as a text label."""
        if self.tags:
            return FieldSpec((("tokens", "tokens"),), tuple((name, name, "str") for name in self.tags))
        if self.squad:  # records made by corpusforge.storage.squad: the context and the article's title
            return FieldSpec((("text", "text"),), (("title", "title", "str"),))
        if self.fields:
            text = tuple(self.fields.items())
        elif aligned_keys:
            text = tuple((key, key) for key in aligned_keys)
        elif self.labels:
            text = (("text", self.text_field),)
        else:
            return None
        labels = tuple((name, spec.column, spec.type) for name, spec in self.labels.items())  # type: ignore[union-attr]
        return FieldSpec(text, labels, join=self.join_lists)


class SourceError(ValueError):
    """A source the user named that cannot be used at all (missing path, clashing names)."""


class SourceChanged(Exception):
    """A source file changed while it was read, or since its digest was taken: its records must not be used
    under that digest. Raised by the readers after the last record, when they were given the digest."""

    def __init__(self, name: str, detail: str):
        super().__init__(f"{name}: {detail}")
        self.name, self.detail = name, detail


@dataclass(frozen=True)
class SourceFile:
    """One file found under a source root. ``refused`` is a reason code when it must not be read."""

    name: str
    path: Path
    refused: str | None = None
    detail: str = ""

    @property
    def format(self) -> str | None:
        return FORMATS.get(inner_suffix(self.path))

    @property
    def compression(self) -> str | None:
        return compression_of(self.path)


@dataclass
class Discovery:
    files: list[SourceFile] = field(default_factory=list)
    skipped_hidden: list[str] = field(default_factory=list)
    skipped_excluded: list[str] = field(default_factory=list)


def _within(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def discover_sources(sources: list[str | os.PathLike[str]], include: tuple[str, ...] = (), exclude: tuple[str, ...] = ()) -> Discovery:
    """Expand files and directories into a sorted list of source files with stable names.

    A file named directly is called by its base name; a file found under a directory ``d`` is called
    ``basename(d)/relative/path``. Names must be unique across all sources.
    """
    found = Discovery()
    for src in sources:
        path = Path(src).expanduser()
        if not path.exists() and not path.is_symlink():
            raise SourceError(f"source {str(src)!r} does not exist")
        if path.is_dir():
            root = os.path.realpath(path)
            label = Path(root).name or "root"
            _walk(Path(path), root, label, {root}, found)
            found.files = [sf for sf in found.files if _wanted(sf, label, include, exclude, found)]
        else:
            found.files.append(_classify_file(path, path.name))
    seen: dict[str, SourceFile] = {}
    for sf in found.files:
        if sf.name in seen:
            raise SourceError(
                f"two sources would both be named {sf.name!r} ({seen[sf.name].path} and {sf.path}); "
                "pass their common parent directory instead"
            )
        seen[sf.name] = sf
    return found


def _walk(directory: Path, root: str, label: str, ancestors: set[str], found: Discovery) -> None:
    try:
        entries = sorted(os.scandir(directory), key=lambda e: e.name)
    except OSError as exc:
        found.files.append(SourceFile(label, directory, "unreadable", f"cannot list directory: {exc.strerror}"))
        return
    for entry in entries:
        name = f"{label}/{entry.name}"
        path = Path(entry.path)
        if entry.name.startswith("."):
            found.skipped_hidden.append(name)
            continue
        if entry.is_symlink():
            try:
                target = os.path.realpath(path, strict=True)
            except OSError as exc:
                if exc.errno == errno.ELOOP:  # a cycle of links (a -> b -> a)
                    found.files.append(SourceFile(name, path, "symlink_loop", "the link chain loops"))
                else:
                    found.files.append(SourceFile(name, path, "unreadable", f"dangling symlink: {exc.strerror}"))
                continue
            if not _within(target, root):
                found.files.append(SourceFile(name, path, "symlink_escape", "points outside the input root"))
                continue
            if target in ancestors:
                found.files.append(SourceFile(name, path, "symlink_loop", "loops back to a parent directory"))
                continue
        try:
            is_dir = entry.is_dir(follow_symlinks=True)
        except OSError as exc:
            found.files.append(SourceFile(name, path, "unreadable", str(exc)))
            continue
        if is_dir:
            real = os.path.realpath(path)
            if real in ancestors:
                found.files.append(SourceFile(name, path, "symlink_loop", f"loops back to {real}"))
                continue
            _walk(path, root, name, ancestors | {real}, found)
        else:
            found.files.append(_classify_file(path, name))


def _classify_file(path: Path, name: str) -> SourceFile:
    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        return SourceFile(name, path, "unreadable", exc.strerror or str(exc))
    if not stat.S_ISREG(mode):
        return SourceFile(name, path, "not_a_regular_file", "device, socket or pipe")
    sf = SourceFile(name, path)
    if sf.format is None:
        return SourceFile(name, path, "unsupported_format",
                          f"suffix {path.suffix or '(none)'!r} is not one of {sorted(SUPPORTED_SUFFIXES)} "
                          "(optionally compressed .gz/.bz2/.xz/.zst)")
    return sf


def _wanted(sf: SourceFile, label: str, include: tuple[str, ...], exclude: tuple[str, ...], found: Discovery) -> bool:
    """Apply include/exclude globs to a file's path inside its root ('sub/a.txt'); record what is skipped."""
    rel = sf.name[len(label) + 1:] if sf.name.startswith(label + "/") else sf.name
    def match(patterns: tuple[str, ...]) -> bool:
        return any(fnmatch.fnmatch(rel, p) or fnmatch.fnmatch(Path(rel).name, p)
                   or (p.startswith("**/") and fnmatch.fnmatch(rel, p[3:])) for p in patterns)
    if (include and not match(include)) or (exclude and match(exclude)):
        found.skipped_excluded.append(sf.name)
        return False
    return True


def read_records(
    source: SourceFile,
    cfg: ReaderConfig | None = None,
    *,
    txt_mode: str | None = None,
    text_field: str | None = None,
    expect_sha256: str | None = None,
    spec: FieldSpec | None = None,
) -> Iterator[RawRecord]:
    """Yield every record of one source file, good or bad. Always yields at least one record.

    With ``expect_sha256`` (the digest the caller's id was made from), the bytes read are hashed as they are read
    and, after the last record, :class:`SourceChanged` is raised if they are not those bytes or the file
    changed while it was read: records read from a file rewritten under the reader are never passed off as
    that digest's. With ``spec`` the records have named fields (``RawRecord.fields``)."""
    for item in _read(source, cfg, txt_mode, text_field, batches=False, expect=expect_sha256, spec=spec):
        yield item  # type: ignore[misc]  # never a RecordBatch when batches=False


def read_batches(source: SourceFile, cfg: ReaderConfig | None = None, *, expect_sha256: str | None = None,
                 spec: FieldSpec | None = None) -> Iterator[RecordBatch | RawRecord]:
    """Like read_records, but good records come in RecordBatches (bad ones stay single RawRecords).

    Text in line mode, JSONL and CSV/TSV take vectorized paths (corpusforge.storage.line_blocks, corpusforge.storage.fast_jsonl,
    corpusforge.storage.fast_csv) that give the same records as the per-record readers; records of other formats are
    grouped into batches of up to BATCH_ROWS. Each record is yielded exactly once, good ones in order. With
    ``spec`` a batch's frame has the named fields as columns (``FieldSpec.polars_schema``).
    """
    yield from batched(_read(source, cfg, None, None, batches=True, expect=expect_sha256, spec=spec), spec)


def batched(items: Iterator[RecordBatch | RawRecord], spec: FieldSpec | None) -> Iterator[RecordBatch | RawRecord]:
    """Good single records grouped into RecordBatches of up to BATCH_ROWS (batches and bad records pass)."""
    pending: list[RawRecord] = []

    def flush() -> Iterator[RecordBatch]:
        if pending:
            if spec is not None:
                yield spec.batch(pending)
            else:
                yield RecordBatch([r.locator for r in pending], [r.text for r in pending],
                                  [meta_json(r.meta) for r in pending])
            pending.clear()

    for item in items:
        if isinstance(item, RecordBatch):
            yield from flush()
            yield item
        elif item.ok:
            pending.append(item)
            if len(pending) >= BATCH_ROWS:
                yield from flush()
        else:
            yield item
    yield from flush()


def _untagged_detail(source: SourceFile) -> str:
    example = "{upos: upos}" if source.format == "conllu" else "{ner: -1}"
    return (f"a {'CoNLL-U' if source.format == 'conllu' else 'CoNLL column'} file holds tagged sentences: read it into "
            f"a tagged corpus, set corpus.reader.tags (e.g. {example})")


def _tagged_records(source: SourceFile, stream, cfg: ReaderConfig) -> Iterator[RawRecord]:
    """The tagged sentences of a .conllu or CoNLL column file (corpusforge.storage.tagged), read from ``stream`` in
    the corpus's form (``joined``), locators ``line:N`` (the sentence's first line) as the other line formats'."""
    from corpusforge.storage.tagged import TagColumns, read_columns, read_conllu

    tags = TagColumns(cfg.tags)
    limit = cfg.max_document_bytes
    if source.format == "conllu":
        return read_conllu(source.name, tags, "line", stream=stream, joined=True, limit=limit)
    return read_columns(source.name, tags, cfg.word_column, cfg.columns or None, "line", stream=stream, joined=True,
                        limit=limit)


def _wide_reasons(records: Iterator[RawRecord | RecordBatch], encoding: str) -> Iterator[RawRecord | RecordBatch]:
    """A UTF-16/32 file is transcoded to UTF-8 with each invalid unit as bytes that are not UTF-8
    (corpusforge.storage.compression.Transcoder): the records the UTF-8 readers call ``invalid_utf8`` are
    ``invalid_utf16`` / ``invalid_utf32`` in the file's own terms. (A JSON ``\\ud800`` escape is text that
    decodes fine; its record keeps ``invalid_utf8``.)"""
    reason = "invalid_" + encoding[:6].replace("-", "")
    for rec in records:
        if isinstance(rec, RawRecord) and rec.reason == "invalid_utf8" and not rec.detail.startswith("lone surrogate"):
            rec = RawRecord(rec.locator, rec.text, rec.meta, reason,
                            f"invalid {encoding}: a lone surrogate, a cut code unit or a code point over U+10FFFF "
                            "(raw: the record as UTF-8, each bad byte b as U+DC00+b)", rec.raw)
        yield rec


def _read(source, cfg, txt_mode, text_field, batches: bool, expect: str | None = None, spec: FieldSpec | None = None):
    cfg = cfg or ReaderConfig()
    mode = txt_mode or cfg.txt_mode
    field_name = text_field or cfg.text_field
    if source.refused:
        yield RawRecord("file", reason=source.refused, detail=source.detail)
        return
    if mode not in TXT_MODES:
        raise ValueError(f"txt_mode must be one of {TXT_MODES}, got {mode!r}")
    count = 0
    raw: SourceBytes | None = None
    try:
        try:
            raw = SourceBytes(source.path)
            for rec in _records(source, raw, cfg, mode, field_name, batches, spec):
                count += len(rec) if isinstance(rec, RecordBatch) else 1
                yield rec
        except CorruptSource as exc:
            count += 1
            yield RawRecord(f"after-record:{count - 1}", reason="corrupt_compressed", detail=exc.detail)
        except OSError as exc:
            count += 1
            yield RawRecord(f"after-record:{count - 1}", reason="unreadable", detail=exc.strerror or str(exc))
        if count == 0:
            yield RawRecord("file", reason="no_records", detail="the file holds no record (only whitespace or an empty table)")
        if raw is not None and expect is not None:
            check_digest(source, raw, expect)
    finally:
        if raw is not None:
            raw.release()


def check_digest(source: SourceFile, raw: SourceBytes, expect: str) -> None:
    """Raise SourceChanged unless the bytes just read are the ones whose sha256 is ``expect`` and the file stayed
    the same while it was read (a file rewritten in place under the reader gave a corpus torn between two
    versions, published under the id of one)."""
    try:
        proof = raw.proof()
    except OSError as exc:
        raise SourceChanged(source.name, f"could not finish reading it to check its digest: {exc}") from exc
    if not proof.stable:
        raise SourceChanged(source.name, "it changed while it was read (its size, mtime or ctime moved)")
    if proof.sha256 != expect:
        raise SourceChanged(source.name, f"its bytes changed after it was hashed: sha256 {expect[:12]} when listed, "
                                         f"{proof.sha256[:12]} as read ({proof.size:,} bytes)")


def _records(source: SourceFile, raw: SourceBytes, cfg: ReaderConfig, mode: str, field_name: str, batches: bool,
             spec: FieldSpec | None = None) -> Iterator[RawRecord | RecordBatch]:
    """The records of one source, its bytes read through ``raw``. Raises CorruptSource or OSError on a break."""
    if cfg.squad and source.format != "json":
        yield RawRecord("file", reason="unsupported_format",
                        detail="a SQuAD corpus (reader.squad) reads .json files in SQuAD v1.1 form, not "
                               f"{source.format or 'this'} files")
        return
    tagged = source.format in TAGGED_FORMATS
    if tagged != cfg.tagged:
        yield RawRecord("file", reason="unsupported_format", detail=_untagged_detail(source) if tagged else
                        "a tagged corpus (reader.tags) reads .conllu and CoNLL column files (.conll, .bio, .iob), "
                        f"not {source.format or 'this'} files")
        return
    if spec is not None:
        batches = False  # the vectorized paths read one text field; named fields take the per-record readers
        if source.format == "txt":
            yield RawRecord("file", reason="unsupported_format",
                            detail=f"a plain text file has no named fields ({', '.join(spec.names)}); give line-aligned "
                                   "files as one source ({fields: {src: a.txt, tgt: b.txt}}) or a table/JSON file")
            return
    if source.format == "parquet":  # pyarrow reads the file itself (footer first); ``raw`` hashes it afterwards
        yield from parquet_records(source.path, field_name, cfg.max_document_bytes, spec)
        return
    opened = open_source(source.path, raw)
    if opened.empty:
        yield RawRecord("file", reason="empty_file", detail="0 bytes" + (" after decompression" if source.compression else ""))
        return
    if opened.binary:
        yield RawRecord("file", reason="binary_file", detail="NUL bytes in the first 8 KiB", raw=opened.head[:RAW_CAP])
        return
    stream = opened.stream
    limit = cfg.max_document_bytes
    wide = opened.encoding.startswith(("utf-16", "utf-32"))
    # a guessed legacy encoding would turn a transcoded file's bad unit into text
    fallback = "none" if wide else cfg.encoding_fallback
    delimiter = "," if source.format == "csv" else "\t"
    records: Iterator[RawRecord | RecordBatch]
    if source.format == "jsonl":
        records = fast_jsonl(stream, field_name, limit) if batches else jsonl_records(stream, field_name, limit, spec)
    elif source.format == "json" and cfg.squad:
        from corpusforge.storage.squad import read_squad

        records = read_squad(source.name, stream, limit=limit)
    elif source.format == "json":
        records = json_records(stream, field_name, limit, spec)
    elif tagged:
        records = _tagged_records(source, normalize_line_ends(stream), cfg)
    elif source.format in ("csv", "tsv"):
        quoting = source.format == "csv" or cfg.tsv_quoting
        records = (fast_csv(stream, field_name, delimiter, limit, quoting) if batches
                   else csv_records(stream, field_name, delimiter, limit, spec, quoting))
    elif mode == "line" and batches:
        stream = normalize_line_ends(stream)  # CR, LF and CRLF all end a line
        records = fast_lines(stream, TextRecords(mode, limit, cfg.oversize, fallback))
    else:
        if mode != "file":
            stream = normalize_line_ends(stream)
        records = TextRecords(mode, limit, cfg.oversize, fallback)(stream)
    if wide:
        records = _wide_reasons(records, opened.encoding)
    try:
        yield from records
    finally:
        opened.stream.close()

