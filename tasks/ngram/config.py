"""The ngram stage's config: order, smoothing, vocabulary, evaluation, and resources that are not in the id.

A leaf module: it imports no step module of its stage, so the pipeline can validate a config cheaply."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from corpusforge.tasks.config import (NOT_IN_ID, PATH_FIELD, artifact_ref, check_artifact_name, from_dict,
                                     identity)

Smoothing = Literal["mle", "add-k", "stupid-backoff", "kneser-ney", "modified-kneser-ney"]


@dataclass(frozen=True)
class NgramConfig:
    """An n-gram language model counted in DuckDB over the corpus's train split."""

    name: str = field(default="", metadata={"doc": "Artifact name; default 'o<order>-<smoothing>'.",
                                            "identity_value": lambda cfg, _: cfg.artifact_name})
    order: int = field(default=3, metadata={"doc": "Highest n-gram order N (1..12)."})
    smoothing: Smoothing = field(default="modified-kneser-ney", metadata={
        "doc": "mle, add-k (Laplace when k=1), stupid-backoff (scores, not probabilities), kneser-ney "
               "(interpolated, one discount per order) or modified-kneser-ney (interpolated, KenLM lmplz's)."})
    k: float = field(default=1.0, metadata={"doc": "add-k: the pseudo-count added to every n-gram (> 0).",
                                            "identity": lambda cfg: cfg.smoothing == "add-k"})
    vocab_size: int | None = field(default=None, metadata={
        "doc": "add-k: V in (c + k) / (c(h) + kV); default: the training vocabulary without <s>.",
        "identity": lambda cfg: cfg.smoothing == "add-k"})
    alpha: float = field(default=0.4, metadata={"doc": "stupid-backoff: the backoff factor (0 < alpha <= 1).",
                                                "identity": lambda cfg: cfg.smoothing == "stupid-backoff"})
    prune: tuple[int, ...] = field(default=(), metadata={
        "doc": "KenLM lmplz's --prune for (modified) Kneser-Ney: count thresholds per order, e.g. [0, 0, 1] drops "
               "the trigrams (and higher) seen once. An n-gram of order n is left out when its raw count is <= "
               "the n-th value (the last value applies to the higher orders); its mass goes to the backoff. The "
               "first value must be 0, the values non-decreasing, at most one per order. Empty or all 0: no "
               "pruning.",
        "identity": lambda cfg: any(cfg.prune),
        "identity_value": lambda cfg, prune: list(prune) + [prune[-1]] * (cfg.order - len(prune))})
    sentence: Literal["line", "document"] = field(default="line", metadata={
        "doc": "What gets <s> ... </s>: each line (blank lines skipped) or each whole document."})
    eval_splits: tuple[str, ...] = field(default=("valid", "test"), metadata={
        "doc": "Corpus splits to evaluate on (skipped when empty)."})
    eval: tuple[str, ...] = field(default=(), metadata={
        "doc": "Extra evaluation text files: one sentence per line, whitespace tokens, text not altered; relative "
               "to the config file's directory. Each enters the id by its file name here and its content digest "
               "among the step's inputs, never by where it lies.",
        "identity_value": lambda cfg, paths: [Path(p).name for p in paths], **PATH_FIELD})
    arpa: bool = field(default=True, metadata={"doc": "Also write model.arpa.gz (probability models only)."})
    memory_limit: str = field(default="4GB", metadata={"doc": "DuckDB memory_limit while counting (e.g. 2GB).",
                                                       **NOT_IN_ID})
    temp_directory: str | None = field(default=None, metadata={
        "doc": "DuckDB spill directory for corpora bigger than memory; default: inside the build dir.", **NOT_IN_ID})
    threads: int = field(default=0, metadata={"doc": "DuckDB threads; 0 = all cores.", **NOT_IN_ID})
    tokenizer: str | None = field(default=None, metadata=artifact_ref(("tokenizer",), doc=(
        "A trained tokenizer: the tokenizer section of this pipeline (tokenizer) or the id (or a unique prefix) "
        "of a published tokenizer artifact; count its tokens instead of whitespace words (whitespace inside a "
        "token is written as U+2581). Default: whitespace words.")))
    partitions: int = field(default=0, metadata={
        "doc": "0: count in one DuckDB process. P >= 1: P counting tasks on the pipeline's task runner (threads, "
               "processes, dask, ray), each over 1/P of the documents, write their n-grams split into P "
               "partitions by hash of the first word; P merge tasks sum each partition; the estimate reads the "
               "merged counts. Same model and ARPA bytes, same artifact id. Workers must see the store's path.",
        **NOT_IN_ID})

    def __post_init__(self) -> None:
        if not 1 <= self.order <= 12:
            raise ValueError(f"order: must be between 1 and 12, got {self.order}")
        if self.k <= 0:
            raise ValueError(f"k: must be > 0, got {self.k}")
        if not 0 < self.alpha <= 1:
            raise ValueError(f"alpha: must be in (0, 1], got {self.alpha}")
        if self.vocab_size is not None and self.vocab_size < 1:
            raise ValueError(f"vocab_size: must be >= 1 or null, got {self.vocab_size}")
        if self.threads < 0:
            raise ValueError(f"threads: must be >= 0, got {self.threads}")
        if self.partitions < 0:
            raise ValueError(f"partitions: must be >= 0 (0 = count in one process), got {self.partitions}")
        _check_prune(self.prune, self.order, self.smoothing)
        bad = [s for s in self.eval_splits if s not in ("train", "valid", "test")]
        if bad:
            raise ValueError(f"eval_splits: {bad[0]!r} is not allowed; use train, valid or test")
        if self.name:
            check_artifact_name(self.name)

    @property
    def artifact_name(self) -> str:
        return self.name or f"o{self.order}-{self.smoothing}"


def _check_prune(prune: tuple[int, ...], order: int, smoothing: str) -> None:
    """lmplz's rules for --prune (corpusforge.models.ngram.prune_thresholds applies them again)."""
    if not prune:
        return
    if len(prune) > order:
        raise ValueError(f"prune: {len(prune)} thresholds for order {order}; give at most one per order")
    if min(prune) < 0:
        raise ValueError(f"prune: thresholds must be >= 0, got {list(prune)}")
    if prune[0] != 0:
        raise ValueError(f"prune: the first (unigram) threshold must be 0, got {prune[0]}; unigrams are never pruned")
    if any(b < a for a, b in zip(prune, prune[1:])):
        raise ValueError(f"prune: thresholds must be non-decreasing (as lmplz requires), got {list(prune)}")
    if any(prune) and smoothing not in ("kneser-ney", "modified-kneser-ney"):
        raise ValueError(f"prune: only kneser-ney and modified-kneser-ney models are pruned, not {smoothing}")


def ngram_config_from_dict(data: dict[str, Any], path: str = "ngram") -> NgramConfig:
    return from_dict(NgramConfig, data, path)


def identity_config(cfg: NgramConfig) -> dict[str, Any]:
    """Everything that changes the output, as NgramConfig's field metadata declares it (not memory_limit,
    temp_directory, threads, partitions; k and vocab_size only for add-k, alpha only for stupid backoff, prune
    only when it prunes, padded to one value per order)."""
    return identity(cfg)
