"""Steps ``cooccurrence`` (DuckDB) and ``embeddings`` for kind glove (PyTorch fit in models/glove.py).

Co-occurrence, as in the GloVe reference tool (cooccur.c, symmetric mode):
- tokens: whitespace-split train-split text (lowercased if configured);
- the vocabulary is the words with at least ``min_count`` occurrences, ids in frequency order (ties by
  word); other words are removed *before* windowing, as in the reference tool and in word2vec;
- for each word and each of the ``window`` words before it in the same document, at distance d,
  X[w, c] += 1/d and X[c, w] += 1/d.
Counting is one hash join on a global token position (b.pos = a.pos + d), so it is linear in tokens x
window however long the documents are. The artifact holds ``cooccurrence.parquet`` (i, j, x: the
non-zero entries as triplets, sorted by i, j) and ``vocab.parquet`` (id, word, count).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from corpusforge.storage.store import ArtifactStore
from corpusforge.tasks.embeddings.config import EMBEDDINGS_STEP, EmbeddingsConfig
from corpusforge.tasks.embeddings.inputs import train_split_path
from corpusforge.tasks.step import StepResult, artifact_input, run_step
from corpusforge.tasks.training import refuse_non_finite

COOCCURRENCE_STEP = "cooccurrence"
COOCCURRENCE_VERSION = 1
# the embeddings step, with a version of its own: 3 since GloVe caps its batch where the most frequent word's summed
# step would overshoot (models.glove.stable_batch_size: a small corpus gave NaN vectors with the default 32,768); a
# diverged fit is never published. (2 was the embeddings step's counter, shared until then.)
GLOVE_STEP, GLOVE_VERSION = EMBEDDINGS_STEP, 3
WORDS_RE = r"[\p{L}\p{N}_]+"  # tokens: words (as tasks/embeddings_sparse and models/word2vec.tokenize)
# Python's str.split() whitespace (tokens: whitespace), in RE2 syntax.
WHITESPACE_RE = r"[\s\p{Z}\x{1c}-\x{1f}\x{85}]+"


def count_cooccurrences(train_parquet: Path, out: Path, window: int, min_count: int, lowercase: bool,
                        threads: int = 0, tokens: str = "whitespace") -> dict[str, Any]:
    """Write vocab.parquet and cooccurrence.parquet into ``out``; return counts for the manifest."""
    import duckdb

    con = duckdb.connect()
    try:
        if threads:
            con.execute(f"SET threads = {int(threads)}")
        text = "lower(text)" if lowercase else "text"
        split = (f"regexp_extract_all({text}, '{WORDS_RE}')" if tokens == "words"
                 else f"string_split_regex({text}, '{WHITESPACE_RE}')")
        con.execute(
            f"""CREATE TEMP TABLE tok AS
                WITH docs AS (SELECT row_number() OVER () AS doc,
                                     {split} AS toks
                              FROM read_parquet(?))
                SELECT doc, unnest(toks) AS word, generate_subscripts(toks, 1) AS pos FROM docs""",
            [str(train_parquet)],
        )
        con.execute(
            """CREATE TEMP TABLE vocab AS
               SELECT (row_number() OVER (ORDER BY count DESC, word) - 1)::INTEGER AS id, word, count
               FROM (SELECT word, count(*)::BIGINT AS count FROM tok WHERE word <> '' GROUP BY word
                     HAVING count(*) >= ?)""",
            [max(min_count, 1)],
        )
        con.execute(
            """CREATE TEMP TABLE kept AS
               SELECT t.doc, v.id, row_number() OVER (ORDER BY t.doc, t.pos) AS g
               FROM tok t JOIN vocab v USING (word)"""
        )
        con.execute(
            f"""CREATE TEMP TABLE cooc AS
                WITH pairs AS (
                    SELECT a.id AS w, b.id AS c, 1.0 / d.d AS x
                    FROM kept a CROSS JOIN range(1, {int(window) + 1}) AS d(d)
                    JOIN kept b ON b.g = a.g - d.d AND b.doc = a.doc)
                SELECT i::INTEGER AS i, j::INTEGER AS j, sum(x)::DOUBLE AS x FROM (
                    SELECT w AS i, c AS j, x FROM pairs UNION ALL SELECT c AS i, w AS j, x FROM pairs)
                GROUP BY i, j"""
        )
        con.execute(f"COPY (SELECT * FROM vocab ORDER BY id) TO '{out / 'vocab.parquet'}' (FORMAT parquet)")
        con.execute(f"COPY (SELECT * FROM cooc ORDER BY i, j) TO '{out / 'cooccurrence.parquet'}' (FORMAT parquet)")
        tokens, kept = con.execute("SELECT (SELECT count(*) FROM tok WHERE word <> ''), (SELECT count(*) FROM kept)").fetchone()
        vocab_size = con.execute("SELECT count(*) FROM vocab").fetchone()[0]
        nnz, total = con.execute("SELECT count(*), coalesce(sum(x), 0) FROM cooc").fetchone()
    finally:
        con.close()
    return {"tokens": int(tokens), "tokens_in_vocab": int(kept), "vocab_size": int(vocab_size),
            "nonzero": int(nnz), "total_weight": float(total)}


def build_cooccurrence(corpus: StepResult, cfg: EmbeddingsConfig, store: ArtifactStore) -> StepResult:
    """The co-occurrence artifact: shared by every GloVe fit with the same window, min_count, lowercase."""
    train = train_split_path(corpus)

    def build(out: Path) -> dict[str, Any]:
        metrics = count_cooccurrences(train, out, cfg.window, cfg.min_count, cfg.lowercase, tokens=cfg.tokens)
        return {"metrics": metrics, "files_written": ["vocab.parquet", "cooccurrence.parquet"]}

    return run_step(
        store, step=COOCCURRENCE_STEP, version=COOCCURRENCE_VERSION, name=cfg.name,
        config=cfg.step_config("cooccurrence") | {"weighting": "1/d", "symmetric": True},
        inputs=[artifact_input(corpus)], build=build, libraries=("duckdb",),
    )


def glove_params_for(cfg: EmbeddingsConfig):
    from corpusforge.models.glove import GloveParams

    return GloveParams(dim=cfg.dim, epochs=cfg.epochs, learning_rate=cfg.learning_rate or 0.05, x_max=cfg.x_max,
                       alpha=cfg.glove_alpha, batch_size=cfg.batch_size, seed=cfg.seed)


def build_glove(cooc: StepResult, cfg: EmbeddingsConfig, store: ArtifactStore, on_progress=None) -> StepResult:
    """Fit GloVe on a co-occurrence artifact. ``device`` is where, not what: it is not part of the id."""
    return run_step(
        store, step=GLOVE_STEP, version=GLOVE_VERSION, name=cfg.name,
        config=cfg.step_config("glove"),
        inputs=[artifact_input(cooc)], build=lambda out: _fit(out, cooc, cfg, on_progress),
        libraries=("torch", "duckdb", "gensim", "numpy"),
    )


def _fit(out: Path, cooc: StepResult, cfg: EmbeddingsConfig, on_progress) -> dict[str, Any]:
    import polars as pl

    from corpusforge.models.glove import fit_glove, resolve_device
    from corpusforge.models.word2vec import keyed_vectors, save_vectors

    triplets = pl.read_parquet(Path(cooc.path) / "cooccurrence.parquet")
    vocab = pl.read_parquet(Path(cooc.path) / "vocab.parquet").sort("id")
    device = resolve_device(cfg.device)

    def on_epoch(epoch: int, metrics: dict[str, float]) -> None:
        if on_progress is not None:
            on_progress(epoch, cfg.epochs)

    if on_progress is not None:
        on_progress(0, cfg.epochs)

    params = glove_params_for(cfg)
    vectors, history = fit_glove(triplets["i"].to_numpy(), triplets["j"].to_numpy(), triplets["x"].to_numpy(),
                                 vocab.height, params, device=str(device), on_epoch=on_epoch)
    refuse_non_finite(f"embeddings {cfg.name} (glove)", metrics={"final_loss": history[-1]["loss"]},
                      weights={"vectors": vectors},
                      change=f"lower embeddings.learning_rate (now {params.learning_rate:g}; glove.c's is 0.05)")
    files = save_vectors(keyed_vectors(vocab["word"].to_list(), vectors), out)
    vocab.select("word", "count").write_parquet(out / "vocab.parquet")
    (out / "training.json").write_text(json.dumps({"device": str(device), "epochs": history}, indent=2) + "\n")
    info = {"kind": "glove", "dim": cfg.dim, "vocab_size": vocab.height, "files": files, "tokens": cfg.tokens,
            "lowercase": cfg.lowercase, "embedding": "word + context vectors"}
    (out / "embeddings.json").write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
    seconds = [h["epoch_seconds"] for h in history]
    metrics = {"vocab_size": vocab.height, "dim": cfg.dim, "nonzero": triplets.height, "final_loss": history[-1]["loss"],
               "batch_size": history[-1]["batch_size"],  # embeddings.batch_size or less (models.glove.stable_batch_size)
               "epoch_seconds_mean": sum(seconds) / len(seconds), "train_seconds": sum(seconds)}
    return {"metrics": metrics, "embeddings": info, "vectors_path": "vectors.txt", "device": str(device)}
