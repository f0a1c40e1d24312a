"""ARPA files for :class:`corpusforge.models.ngram.BackoffModel`: write (plain or .gz) and read.

Written the way KenLM ``lmplz`` writes them: a ``\\data\\`` header with the n-gram counts, then per order
``log10prob<TAB>w1 .. wn<TAB>log10backoff`` (every order below the highest carries a backoff column, 0
when the n-gram is no context), probabilities already interpolated. ``<s>`` has log10 probability 0
(never predicted), the unknown-word entry is ``<unk>`` (a literal ``<unk>`` of the training text is that
entry), and log10 0 (-inf: MLE's unseen mass) is written as -99, the ARPA convention. Floats are
printed like ``"%.8g"``: 8 significant digits (KenLM stores 32-bit floats).

The writer is vectorized and streamed (models/ngram_arpa_text.py builds the lines of a block of rows
in numpy); a second thread compresses and writes while the next block is built. A ``.gz`` file is one
deflate stream at level 1 with a gzip header that carries no name and mtime 0, so the same model gives
the same bytes on every run, whatever the file is called.
"""

from __future__ import annotations

import gzip
import io
import queue
import threading
import zlib
from collections.abc import Callable
from pathlib import Path

import numpy as np

from corpusforge.models.ngram import BOS, BOS_ID, EOS, EOS_ID, UNK, UNK_ID, BackoffModel
from corpusforge.models.ngram_arpa_text import ARPA_ZERO, arpa_lines, word_matrix

GZIP_LEVEL = 1  # ARPA text compresses about 3x at level 1; higher levels cost several times the CPU
BLOCK_BYTES = 4 << 20  # size of one block's byte matrix: small enough to stay in cache-sized buffers

__all__ = ["ARPA_ZERO", "read_arpa", "write_arpa"]


def _open(path: str | Path, mode: str):
    path = Path(path)
    if path.suffix == ".gz":
        return io.TextIOWrapper(gzip.open(path, mode + "b", compresslevel=GZIP_LEVEL), encoding="utf-8", newline="\n")
    return open(path, mode, encoding="utf-8", newline="\n")


def write_arpa(model: BackoffModel, path: str | Path, block_rows: int | None = None,
               on_progress: Callable[[int, int], None] | None = None) -> Path:
    """Write ``model`` as ARPA text (gzip when the name ends in .gz). ``block_rows`` fixes how many
    n-grams are formatted at once (default: about BLOCK_BYTES of line matrix); the output does not
    depend on it. ``on_progress(done, N)``: 0 first, then after each order's section is formatted."""
    if not model.is_probability:
        raise ValueError(f"{model.method} gives scores, not probabilities: an ARPA file would misrepresent it")
    path = Path(path)
    words = word_matrix(model.words)
    with _BackgroundWriter(path, compress=path.suffix == ".gz") as sink:
        sink.put(("\\data\\\n" + "".join(f"ngram {n}={len(model.ids[n - 1])}\n"
                                         for n in range(1, model.order + 1))).encode())
        if on_progress:
            on_progress(0, model.order)
        for n in range(1, model.order + 1):
            sink.put(f"\n\\{n}-grams:\n".encode())
            ids = model.ids[n - 1]
            rows = block_rows or max(1, BLOCK_BYTES // (40 + n * (words.shape[1] + 1)))
            for lo in range(0, len(ids), rows):
                hi = lo + rows
                backoff = model.backoff[n - 1][lo:hi] if n < model.order else None
                sink.put(arpa_lines(words, ids[lo:hi], model.logprob[n - 1][lo:hi], backoff))
            if on_progress:
                on_progress(n, model.order)
        sink.put(b"\n\\end\\\n")
    return path


class _BackgroundWriter:
    """Compresses (gzip, fixed header) and writes byte blocks in a thread, so that formatting the next
    block overlaps with it (zlib and file writes release the GIL). An error on either side is raised."""

    def __init__(self, path: Path, compress: bool):
        self.path = path
        self.compressor = zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, 16 + zlib.MAX_WBITS) if compress else None
        self.blocks: queue.Queue = queue.Queue(maxsize=4)
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name="arpa-writer", daemon=True)

    def __enter__(self) -> "_BackgroundWriter":
        self.file = open(self.path, "wb")
        self.thread.start()
        return self

    def put(self, block: bytes) -> None:
        if self.error is not None:
            raise self.error
        self.blocks.put(block)

    def _run(self) -> None:
        try:
            while (block := self.blocks.get()) is not None:
                self.file.write(self.compressor.compress(block) if self.compressor else block)
            if self.compressor:
                self.file.write(self.compressor.flush())
        except BaseException as exc:  # handed to the main thread
            self.error = exc
            while self.blocks.get() is not None:  # drain so that the producer never blocks
                pass

    def __exit__(self, exc_type, exc, tb) -> None:
        self.blocks.put(None)
        self.thread.join()
        self.file.close()
        if exc_type is None and self.error is not None:
            raise self.error
        if exc_type is not None or self.error is not None:
            self.path.unlink(missing_ok=True)  # never leave a truncated ARPA behind


