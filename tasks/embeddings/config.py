"""The embeddings stage's config: TF-IDF, word2vec, fastText or GloVe, and their evaluation.

A leaf module: it imports no step module of its stage, so the pipeline can validate a config cheaply."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from corpusforge.tasks.config import PATH_FIELD, check_artifact_name, from_dict, identity

Kind = Literal["tfidf", "word2vec", "fasttext", "glove"]
DENSE_KINDS = ("word2vec", "fasttext", "glove")

# The dense-embeddings step, whatever trains it (gensim's word2vec/fastText or our GloVe): one step name, one
# version counter. 2: gensim saved without lifecycle events (dates), nondeterministic files declared.
# GloVe's fit has its own (tasks/embeddings/glove.py GLOVE_VERSION, 3): it alone changed since, so word2vec and
# fastText artifacts keep their ids.
EMBEDDINGS_STEP = "embeddings"
EMBEDDINGS_VERSION = 2
# One config feeds several steps (tfidf's sparse_vectors, word2vec, fasttext, glove and its cooccurrence counts,
# eval). Each field says which of them it changes ("steps" in its metadata): identity(cfg, step) is that step's id
# config, the same mechanism as every other stage's (tasks.config.identity). A field in no step (name, device)
# is in no id.
STEPS = ("tfidf", "word2vec", "fasttext", "glove", "cooccurrence", "eval")


@dataclass(frozen=True)
class EmbeddingsConfig:
    """The ``embeddings`` pipeline section. Fields that a kind does not use are ignored by it."""

    kind: Kind = field(default="word2vec", metadata={"steps": ('tfidf', 'word2vec', 'fasttext', 'glove'), "doc": "tfidf, word2vec, fasttext or glove."})
    name: str = field(default="embeddings", metadata={"steps": (), "doc": "Artifact name."})
    lowercase: bool = field(default=True, metadata={"steps": ('tfidf', 'word2vec', 'fasttext', 'glove', 'cooccurrence'), "doc": "Lowercase the text before tokenizing."})
    # word2vec / fastText (gensim); glove shares dim, window, min_count, epochs, seed, learning_rate.
    sg: int = field(default=1, metadata={"steps": ('word2vec', 'fasttext'), "doc": "1 = skip-gram, 0 = CBOW (word2vec, fasttext)."})
    dim: int = field(default=100, metadata={"steps": ('word2vec', 'fasttext', 'glove'), "doc": "Vector size."})
    window: int = field(default=5, metadata={"steps": ('word2vec', 'fasttext', 'glove', 'cooccurrence'), "doc": "Context window: words on each side of the centre word."})
    negative: int = field(default=5, metadata={"steps": ('word2vec', 'fasttext'), "doc": "Negative samples per positive pair."})
    min_count: int = field(default=5, metadata={"steps": ('word2vec', 'fasttext', 'glove', 'cooccurrence'), "doc": "Ignore words with fewer occurrences in the train split."})
    epochs: int = field(default=5, metadata={"steps": ('word2vec', 'fasttext', 'glove'), "doc": "Passes over the corpus (glove: over the co-occurrences)."})
    sample: float = field(default=1e-3, metadata={"steps": ('word2vec', 'fasttext'), "doc": "Frequent-word subsampling threshold (0 = off)."})
    workers: int = field(default=0, metadata={"steps": ('word2vec', 'fasttext'), "doc": "Training threads; 0 means one per CPU core."})
    seed: int = field(default=1, metadata={"steps": ('word2vec', 'fasttext', 'glove'), "doc": "Random seed (single-worker gensim runs are reproducible)."})
    learning_rate: float = field(default=0.0, metadata={"steps": ('word2vec', 'fasttext', 'glove'), "doc": "0 = the method's default (0.025 w2v, 0.05 glove)."})
    # fastText
    min_n: int = field(default=3, metadata={"steps": ('fasttext',), "doc": "fastText: shortest character n-gram."})
    max_n: int = field(default=6, metadata={"steps": ('fasttext',), "doc": "fastText: longest character n-gram (0 disables n-grams)."})
    bucket: int = field(default=200_000, metadata={"steps": ('fasttext',),
        "doc": "fastText: hash buckets for n-gram vectors (fastText's own 2,000,000 costs 800 MB at d100)."})
    # GloVe
    x_max: float = field(default=10.0, metadata={"steps": ('glove',),
        "doc": "GloVe: counts >= x_max get weight 1 (10 as glove.c's small-corpus demo; the paper's 100 "
               "suits billions of tokens and underfits small corpora such as PTB)."})
    glove_alpha: float = field(default=0.75, metadata={"steps": ('glove',), "doc": "GloVe: exponent of the weighting f(x)."})
    batch_size: int = field(default=32768, metadata={"steps": ('glove',), "doc": "GloVe: co-occurrence entries per AdaGrad step."})
    device: str = field(default="auto", metadata={"steps": (), "doc": "GloVe: auto (GPU when present), cpu or cuda."})
    tokens: Literal["words", "whitespace"] = field(
        default="words", metadata={"steps": ('tfidf', 'word2vec', 'fasttext', 'glove', 'cooccurrence'), "doc": "Every kind: 'words' = runs of letters/digits/underscore (punctuation "
                                          "dropped: 'king,' is 'king'), 'whitespace' = split on spaces."})
    # TF-IDF
    tf: Literal["relative", "raw", "log", "binary"] = field(
        default="relative", metadata={"steps": ('tfidf',), "doc": "tfidf: count/len(d) (teaching texts), raw count, 1+log, binary."})
    idf: Literal["log", "smooth", "none"] = field(
        default="log", metadata={"steps": ('tfidf',), "doc": "tfidf: log(N/df) (teaching texts), log((1+N)/(1+df))+1, or none."})
    log_base: Literal["e", "2", "10"] = field(default="e", metadata={"steps": ('tfidf',), "doc": "tfidf: base of the IDF logarithm."})
    norm: Literal["none", "l1", "l2"] = field(default="none", metadata={"steps": ('tfidf',), "doc": "tfidf: row normalization."})
    min_df: int = field(default=1, metadata={"steps": ('tfidf',), "doc": "tfidf: keep terms in at least this many train documents."})
    max_df: float = field(default=1.0, metadata={"steps": ('tfidf',), "doc": "tfidf: keep terms in at most this fraction of documents."})
    max_features: int = field(default=0, metadata={"steps": ('tfidf',), "doc": "tfidf: keep the most frequent terms only (0 = all)."})
    # evaluation (dense kinds); all optional
    # An evaluation file enters the eval id by its name and (eval_config) its content digest, never by where it
    # lies: the same files in another checkout or folder give the same id.
    analogies: str | None = field(default=None, metadata={"steps": ('eval',),
        "doc": "questions-words file (absolute, or relative to the config file's directory).",
        "identity_value": lambda cfg, path: Path(path).name if path else path, **PATH_FIELD})
    similarity: tuple[str, ...] = field(default=(), metadata={"steps": ('eval',),
        "doc": "Word-pair files (WordSim-353, SimLex-999); relative to the config file's directory.",
        "identity_value": lambda cfg, paths: [Path(p).name for p in paths], **PATH_FIELD})
    neighbors: tuple[str, ...] = field(default=(), metadata={"steps": ('eval',), "doc": "Words whose nearest neighbours are reported."})
    queries: tuple[str, ...] = field(default=(), metadata={"steps": ('eval',), "doc": "Vector queries such as 'king - man + woman'."})
    plot_groups: tuple[tuple[str, ...], ...] = field(
        default=(), metadata={"steps": ('eval',), "doc": "Word groups drawn in the 2-D PCA plot (pca.png)."})
    top: int = field(default=10, metadata={"steps": ('eval',), "doc": "How many neighbours / query answers to keep."})
    restrict_vocab: int = field(default=300_000, metadata={"steps": ('eval',), "doc": "Analogies/similarity use the N most frequent words."})

    def __post_init__(self) -> None:
        positive = ("dim", "window", "epochs", "bucket", "batch_size", "top", "restrict_vocab", "min_df")
        for name in positive:
            if getattr(self, name) < 1:
                raise ValueError(f"{name}: must be >= 1, got {getattr(self, name)}")
        for name in ("negative", "min_count", "workers", "seed", "max_features", "max_n"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name}: must be >= 0, got {getattr(self, name)}")
        if self.sg not in (0, 1):
            raise ValueError(f"sg: use 1 for skip-gram or 0 for CBOW, got {self.sg}")
        if self.negative == 0 and self.kind in ("word2vec", "fasttext"):
            raise ValueError("negative: must be >= 1 (training uses negative sampling)")
        if not 0 <= self.sample < 1:
            raise ValueError(f"sample: must be in [0, 1), got {self.sample}")
        if self.learning_rate < 0 or self.x_max <= 0 or self.glove_alpha <= 0:
            raise ValueError("learning_rate: must be >= 0 (x_max and glove_alpha > 0)")
        if self.min_n < 1 or (self.max_n and self.max_n < self.min_n):
            raise ValueError(f"max_n: must be 0 or >= min_n >= 1, got min_n={self.min_n} max_n={self.max_n}")
        if not 0 < self.max_df <= 1:
            raise ValueError(f"max_df: must be a fraction in (0, 1], got {self.max_df}")
        names = [Path(p).name for p in ([self.analogies] if self.analogies else []) + list(self.similarity)]
        if len(set(names)) < len(names):
            twice = sorted({n for n in names if names.count(n) > 1})
            raise ValueError(f"similarity: two evaluation files are both named {twice[0]!r} (the eval id and "
                             f"metrics know a file by its name); rename one")
        if self.device not in ("auto", "cpu", "cuda") and not self.device.startswith("cuda:"):
            raise ValueError(f"device: use auto, cpu or cuda, got {self.device!r}")
        check_artifact_name(self.name)

    def step_config(self, step: str) -> dict[str, Any]:
        """The fields that form ``step``'s artifact id (its "steps" metadata), as ``identity`` gives them."""
        return identity(self, step)

    @property
    def has_evaluation(self) -> bool:
        return bool(self.analogies or self.similarity or self.neighbors or self.queries or self.plot_groups)

    def resolved_workers(self) -> int:
        return self.workers or os.cpu_count() or 1


def embeddings_config_from_dict(data: dict[str, Any], path: str = "embeddings") -> EmbeddingsConfig:
    return from_dict(EmbeddingsConfig, data, path)
