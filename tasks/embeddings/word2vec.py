"""Step ``embeddings`` for kinds word2vec and fastText: gensim training on the corpus' train split.

Files: ``vectors.txt`` and ``vectors.bin`` (word2vec formats, the primary artifact), ``vocab.parquet``
(word, count, in frequency order), ``fasttext.bin`` (fastText only: Facebook's format, with the
n-gram vectors for unseen words), ``gensim/<kind>.model`` (gensim's native pickle-based save, an
export for gensim users only; see models/word2vec.py) and ``embeddings.json`` (what the files are).
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from corpusforge.storage.store import ArtifactStore
from corpusforge.tasks.embeddings.config import (
    EMBEDDINGS_STEP,
    EMBEDDINGS_VERSION,
    EmbeddingsConfig,
)
from corpusforge.tasks.embeddings.inputs import train_split_path
from corpusforge.tasks.step import StepResult, artifact_input, run_step
from corpusforge.tasks.training import refuse_non_finite

LIBRARIES = ("gensim", "numpy", "polars")


def gensim_params_for(cfg: EmbeddingsConfig) -> dict[str, Any]:
    """The exact gensim keyword arguments a config trains with (the benchmark reuses them)."""
    from corpusforge.models.word2vec import gensim_params

    return gensim_params(
        sg=cfg.sg, dim=cfg.dim, window=cfg.window, negative=cfg.negative, min_count=cfg.min_count,
        epochs=cfg.epochs, sample=cfg.sample, workers=cfg.resolved_workers(), seed=cfg.seed,
        learning_rate=cfg.learning_rate, min_n=cfg.min_n, max_n=cfg.max_n, bucket=cfg.bucket,
        fasttext=cfg.kind == "fasttext",
    )


def build_gensim_embeddings(corpus: StepResult, cfg: EmbeddingsConfig, store: ArtifactStore,
                            on_progress=None) -> StepResult:
    """``on_progress(epochs_done, epochs)``: 0 before training, then after each epoch (a gensim callback)."""
    if cfg.kind not in ("word2vec", "fasttext"):
        raise ValueError(f"kind: build_gensim_embeddings trains word2vec or fasttext, not {cfg.kind!r}")
    return run_step(
        store,
        step=EMBEDDINGS_STEP,
        version=EMBEDDINGS_VERSION,
        name=cfg.name,
        config=cfg.step_config(cfg.kind),
        inputs=[artifact_input(corpus)],
        build=lambda out: _train(out, corpus, cfg, on_progress),
        libraries=LIBRARIES,
    )


def _train(out: Path, corpus: StepResult, cfg: EmbeddingsConfig, on_progress=None) -> dict[str, Any]:
    import polars as pl

    from corpusforge.models.word2vec import save_vectors, train_gensim, write_sentences

    texts = pl.read_parquet(train_split_path(corpus), columns=["text"])["text"].to_list()
    fasttext = cfg.kind == "fasttext"
    with tempfile.TemporaryDirectory(prefix="corpusforge-w2v-") as tmp:
        sentences = Path(tmp) / "sentences.txt"
        tokens = write_sentences(texts, sentences, lowercase=cfg.lowercase, tokens=cfg.tokens)
        if tokens == 0:
            raise ValueError(f"corpus {corpus.id[:12]}: the train split has no tokens to train on")
        if on_progress is not None:
            on_progress(0, cfg.epochs)
        on_epoch = None if on_progress is None else (lambda epoch, _metrics: on_progress(epoch, cfg.epochs))
        model, metrics = train_gensim(sentences, gensim_params_for(cfg), fasttext=fasttext, on_epoch=on_epoch)
    if len(model.wv) == 0:
        raise ValueError(f"min_count: no word occurs {cfg.min_count} times in the train split")
    weights = {"vectors": model.wv.vectors}
    if fasttext:
        weights["ngram_vectors"] = model.wv.vectors_ngrams
    refuse_non_finite(f"embeddings {cfg.name} ({cfg.kind})", weights=weights,
                      change=f"lower embeddings.learning_rate (now {model.alpha:g}; gensim's default is 0.025)")
    files = save_vectors(model.wv, out)
    pl.DataFrame({"word": list(model.wv.index_to_key),
                  "count": [int(model.wv.get_vecattr(w, "count")) for w in model.wv.index_to_key]}
                 ).write_parquet(out / "vocab.parquet")
    if fasttext:
        from gensim.models.fasttext import save_facebook_model

        save_facebook_model(model, str(out / "fasttext.bin"))
        files["fasttext_binary"] = "fasttext.bin"
    (out / "gensim").mkdir()
    model.lifecycle_events = None  # gensim's event log records dates and hosts: not part of the model
    model.total_train_time = 0.0  # a duration (in the manifest's metrics), not part of the model
    model.save(str(out / "gensim" / f"{cfg.kind}.model"))  # pickle: export for gensim users only
    files["gensim_native"] = f"gensim/{cfg.kind}.model"
    info = {"kind": cfg.kind, "dim": cfg.dim, "vocab_size": len(model.wv), "files": files, "tokens": cfg.tokens,
            "lowercase": cfg.lowercase}
    (out / "embeddings.json").write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
    result = {"metrics": {**metrics, "dim": cfg.dim}, "embeddings": info, "vectors_path": "vectors.txt"}
    workers = cfg.resolved_workers()
    if workers > 1:  # gensim's documentation: multi-threaded training is not reproducible
        why = (f"trained by {workers} gensim worker threads, whose interleaving changes the vectors from run to "
               "run (embeddings.workers: 1 gives byte-identical files)")
        result["nondeterministic"] = {p.relative_to(out).as_posix(): why for p in sorted(out.rglob("*"))
                                      if p.is_file() and p.name not in ("vocab.parquet", "embeddings.json")}
    return result
