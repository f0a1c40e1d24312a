"""corpusforge.models.embedding_eval against hand-built vectors and against gensim's own evaluators (the reference)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from corpusforge.models.embedding_eval import (Analogy, WordVectors, evaluate_analogies, evaluate_word_pairs, parse_query,
                                   pca_2d, read_analogies, read_word_pairs)


def toy() -> WordVectors:
    # gender on axis 0, royalty on axis 1, a distractor on axis 2: king - man + woman = queen exactly.
    words = ["man", "woman", "king", "queen", "apple"]
    vecs = np.array([[1, 0, 0.1], [-1, 0, 0.1], [1, 1, 0.1], [-1, 1, 0.1], [0, 0, 1]], dtype=np.float32)
    return WordVectors(words, vecs)


def test_king_minus_man_plus_woman_is_queen():
    wv = toy()
    assert wv.most_similar(["king", "woman"], ["man"], topn=1)[0][0] == "queen"
    assert parse_query("king - man + woman") == (["king", "woman"], ["man"])
    assert parse_query("paris-france + italy") == (["paris-france", "italy"], [])  # hyphenated words need spaces
    with pytest.raises(ValueError):
        parse_query("- man")
    # nearest neighbour of king by cosine, computed by hand: cos(king, queen) = (−1+1+0.01)/(|k||q|)
    k, q, m = np.array([1, 1, 0.1]), np.array([-1, 1, 0.1]), np.array([1, 0, 0.1])
    cos = lambda a, b: a @ b / np.linalg.norm(a) / np.linalg.norm(b)  # noqa: E731
    hits = dict(wv.neighbors("king", topn=4))
    assert hits["queen"] == pytest.approx(cos(k, q), abs=1e-6) and hits["man"] == pytest.approx(cos(k, m), abs=1e-6)
    assert "king" not in hits


def test_analogy_sections_and_coverage_by_hand():
    wv = toy()
    questions = [Analogy("family", "man", "king", "woman", "queen"),   # correct
                 Analogy("family", "man", "woman", "king", "queen"),   # correct (same offset, other order)
                 Analogy("family", "man", "king", "woman", "unicorn"),  # OOV: not scored
                 Analogy("fruit", "Man", "KING", "woman", "apple")]    # case-folded; wrong (answer is queen)
    r = evaluate_analogies(wv, questions)
    assert (r["correct"], r["covered"], r["questions"]) == (2, 3, 4)
    assert r["coverage"] == 0.75 and r["accuracy"] == pytest.approx(2 / 3)
    assert r["sections"]["family"] == {"correct": 2, "covered": 2, "total": 3, "accuracy": 1.0}
    assert r["sections"]["fruit"]["accuracy"] == 0.0
    assert evaluate_analogies(wv, questions, case_insensitive=False)["covered"] == 2


def write_random_eval_files(tmp_path: Path, rng: np.random.Generator, words: list[str]) -> tuple[Path, Path]:
    lines = []
    for s in range(3):
        lines.append(f": section-{s}")
        for _ in range(60):
            quad = rng.choice(len(words) + 5, size=4, replace=False)  # indices >= len(words) are OOV
            lines.append(" ".join(words[i] if i < len(words) else f"oov{i}" for i in quad))
    analogies = tmp_path / "q.txt"
    analogies.write_text("\n".join(lines) + "\n")
    pairs = ["# comment", "Word 1\tWord 2\tHuman (mean)"]
    for _ in range(80):
        a, b = rng.choice(len(words) + 3, size=2, replace=False)
        pairs.append(f"{words[a] if a < len(words) else 'nope'}\t{words[b] if b < len(words) else 'nada'}\t"
                     f"{rng.uniform(0, 10):.2f}")
    sim = tmp_path / "pairs.tsv"
    sim.write_text("\n".join(pairs) + "\n")
    return analogies, sim


def test_agrees_with_gensim_evaluators(tmp_path):
    gensim_models = pytest.importorskip("gensim.models")
    rng = np.random.default_rng(0)
    words = [f"w{i}" for i in range(40)]
    vectors = rng.normal(size=(40, 8)).astype(np.float32)
    analogies, sim = write_random_eval_files(tmp_path, rng, words)
    kv = gensim_models.KeyedVectors(vector_size=8)
    kv.add_vectors(words, vectors)
    ref_score, ref_sections = kv.evaluate_word_analogies(str(analogies))
    wv = WordVectors(words, vectors)
    ours = evaluate_analogies(wv, read_analogies(analogies))
    assert ours["accuracy"] == pytest.approx(ref_score, abs=1e-12)
    for sec in ref_sections[:-1]:  # the last one is gensim's "Total accuracy"
        mine = ours["sections"][sec["section"]]
        assert mine["correct"] == len(sec["correct"]) and mine["covered"] == len(sec["correct"]) + len(sec["incorrect"])
    (pearson, _), (spearman, _), oov_pct = kv.evaluate_word_pairs(str(sim))
    pairs = evaluate_word_pairs(wv, read_word_pairs(sim))
    assert pairs["pairs"] == 80
    assert pairs["spearman"] == pytest.approx(spearman, abs=1e-6) and pairs["pearson"] == pytest.approx(pearson, abs=1e-6)
    assert pairs["oov_ratio"] * 100 == pytest.approx(oov_pct)


def test_pca_2d_finds_the_spread_direction():
    # points along (1, 1, 0) plus a small orthogonal wiggle: PC1 carries the spread, PC2 the wiggle.
    t = np.array([-2.0, -1, 0, 1, 2])
    wiggle = np.array([0.1, -0.2, 0.2, -0.2, 0.1])  # zero mean, orthogonal to t
    x = np.stack([t, t, wiggle], axis=1)
    xy = pca_2d(x)
    np.testing.assert_allclose(np.abs(xy[:, 0]), np.abs(t) * np.sqrt(2), atol=1e-9)
    np.testing.assert_allclose(np.abs(xy[:, 1]), np.abs(wiggle), atol=1e-9)


def test_shared_evaldata_parses(request):
    from tests.conftest import SHARED

    ev = SHARED / "evaldata"
    if not ev.is_dir():
        pytest.skip("../shared/evaldata is absent")
    raw = (ev / "questions-words.txt").read_text().splitlines()
    questions = read_analogies(ev / "questions-words.txt")
    assert len(questions) == sum(1 for line in raw if line and not line.startswith(":")) == 19544
    assert len({q.section for q in questions}) == 14
    assert len(read_word_pairs(ev / "wordsim353.tsv")) == 353
    assert len(read_word_pairs(ev / "simlex999.txt")) == 999
