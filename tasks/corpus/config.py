"""The corpus stage's config: sources, reading, cleaning, filters, dedup, split, validation.

A leaf module: it imports no step module of its stage, so the pipeline can validate a config cheaply."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from corpusforge.storage.readers import ReaderConfig
from corpusforge.tasks.config import ConfigError, check_artifact_name, from_dict
from corpusforge.tasks.corpus.clean import CleanConfig
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
class CorpusConfig:
    """The corpus stage: which sources, how to read, clean, dedup, split and validate them."""

    name: str = field(default="corpus", metadata={"steps": ("corpus",), "doc": "Artifact name of the merged corpus."})
    sources: tuple[str, ...] = field(default=(), metadata={"steps": (), "doc": "Files or directories (read recursively)."})
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


def corpus_config_from_dict(data: dict[str, Any], path: str = "corpus") -> CorpusConfig:
    return from_dict(CorpusConfig, data, path)
