"""Word vectors trained elsewhere, brought into the store (``corpusforge embed import FILE``): word2vec's text or
binary format (Google News, fastText's ``.vec``) or GloVe's text format (a word and its numbers per line, no
header). The artifact is an ``embeddings`` artifact like a trained one (``vectors.txt``, ``vectors.bin``,
``embeddings.json``), so everything that reads word vectors reads it: ``embed neighbors``/``eval``/``contextual``,
``classify.embeddings`` (an embedding layer started from them), ``Artifact.load()``.

Its id is made of the file's content digest and name, the format, ``limit`` and ``lowercase``: importing the same
file again reuses it, wherever it lies. The manifest records the file as a ``source`` input (as a corpus records
its files); the vectors themselves are copied, so the store never reads the file again.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from corpusforge.storage.store import ArtifactStore
from corpusforge.tasks.config import ConfigError
from corpusforge.tasks.embeddings.config import EMBEDDINGS_STEP
from corpusforge.tasks.step import StepResult, run_step, slug

IMPORT_VERSION = 1
FORMATS = ("auto", "word2vec", "word2vec-binary", "glove")


def detect_format(path: Path) -> str:
    """``word2vec-binary`` for a ``.bin`` file; else ``word2vec`` when the first line is a header of two counts
    (words, dimensions), ``glove`` when it is already a word and its numbers."""
    if path.suffix == ".bin":
        return "word2vec-binary"
    with open(path, "rb") as fh:
        first = fh.readline(1 << 20).split()
    if len(first) == 2 and all(p.isdigit() for p in first):
        return "word2vec"
    if len(first) >= 2:
        try:
            [float(p) for p in first[1:]]
            return "glove"
        except ValueError:
            pass
    raise ConfigError(f"{path}: neither word2vec (a 'WORDS DIMENSIONS' header) nor GloVe text (a word and its "
                      "numbers per line); give --format")


def import_vectors(path: str | Path, store: ArtifactStore, *, name: str | None = None, fmt: str = "auto",
                   lowercase: bool = False, limit: int | None = None) -> StepResult:
    """Publish (or reuse) the vectors of ``path`` as an embeddings artifact named ``name`` (default: the file's
    stem). ``lowercase``: the vectors' words are lowercase, so queries are folded (as for vectors trained with
    ``embeddings.lowercase``); ``limit``: keep only the first N words (the files list the most frequent first)."""
    from corpusforge.storage.hashing import sha256_file
    from corpusforge.tasks.corpus.shard import recorded_source_path

    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"vectors file {str(path)!r} does not exist")
    if fmt not in FORMATS:
        raise ConfigError(f"format: {fmt!r} is not one of {', '.join(FORMATS)}")
    if limit is not None and limit < 1:
        raise ConfigError(f"limit: must be >= 1, got {limit}")
    resolved = detect_format(path) if fmt == "auto" else fmt
    config = {"kind": "glove" if resolved == "glove" else "word2vec", "imported": resolved, "lowercase": lowercase,
              "limit": limit}
    source = {"id": sha256_file(path), "kind": "source", "name": path.name, "path": recorded_source_path(str(path)),
              "size": path.stat().st_size}
    return run_step(store, step=EMBEDDINGS_STEP, version=IMPORT_VERSION, name=slug(name or path.stem),
                    config=config, inputs=[source], build=lambda out: _copy(out, path, resolved, limit, config),
                    libraries=("gensim", "numpy"))


def _copy(out: Path, path: Path, fmt: str, limit: int | None, config: dict[str, Any]) -> dict[str, Any]:
    import numpy as np
    from gensim.models import KeyedVectors

    from corpusforge.models.word2vec import save_vectors
    from corpusforge.tasks.training import refuse_non_finite

    try:
        kv = KeyedVectors.load_word2vec_format(str(path), binary=fmt == "word2vec-binary", no_header=fmt == "glove",
                                               limit=limit)
    except (ValueError, UnicodeDecodeError, EOFError) as exc:
        raise ConfigError(f"{path}: not readable as {fmt} vectors ({type(exc).__name__}: {exc})") from None
    if len(kv) == 0:
        raise ConfigError(f"{path}: holds no vectors")
    refuse_non_finite(f"embeddings import {path.name}", weights={"vectors": kv.vectors},
                      change="check the file: a vector holds NaN or infinity")
    files = save_vectors(kv, out)
    info = {"kind": config["kind"], "imported": fmt, "dim": int(kv.vector_size), "vocab_size": len(kv),
            "files": files, "lowercase": config["lowercase"], "source": path.name}
    (out / "embeddings.json").write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
    norms = np.linalg.norm(kv.vectors, axis=1)
    return {"metrics": {"dim": float(kv.vector_size), "vocab_size": float(len(kv)),
                        "mean_norm": float(norms.mean())},
            "embeddings": info, "vectors_path": "vectors.txt"}
