"""Standard intrinsic evaluations of word vectors, in numpy: analogies, word-pair similarity, neighbours.

The protocol follows gensim's ``KeyedVectors.evaluate_word_analogies`` / ``evaluate_word_pairs`` (the
numbers people quote), so scores are comparable with published ones:

- **Analogies** (questions-words: ``: section`` headers then ``a b c d`` lines): 3CosAdd over the
  unit-normalized vectors of the ``restrict_vocab`` most frequent words: the answer is the word
  nearest to b - a + c, excluding a, b and c. Questions with a word outside that vocabulary are not
  scored; they are counted, and coverage = scored / all questions. Case-insensitive by default.
- **Similarity** (WordSim-353, SimLex-999: ``word1<TAB>word2<TAB>score``, ``#`` comments, a header is
  skipped): Spearman (and Pearson) between human scores and cosine similarity over the pairs whose
  two words are known; OOV pairs are counted and reported, never silently dropped.

Vectors are passed as ``(words, matrix)`` with words in frequency order (the word2vec-format order).
The analogy search is batched (one matrix product per block of questions), which is why it is much
faster than asking gensim one question at a time.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Analogy:
    section: str
    a: str
    b: str
    c: str
    expected: str


def read_analogies(path: str | Path) -> list[Analogy]:
    """Questions from a questions-words file; lines that are not 4 words are skipped (as gensim does)."""
    out: list[Analogy] = []
    section = ""
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        if line.startswith(": "):
            section = line[2:].strip()
            continue
        parts = line.split()
        if len(parts) == 4:
            out.append(Analogy(section, *parts))
    return out


def read_word_pairs(path: str | Path) -> list[tuple[str, str, float]]:
    """(word1, word2, human score) from a tab- or whitespace-separated file; comments/headers skipped."""
    pairs = []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        parts = line.split("\t") if "\t" in line else line.split()
        if len(parts) < 3:
            continue
        try:
            score = float(parts[2])
        except ValueError:  # a header line such as "Word 1<TAB>Word 2<TAB>Human (mean)"
            continue
        pairs.append((parts[0].strip(), parts[1].strip(), score))
    return pairs


def unit_rows(vectors: np.ndarray) -> np.ndarray:
    v = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(v, axis=1, keepdims=True)
    return v / np.where(norms > 0, norms, 1.0)


class WordVectors:
    """Words in frequency order plus their vectors; the lookups every evaluation needs."""

    def __init__(self, words: Sequence[str], vectors: np.ndarray):
        if len(words) != len(vectors):
            raise ValueError(f"{len(words)} words but {len(vectors)} vectors")
        self.words = list(words)
        self.vectors = np.asarray(vectors, dtype=np.float32)
        self.unit = unit_rows(self.vectors)
        self.index = {w: i for i, w in enumerate(self.words)}

    def lookup(self, restrict_vocab: int = 300_000, case_insensitive: bool = True) -> dict[str, int]:
        """word -> row among the first ``restrict_vocab`` words; with case folding the most frequent wins."""
        keys = self.words[:restrict_vocab]
        if not case_insensitive:
            return {w: i for i, w in enumerate(keys)}
        out: dict[str, int] = {}
        for i, w in enumerate(keys):
            out.setdefault(w.lower(), i)
        return out

    def nearest(self, query: np.ndarray, topn: int = 10, exclude: Sequence[int] = ()) -> list[tuple[str, float]]:
        q = np.asarray(query, dtype=np.float32)
        q = q / (np.linalg.norm(q) or 1.0)
        sims = self.unit @ q
        if exclude:
            sims[list(exclude)] = -np.inf
        k = min(topn, len(self.words) - len(exclude))
        top = np.argpartition(-sims, k - 1)[:k] if k > 0 else np.array([], dtype=int)
        top = top[np.argsort(-sims[top], kind="stable")]
        return [(self.words[i], float(sims[i])) for i in top]

    def neighbors(self, word: str, topn: int = 10) -> list[tuple[str, float]]:
        if word not in self.index:
            raise KeyError(word)
        i = self.index[word]
        return self.nearest(self.unit[i], topn, exclude=[i])

    def most_similar(self, positive: Sequence[str], negative: Sequence[str] = (), topn: int = 10) -> list[tuple[str, float]]:
        """3CosAdd: nearest words to sum(unit(positive)) - sum(unit(negative)), inputs excluded."""
        missing = [w for w in (*positive, *negative) if w not in self.index]
        if missing:
            raise KeyError(", ".join(missing))
        ids_pos = [self.index[w] for w in positive]
        ids_neg = [self.index[w] for w in negative]
        query = self.unit[ids_pos].sum(axis=0) - (self.unit[ids_neg].sum(axis=0) if ids_neg else 0.0)
        return self.nearest(query, topn, exclude=sorted(set(ids_pos + ids_neg)))


def parse_query(query: str) -> tuple[list[str], list[str]]:
    """``"king - man + woman"`` -> (["king", "woman"], ["man"])."""
    positive, negative = [], []
    tokens = re.findall(r"[+-]|[^\s+-]+(?:-[^\s+-]+)*", query)
    sign = "+"
    for tok in tokens:
        if tok in "+-":
            sign = tok
            continue
        (positive if sign == "+" else negative).append(tok)
        sign = "+"
    if not positive:
        raise ValueError(f"query {query!r}: needs at least one word with a + sign")
    return positive, negative


def evaluate_analogies(
    wv: WordVectors, questions: Sequence[Analogy], restrict_vocab: int = 300_000, case_insensitive: bool = True,
    block: int = 2048,
) -> dict[str, Any]:
    """Accuracy overall and per section, with coverage (questions whose four words are all known)."""
    vocab = wv.lookup(restrict_vocab, case_insensitive)
    fold = str.lower if case_insensitive else (lambda s: s)
    unit = wv.unit[: min(restrict_vocab, len(wv.words))]
    sections: dict[str, dict[str, int]] = {}
    covered: list[tuple[str, int, int, int, int]] = []
    for q in questions:
        s = sections.setdefault(q.section, {"correct": 0, "covered": 0, "total": 0})
        s["total"] += 1
        ids = [vocab.get(fold(w)) for w in (q.a, q.b, q.c, q.expected)]
        if any(i is None for i in ids):
            continue
        s["covered"] += 1
        covered.append((q.section, *ids))
    for start in range(0, len(covered), block):
        chunk = covered[start : start + block]
        a, b, c, d = (np.array([row[k] for row in chunk]) for k in range(1, 5))
        query = unit[b] - unit[a] + unit[c]
        sims = query @ unit.T
        rows = np.arange(len(chunk))
        for ids in (a, b, c):
            sims[rows, ids] = -np.inf
        predicted = sims.argmax(axis=1)
        # Compare words, not rows: with case folding another row may spell the expected word.
        for (section, *_), p, e in zip(chunk, predicted, d):
            if fold(wv.words[p]) == fold(wv.words[e]):
                sections[section]["correct"] += 1
    total = sum(s["total"] for s in sections.values())
    n_cov = sum(s["covered"] for s in sections.values())
    correct = sum(s["correct"] for s in sections.values())
    return {
        "accuracy": correct / n_cov if n_cov else 0.0,
        "correct": correct,
        "covered": n_cov,
        "questions": total,
        "coverage": n_cov / total if total else 0.0,
        "sections": {
            name: {**s, "accuracy": s["correct"] / s["covered"] if s["covered"] else 0.0} for name, s in sections.items()
        },
    }


def evaluate_word_pairs(
    wv: WordVectors, pairs: Sequence[tuple[str, str, float]], restrict_vocab: int = 300_000, case_insensitive: bool = True,
) -> dict[str, Any]:
    """Spearman and Pearson between human scores and cosine similarity; OOV pairs counted and listed."""
    from scipy import stats

    vocab = wv.lookup(restrict_vocab, case_insensitive)
    fold = str.lower if case_insensitive else (lambda s: s)
    gold, model, oov = [], [], []
    for w1, w2, score in pairs:
        i, j = vocab.get(fold(w1)), vocab.get(fold(w2))
        if i is None or j is None:
            oov.append((w1, w2))
            continue
        gold.append(score)
        model.append(float(wv.unit[i] @ wv.unit[j]))
    enough = len(gold) >= 3
    return {
        "spearman": float(stats.spearmanr(gold, model).statistic) if enough else float("nan"),
        "pearson": float(stats.pearsonr(gold, model).statistic) if enough else float("nan"),
        "pairs": len(pairs),
        "scored_pairs": len(gold),
        "oov_pairs": len(oov),
        "oov_ratio": len(oov) / len(pairs) if pairs else 0.0,
        "oov_examples": [f"{a} {b}" for a, b in oov[:10]],
    }


def pca_2d(vectors: np.ndarray) -> np.ndarray:
    """Project rows onto their first two principal components (SVD of the centred matrix)."""
    x = np.asarray(vectors, dtype=np.float64)
    x = x - x.mean(axis=0, keepdims=True)
    _, _, vt = np.linalg.svd(x, full_matrices=False)
    comps = vt[:2]
    # Fix each component's sign (largest |loading| positive) so the plot does not flip between runs.
    signs = np.sign(comps[np.arange(comps.shape[0]), np.abs(comps).argmax(axis=1)])
    return x @ (comps * signs[:, None]).T
