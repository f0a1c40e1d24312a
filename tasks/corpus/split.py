"""Deterministic train/valid/test assignment.

A document's split depends only on its ``doc_id`` and the seed, never on what else is in the corpus,
so appending files never moves an existing document to another split.
"""

from __future__ import annotations

import fnmatch
import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, field

SPLITS = ("train", "valid", "test")


@dataclass(frozen=True)
class SplitConfig:
    """Fractions of documents held out; the rest is train."""

    valid: float = field(default=0.05, metadata={"doc": "Fraction of documents in the valid split (0-1)."})
    test: float = field(default=0.05, metadata={"doc": "Fraction of documents in the test split (0-1)."})
    seed: int = field(default=0, metadata={"doc": "Changes the assignment while keeping it deterministic."})
    by_source: dict[str, str] = field(
        default_factory=dict,
        metadata={"doc": "Explicit split per source: {glob on the source name: train|valid|test}, "
                         "e.g. {'*ptb.valid.txt': valid}. The first matching glob wins; others use the fractions."},
    )

    def __post_init__(self) -> None:
        for name in ("valid", "test"):
            value = getattr(self, name)
            if not 0.0 <= value < 1.0:
                raise ValueError(f"{name}: must be in [0, 1), got {value}")
        if self.valid + self.test >= 1.0:
            raise ValueError(f"valid + test must be < 1 so that train is not empty, got {self.valid + self.test}")
        for pattern, split in self.by_source.items():
            if split not in SPLITS:
                raise ValueError(f"by_source.{pattern}: split must be one of {', '.join(SPLITS)}, got {split!r}")

    def split_for_source(self, source_name: str) -> str | None:
        """The explicit split for a source, if a ``by_source`` glob matches its name."""
        for pattern, split in self.by_source.items():
            if fnmatch.fnmatch(source_name, pattern):
                return split
        return None

    def possible_splits(self, source_names: Iterable[str]) -> set[str]:
        """The splits that documents of these sources can land in: a pinned source's split, and for the others
        train plus each split with a fraction > 0. A split missing here is certain to be empty."""
        drawn = {"train"} | {name for name in ("valid", "test") if getattr(self, name) > 0}
        found: set[str] = set()
        for name in source_names:
            pinned = self.split_for_source(name)
            found |= {pinned} if pinned is not None else drawn
        return found


def assign_split(doc_id: str, cfg: SplitConfig) -> str:
    """The definition; corpusforge.tasks.corpus.identity computes the same for whole columns in DuckDB."""
    u = int(hashlib.md5(f"{cfg.seed}:{doc_id}".encode()).hexdigest()[:8], 16) / 2**32
    if u < cfg.valid:
        return "valid"
    if u < cfg.valid + cfg.test:
        return "test"
    return "train"


def assign_splits(doc_ids: Iterable[str], cfg: SplitConfig) -> list[str]:
    return [assign_split(d, cfg) for d in doc_ids]
