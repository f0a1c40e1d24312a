"""ARPA files for :class:`models.ngram.BackoffModel`: write (plain or .gz) and read.

Written the way KenLM ``lmplz`` writes them: a ``\\data\\`` header with the n-gram counts, then per order
``log10prob<TAB>w1 .. wn<TAB>log10backoff`` (every order below the highest carries a backoff column, 0
when the n-gram is no context), probabilities already interpolated. ``<s>`` has log10 probability 0
(never predicted), the unknown-word entry is ``<unk>`` (a literal ``<unk>`` of the training text is that
entry), and log10 0 (-inf: MLE's unseen mass) is written as -99, the ARPA convention. Floats are
printed with 8 significant digits (KenLM stores 32-bit floats).
"""

from __future__ import annotations

import gzip
import io
from pathlib import Path

import numpy as np

from models.ngram import BOS, BOS_ID, EOS, EOS_ID, UNK, UNK_ID, BackoffModel

ARPA_ZERO = -99.0


def _open(path: str | Path, mode: str):
    path = Path(path)
    if path.suffix == ".gz":
        return io.TextIOWrapper(gzip.open(path, mode + "b", compresslevel=1), encoding="utf-8", newline="\n")
    return open(path, mode, encoding="utf-8", newline="\n")


def _fmt(values: np.ndarray) -> list[str]:
    v = np.where(np.isneginf(values), ARPA_ZERO, values)
    v = np.where(v == 0.0, 0.0, v)  # no "-0"
    return ["%.8g" % x for x in v.tolist()]


def write_arpa(model: BackoffModel, path: str | Path) -> Path:
    """Write ``model`` as ARPA text (gzip when the name ends in .gz)."""
    if not model.is_probability:
        raise ValueError(f"{model.method} gives scores, not probabilities: an ARPA file would misrepresent it")
    path = Path(path)
    words = np.array(model.words, dtype=object)
    with _open(path, "w") as f:
        f.write("\\data\\\n")
        for n in range(1, model.order + 1):
            f.write(f"ngram {n}={len(model.ids[n - 1])}\n")
        for n in range(1, model.order + 1):
            f.write(f"\n\\{n}-grams:\n")
            ids = model.ids[n - 1]
            cols = [words[ids[:, j]] for j in range(n)]
            grams = cols[0] if n == 1 else [" ".join(t) for t in zip(*cols)]
            probs = _fmt(model.logprob[n - 1])
            if n < model.order:
                backs = _fmt(model.backoff[n - 1])
                f.writelines(f"{p}\t{g}\t{b}\n" for p, g, b in zip(probs, grams, backs))
            else:
                f.writelines(f"{p}\t{g}\n" for p, g in zip(probs, grams))
        f.write("\n\\end\\\n")
    return path


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
