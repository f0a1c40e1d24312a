"""word2vec (skip-gram / CBOW with negative sampling) and fastText through gensim, plus vector I/O.

gensim's optimized C loops are the engine; this module only maps our parameters onto it and writes
the standard formats. Training reads a ``corpus_file`` (one sentence per line, tokens separated by
spaces: gensim's LineSentence format). In that mode every worker thread reads its own slice of the
file in C, without the Python iterator and the GIL that the ``sentences=`` mode goes through, so it
is never slower than the usual ``Word2Vec(sentences=...)`` call and scales with workers. Lines longer
than 10,000 tokens are cut into 10,000-token sentences by gensim, as in its other modes.

Formats:
- ``vectors.txt`` / ``vectors.bin``: word2vec text and binary formats (words in frequency order),
  loadable with ``gensim.models.KeyedVectors.load_word2vec_format`` and by most other tools. These are
  the primary artifacts: plain data, no code.
- ``fasttext.bin`` (fastText only): Facebook's binary format via ``save_facebook_model``; it keeps
  the character n-gram vectors, so ``gensim.models.fasttext.load_facebook_vectors`` gives vectors for
  unseen words. Also plain data, no pickle.
- ``gensim/<kind>.model``: gensim's native ``save()``, kept only as an export for gensim users who want
  to continue training. gensim's native format is a Python pickle (plus ``.npy`` arrays), so it can
  execute code when loaded and breaks across gensim versions; corpusforge itself never loads it.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

MAX_SENTENCE_TOKENS = 10_000  # gensim's MAX_WORDS_IN_BATCH


def gensim_params(
    *, sg: int = 1, dim: int = 100, window: int = 5, negative: int = 5, min_count: int = 5, epochs: int = 5,
    sample: float = 1e-3, workers: int = 1, seed: int = 1, learning_rate: float = 0.0,
    min_n: int = 3, max_n: int = 6, bucket: int = 200_000, fasttext: bool = False,
) -> dict[str, Any]:
    """Keyword arguments for ``gensim.models.Word2Vec`` / ``FastText`` (negative sampling, no hierarchical softmax)."""
    kw: dict[str, Any] = dict(sg=sg, vector_size=dim, window=window, negative=negative, hs=0, min_count=min_count,
                              epochs=epochs, sample=sample, workers=workers, seed=seed)
    if learning_rate > 0:
        kw["alpha"] = learning_rate
    if fasttext:
        kw.update(min_n=min_n, max_n=max_n, bucket=bucket)
    return kw


WORDS = re.compile(r"\w+")  # letters, digits, underscore (Unicode): tasks/embeddings_sparse.WORDS_RE in Python


def tokenize(text: str, tokens: str = "whitespace", lowercase: bool = True) -> list[str]:
    """``words``: runs of letters/digits/underscore (punctuation dropped); ``whitespace``: ``str.split()``."""
    text = text.lower() if lowercase else text
    return WORDS.findall(text) if tokens == "words" else text.split()


def write_sentences(documents: Sequence[str], path: Path, lowercase: bool = True, tokens: str = "whitespace") -> int:
    """Write one tokenized document per line (LineSentence format); return the token count."""
    n = 0
    with open(path, "w", encoding="utf-8") as fh:
        for text in documents:
            toks = tokenize(text, tokens, lowercase)
            if not toks:
                continue
            n += len(toks)
            for start in range(0, len(toks), MAX_SENTENCE_TOKENS):
                fh.write(" ".join(toks[start : start + MAX_SENTENCE_TOKENS]))
                fh.write("\n")
    return n


def train_gensim(corpus_file: Path, params: dict[str, Any], fasttext: bool = False,
                 on_epoch: Callable[[int, dict[str, float]], None] | None = None):
    """Build the vocabulary and train; return (model, metrics). ``params`` come from :func:`gensim_params`."""
    from gensim.models import FastText, Word2Vec
    from gensim.models.callbacks import CallbackAny2Vec

    class _Epochs(CallbackAny2Vec):
        def __init__(self) -> None:
            self.epoch, self.t0 = 0, time.perf_counter()

        def on_epoch_end(self, model) -> None:
            self.epoch += 1
            if on_epoch is not None:
                on_epoch(self.epoch, {"seconds": time.perf_counter() - self.t0})

    cls = FastText if fasttext else Word2Vec
    model = cls(**params)
    t0 = time.perf_counter()
    model.build_vocab(corpus_file=str(corpus_file))
    vocab_seconds = time.perf_counter() - t0
    t1 = time.perf_counter()
    trained_words, raw_words = model.train(
        corpus_file=str(corpus_file), total_examples=model.corpus_count, total_words=model.corpus_total_words,
        epochs=model.epochs, callbacks=[_Epochs()],
    )
    train_seconds = time.perf_counter() - t1
    metrics = {
        "vocab_size": len(model.wv),
        "corpus_words": int(model.corpus_total_words),
        "trained_words": int(trained_words),
        "vocab_seconds": vocab_seconds,
        "train_seconds": train_seconds,
        # raw words per second over all epochs: the figure gensim's own logs and papers report
        "words_per_second": float(model.corpus_total_words) * model.epochs / max(train_seconds, 1e-9),
    }
    return model, metrics


def keyed_vectors(words: Sequence[str], vectors: np.ndarray):
    """gensim KeyedVectors holding ``vectors`` for ``words`` (in the given order)."""
    from gensim.models import KeyedVectors

    kv = KeyedVectors(vector_size=int(vectors.shape[1]), count=0)
    kv.add_vectors(list(words), np.asarray(vectors, dtype=np.float32))
    return kv


def save_vectors(kv, out_dir: Path) -> dict[str, str]:
    """Write word2vec text and binary formats; return their file names."""
    kv.save_word2vec_format(str(out_dir / "vectors.txt"), binary=False)
    kv.save_word2vec_format(str(out_dir / "vectors.bin"), binary=True)
    return {"vectors_text": "vectors.txt", "vectors_binary": "vectors.bin"}


def load_vectors(path: Path) -> tuple[list[str], np.ndarray]:
    """(words in file order, float32 matrix) from a word2vec-format file (binary if it ends in .bin)."""
    from gensim.models import KeyedVectors

    kv = KeyedVectors.load_word2vec_format(str(path), binary=str(path).endswith(".bin"))
    return list(kv.index_to_key), np.asarray(kv.vectors, dtype=np.float32)


def load_fasttext_vectors(path: Path):
    """fastText vectors with n-grams (from ``fasttext.bin``): ``kv[word]`` works for unseen words too."""
    from gensim.models.fasttext import load_facebook_vectors

    return load_facebook_vectors(str(path))
