"""The corpus stage's config: sources, reading, cleaning, filters, dedup, split, validation.

A leaf module: it imports no step module of its stage, so the pipeline can validate a config cheaply."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from corpusforge.storage.readers import FIELD_NAME, ReaderConfig
from corpusforge.storage.records import RESERVED_COLUMNS, FieldSpec
from corpusforge.tasks.config import ConfigError, check_artifact_name, from_dict
from corpusforge.tasks.corpus.clean import CleanConfig, tagged_refusal
from corpusforge.tasks.corpus.filters import FilterConfig
from corpusforge.tasks.corpus.near_dedup import NearDedupConfig
from corpusforge.tasks.corpus.split import SplitConfig
from corpusforge.tasks.corpus.validate import ValidationConfig

# The stage's two steps take their ids from this config: a shard per source file or pack of small files (corpus_shard) and the merge (corpus).
# Each field names the steps whose output it changes ("steps": tasks.config.identity(cfg, step)). The sources are
# the shards' inputs (their digests), not config; allow_empty changes no output.
STEPS = ("corpus_shard", "corpus")
SHARD_COMPRESSIONS = ("none", "zstd")


@dataclass(frozen=True)
class DedupConfig:
    """Duplicate removal. Both compare documents after cleaning and keep the first occurrence."""

    exact: bool = field(default=True, metadata={"steps": ("corpus_shard", "corpus"), "doc": "Drop exact duplicates, keeping the first occurrence."})
    near: NearDedupConfig = field(default_factory=NearDedupConfig,
                                  metadata={"steps": ("corpus",), "doc": "MinHash LSH near-duplicate removal across the whole corpus."})


@dataclass(frozen=True)
class AlignedSource:
    """Line-aligned files read as one source: line ``i`` of every file is one record (Multi30k's ``train.de`` and
    ``train.en``), each file's lines one named field. In YAML: ``{fields: {de: data/train.de, en: data/train.en}}``;
    in Python: :func:`aligned_files`. Lines that one file has past the end of another are quarantined as
    ``missing_pair_line``, one record each."""

    fields: dict[str, str] = field(metadata={"doc": "{key: file}: two or more line-aligned text files (any suffix, "
                                                    "optionally compressed). The keys are the fields, or the columns "
                                                    "that reader.fields maps fields to."})

    def __post_init__(self) -> None:
        if not isinstance(self.fields, dict) or len(self.fields) < 2:
            raise ValueError("fields: two or more line-aligned files, {key: file}, e.g. {de: train.de, en: train.en}")
        for key, path in self.fields.items():
            if not isinstance(path, (str, os.PathLike)) or not str(path):
                raise ValueError(f"fields.{key}: a file path")
        object.__setattr__(self, "fields", {k: os.fspath(p) for k, p in self.fields.items()})


def aligned_files(*paths: str | os.PathLike[str], fields: tuple[str, ...] = ("src", "tgt")) -> AlignedSource:
    """One source of records from line-aligned files: ``aligned_files("train.de", "train.en")`` gives the fields
    ``src`` and ``tgt`` (``seq2seq train SRC_FILE TGT_FILE``); ``fields`` names them otherwise. It goes into
    ``CorpusConfig.sources`` (or, as ``dataclasses.asdict`` / ``tasks.config.to_dict`` writes it, a YAML config)."""
    if len(paths) != len(fields):
        raise ValueError(f"aligned_files: {len(paths)} file(s) for {len(fields)} field(s) {list(fields)}")
    return AlignedSource(dict(zip(fields, (os.fspath(p) for p in paths))))


@dataclass(frozen=True)
class CorpusConfig:
    """The corpus stage: which sources, how to read, clean, dedup, split and validate them."""

    name: str = field(default="corpus", metadata={"steps": ("corpus",), "doc": "Artifact name of the merged corpus."})
    sources: tuple[str | AlignedSource, ...] = field(default=(), metadata={"steps": (), "doc":
        "Files or directories (read recursively), and line-aligned files as one source of records: "
        "{fields: {de: train.de, en: train.en}}."})
    reader: ReaderConfig = field(default_factory=ReaderConfig, metadata={"steps": ("corpus_shard",), "doc": "How files become records."})
    clean: CleanConfig = field(default_factory=CleanConfig, metadata={"steps": ("corpus_shard",), "doc": "Text normalization preset."})
    filters: FilterConfig = field(default_factory=FilterConfig,
                                  metadata={"steps": ("corpus_shard",), "doc": "Quality filters: length, Gopher rules, language id."})
    dedup: DedupConfig = field(default_factory=DedupConfig, metadata={"steps": ("corpus_shard", "corpus"), "doc": "Duplicate removal."})
    split: SplitConfig = field(default_factory=SplitConfig, metadata={"steps": ("corpus_shard", "corpus"), "doc": "Held-out fractions."})
    validate: ValidationConfig = field(default_factory=ValidationConfig, metadata={"steps": ("corpus_shard",), "doc": "GX suite bounds."})
    shard_mb: float = field(default=8.0, metadata={"steps": (),
        "doc": "Small source files are packed into shards of about this many MB (a shard is one task, one GX "
               "validation and one set of Parquet files); a file this large or larger is a shard of its own; 0: one "
               "shard per file. Only which files share a shard depends on it (the shards' inputs), not any output."})
    shard_compression: str = field(default="none", metadata={
        "steps": ("corpus_shard",), "identity": lambda cfg: cfg.shard_compression != "zstd",
        "doc": "Compression of each shard's kept rows (the store's intermediate copy that the merge reads): none "
               "(default) writes ~5x faster and takes ~2x the disk of zstd; the corpus's own files are always zstd."})
    allow_empty: bool = field(default=False, metadata={"steps": (),
        "doc": "Publish a corpus even when its sources yield no document (by default that is an error)."})

    def __post_init__(self) -> None:
        check_artifact_name(self.name)
        if not (isinstance(self.shard_mb, (int, float)) and 0 <= self.shard_mb <= 4096):
            raise ConfigError(f"corpus.shard_mb: give a size in MB from 0 (one shard per file) to 4096, "
                              f"not {self.shard_mb!r}")
        if self.shard_compression not in SHARD_COMPRESSIONS:
            raise ConfigError(f"corpus.shard_compression: one of {', '.join(SHARD_COMPRESSIONS)}, "
                              f"not {self.shard_compression!r}")
        self._check_fields()

    @property
    def aligned(self) -> tuple[AlignedSource, ...]:
        return tuple(s for s in self.sources if isinstance(s, AlignedSource))

    @property
    def field_spec(self) -> FieldSpec | None:
        """The named fields of this corpus's records (reader.fields/labels, or the keys of its line-aligned files),
        or None for one ``text`` per record."""
        aligned = self.aligned
        return self.reader.field_spec(tuple(aligned[0].fields) if aligned else ())

    def _check_fields(self) -> None:
        aligned = self.aligned
        if self.reader.tags:
            self._check_tagged()
        if self.reader.squad:
            self._check_squad()
        if aligned:
            if self.reader.labels:
                raise ConfigError("corpus.reader.labels: line-aligned files hold text only; read labelled records from "
                                  "a CSV/TSV, JSON(L) or Parquet source")
            want = set(self.reader.fields.values()) if self.reader.fields else set(aligned[0].fields)
            for source in aligned:
                if set(source.fields) != want:
                    which = "the columns reader.fields reads" if self.reader.fields else "the first one's"
                    raise ConfigError(f"corpus.sources: line-aligned source {list(source.fields)} has other keys than "
                                      f"{which} ({sorted(want)}); every source must give the same fields")
            for key in () if self.reader.fields else aligned[0].fields:  # the keys are the fields
                if not FIELD_NAME.fullmatch(key) or key in RESERVED_COLUMNS:
                    raise ConfigError(f"corpus.sources: {key!r} cannot name a field (a letter, then letters, digits "
                                      f"or _; not one of {', '.join(RESERVED_COLUMNS)}); map it with reader.fields: "
                                      f"{{name: {key}}}")
        spec = self.field_spec
        if spec is not None and self.filters.lang_id:
            raise ConfigError("corpus.filters.lang_id: not available with named fields (one `lang` per record would "
                              "not say which field); filter each side's language before the corpus stage")
        if spec is None and self.filters.max_length_ratio is not None:
            raise ConfigError("corpus.filters.max_length_ratio: compares the text fields of a record; it needs named "
                              "fields (reader.fields or line-aligned files)")


    def _check_tagged(self) -> None:
        """A tagged corpus (reader.tags) keeps each sentence's words and tags aligned: no line-aligned sources, and
        no clean op that splits, merges or drops words (each word is cleaned alone, tasks/corpus/clean.py)."""
        if self.aligned:
            raise ConfigError("corpus.reader.tags: a tagged corpus reads .conllu and CoNLL column files, not "
                              "line-aligned files ({fields: ...} sources)")
        why = tagged_refusal(self.clean)
        if why:
            key = "ops" if self.clean.ops is not None else "preset"
            raise ConfigError(f"corpus.clean.{key}: {why}")

    def _check_squad(self) -> None:
        """A SQuAD corpus (reader.squad) keeps each context exactly as written, so its answers' offsets still point at
        them: no line-aligned sources, and no clean op at all (any may change a character). Filters and dedup only
        drop whole records."""
        if self.aligned:
            raise ConfigError("corpus.reader.squad: a SQuAD corpus reads .json files in SQuAD v1.1 form, not "
                              "line-aligned files ({fields: ...} sources)")
        ops = self.clean.effective_ops
        if ops:
            key = "ops" if self.clean.ops is not None else "preset"
            raise ConfigError(f"corpus.clean.{key}: a SQuAD corpus (reader.squad) keeps each context exactly as "
                              f"written, as its answers are character offsets into it; {', '.join(ops)} would change "
                              "it: set corpus.clean.preset: raw (and leave clean.ops, unicode_form and "
                              "normalize_whitespace unset)")


def corpus_config_from_dict(data: dict[str, Any], path: str = "corpus") -> CorpusConfig:
    return from_dict(CorpusConfig, data, path)