def read_arpa(path: str | Path) -> BackoffModel:
    """Read an ARPA file (plain or .gz) into a BackoffModel (method 'arpa'); -99 stays -99, as in KenLM."""
    counts: dict[int, int] = {}
    sections: dict[int, tuple[list[str], list[float], list[float]]] = {}
    with _open(path, "r") as f:
        state, order = "start", 0
        for raw in f:
            line = raw.strip()
            if not line:
                continue
            if line == "\\data\\":
                state = "header"
                continue
            if line == "\\end\\":
                break
            if line.startswith("\\") and line.endswith("-grams:"):
                order = int(line[1:-7])
                sections[order] = ([], [], [])
                state = "grams"
                continue
            if state == "header" and line.startswith("ngram "):
                n, _, c = line[6:].partition("=")
                counts[int(n)] = int(c)
            elif state == "grams":
                parts = line.split("\t") if "\t" in line else line.split()
                if "\t" in line:
                    prob, gram = parts[0], parts[1]
                    back = parts[2] if len(parts) > 2 else "0"
                else:  # space separated: prob w1 .. wn [backoff]
                    prob, gram = parts[0], " ".join(parts[1:1 + order])
                    back = parts[1 + order] if len(parts) > 1 + order else "0"
                g, p, b = sections[order]
                g.append(gram)
                p.append(float(prob))
                b.append(float(back))
    if 1 not in sections:
        raise ValueError(f"{path}: no \\1-grams: section")
    for n, c in counts.items():
        if n in sections and len(sections[n][0]) != c:
            raise ValueError(f"{path}: header says {c} {n}-grams, found {len(sections[n][0])}")
    uni_words, uni_p, uni_b = sections[1]
    rest = [w for w in uni_words if w not in (UNK, BOS, EOS)]
    words = [UNK, BOS, EOS] + rest
    index = {w: i for i, w in enumerate(words)}
    N = max(sections)
    logprob = [np.full(len(words), -100.0)]  # an ARPA without <unk>: KenLM's -100 for it
    backoff = [np.zeros(len(words))]
    for w, p, b in zip(uni_words, uni_p, uni_b):
        logprob[0][index[w]] = p
        backoff[0][index[w]] = b
    ids = [np.arange(len(words), dtype=np.int32).reshape(-1, 1)]
    for n in range(2, N + 1):
        g, p, b = sections.get(n, ([], [], []))
        try:
            arr = np.array([[index[w] for w in gram.split(" ")] for gram in g], dtype=np.int32).reshape(len(g), n)
        except KeyError as exc:
            raise ValueError(f"{path}: {n}-gram word {exc} is not a unigram") from None
        ids.append(arr)
        logprob.append(np.array(p, dtype=np.float64))
        backoff.append(np.array(b, dtype=np.float64))
    assert words[UNK_ID] == UNK and words[BOS_ID] == BOS and words[EOS_ID] == EOS
    return BackoffModel(words, ids, logprob, backoff, method="arpa", info={"source": str(path)})
