"""Stage ``embeddings``: text representations trained from a corpus artifact, then evaluated.

``kind`` picks the representation:
- ``tfidf``: one-hot / bag-of-words / TF-IDF document matrices (step ``sparse_vectors``), counts in DuckDB;
- ``word2vec``: skip-gram (``sg: 1``) or CBOW (``sg: 0``) with negative sampling, through gensim;
- ``fasttext``: the same plus character n-grams (``min_n``..``max_n``), so unseen words get vectors;
- ``glove``: co-occurrence counts in DuckDB (step ``cooccurrence``), then our PyTorch GloVe fit.

The dense kinds train on the corpus' train split and publish a step ``embeddings`` whose primary
artifact is ``vectors.txt`` / ``vectors.bin`` in word2vec format. If the config names evaluation files,
words or queries, a step ``embeddings_eval`` evaluates those vectors (analogies, WordSim/SimLex
Spearman, neighbours, ``king - man + woman`` queries, a PCA plot); evaluation has its own id, so
changing the evaluation never retrains. The stage returns its steps with the trained artifact last
(its main output).

Tokens (every kind) are ``tokens: words`` (runs of letters, digits and underscores: punctuation is dropped,
so "king," and "king" are one word) or ``whitespace`` (split on spaces), lowercased if ``lowercase``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

from corpusforge.storage.store import ArtifactStore
from corpusforge.tasks.embeddings.config import EmbeddingsConfig, embeddings_config_from_dict
from corpusforge.tasks.orchestration import prefect_task
from corpusforge.tasks.step import StepResult, log_step_outcome


def build_embeddings(corpus: StepResult, cfg: EmbeddingsConfig, store: ArtifactStore,
                     on_progress=None) -> list[StepResult]:
    """Pure core of the stage: the steps it ran, the trained artifact last.

    ``on_progress(phase, done, total)``, for steps that are computed (not reused): phase ``epochs`` (word2vec,
    fastText, GloVe: 0 before training, then after each epoch) and ``evaluation`` (analogy questions, word
    pairs, neighbour and query lookups done; see tasks/embeddings/eval.py). TF-IDF reports nothing.
    """
    def phase(name: str):
        return None if on_progress is None else (lambda done, total: on_progress(name, done, total))

    if cfg.kind == "tfidf":
        from corpusforge.tasks.embeddings.sparse import build_sparse_vectors

        return [build_sparse_vectors(corpus, cfg, store)]
    if cfg.kind == "glove":
        from corpusforge.tasks.embeddings.glove import build_cooccurrence, build_glove

        cooc = build_cooccurrence(corpus, cfg, store)
        trained = build_glove(cooc, cfg, store, on_progress=phase("epochs"))
        steps = [cooc]
    else:
        from corpusforge.tasks.embeddings.word2vec import build_gensim_embeddings

        trained = build_gensim_embeddings(corpus, cfg, store, on_progress=phase("epochs"))
        steps = []
    if cfg.has_evaluation:
        from corpusforge.tasks.embeddings.eval import build_embeddings_eval

        steps.append(build_embeddings_eval(trained, cfg, store, on_progress=phase("evaluation")))
    return [*steps, trained]


@contextlib.contextmanager
def phase_progress(prefix: str) -> Iterator[Callable[[str, int, int], None]]:
    """Yield ``update(phase, done, total)``: one bar per phase ("<prefix>: <phase>"), the previous one closed when
    the next phase starts. Drawn by tasks/progress.py's ``shard_progress``: on stderr, and only when stderr is a
    terminal (silent in pipes, logs, CI and worker processes, as the corpus bars are)."""
    from corpusforge.tasks.progress import shard_progress

    current: dict[str, Any] = {}

    def update(phase: str, done: int, total: int) -> None:
        if current.get("phase") != phase:
            if "bar" in current:
                current.pop("bar").__exit__(None, None, None)
            current["bar"] = shard_progress(f"{prefix}: {phase}")
            current["phase"], current["update"] = phase, current["bar"].__enter__()
        current["update"](done, total)

    try:
        yield update
    finally:
        if "bar" in current:
            current.pop("bar").__exit__(None, None, None)


@prefect_task(name="embeddings")
def embeddings_task(upstream: dict, config: dict, store_root: str) -> list[dict]:
    corpus = StepResult.from_dict(upstream)
    cfg = embeddings_config_from_dict(config)
    with phase_progress(f"embeddings {cfg.name}") as update:
        results = build_embeddings(corpus, cfg, ArtifactStore(store_root), on_progress=update)
    for r in results:
        log_step_outcome(r)
    return [r.to_dict() for r in results]
