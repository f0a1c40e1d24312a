"""ARPA export/import (models/ngram_arpa.py), checked against KenLM itself (the `kenlm` package) and,
for PTB see tests/tasks/test_ngram_parity.py."""

from __future__ import annotations

import numpy as np
import pytest

from models.ngram import count_sentences, estimate
from models.ngram_arpa import read_arpa, write_arpa
from tests.models.test_ngram import CORPUS, SENTS

EVAL = [s.split() for s in ["w0 w1 w2 w3", "w7 w0 never-seen w1", "w3", "w150 w2 w0 w0 w0 w1 w9 w4"]]


@pytest.mark.parametrize("suffix", [".arpa", ".arpa.gz"])
@pytest.mark.parametrize("method", ["modified-kneser-ney", "kneser-ney", "add-k", "mle"])
def test_round_trip_scores_identically(tmp_path, method, suffix):
    words, tables = count_sentences(CORPUS, 4)
    m = estimate(words, tables, method, k=0.1)
    back = read_arpa(write_arpa(m, tmp_path / f"m{suffix}"))
    assert [len(i) for i in back.ids] == [len(i) for i in m.ids]
    sents = [m.encode(s)[0] for s in EVAL + CORPUS[:20]]
    a, b = m.score_streams(sents), back.score_streams(sents)
    finite = np.isfinite(a)
    assert np.allclose(a[finite], b[finite], atol=1e-6)  # 8 significant digits in the file


def test_arpa_layout_like_lmplz(tmp_path):
    words, tables = count_sentences(SENTS, 2)
    path = write_arpa(estimate(words, tables), tmp_path / "t.arpa")
    lines = path.read_text().splitlines()
    # 8 words (the cat sat on mat ate fish dog) + <unk> <s> </s>; 13 bigrams
    assert lines[:3] == ["\\data\\", "ngram 1=11", "ngram 2=13"]
    uni = {l.split("\t")[1]: l.split("\t") for l in lines if l.count("\t") == 2 and " " not in l.split("\t")[1]}
    assert uni["<s>"][0] == "0"  # <s> is never predicted; lmplz writes 0
    assert float(uni["<unk>"][0]) < 0 and uni["</s>"][2] == "0"  # </s> is no context
    assert lines[-1] == "\\end\\"


def test_stupid_backoff_refuses_arpa(tmp_path):
    words, tables = count_sentences(SENTS, 2)
    with pytest.raises(ValueError, match="scores, not probabilities"):
        write_arpa(estimate(words, tables, "stupid-backoff"), tmp_path / "s.arpa")


@pytest.mark.parametrize("order", [2, 3, 5])
def test_kenlm_scores_our_arpa_identically(tmp_path, order):
    kenlm = pytest.importorskip("kenlm")
    words, tables = count_sentences(CORPUS, order)
    m = estimate(words, tables, "modified-kneser-ney")
    path = write_arpa(m, tmp_path / "m.arpa")
    ken = kenlm.Model(str(path))
    assert ken.order == order
    for toks in EVAL + CORPUS[:50]:
        ours = m.score_sentence(toks)
        theirs = ken.score(" ".join(toks), bos=True, eos=True)
        assert ours == pytest.approx(theirs, abs=2e-4), toks  # KenLM sums 32-bit floats
        # and token by token, including which n-gram length matched
        full = list(ken.full_scores(" ".join(toks)))
        mine = m.score_streams([m.encode(toks)[0]])
        assert np.allclose([s for s, _, _ in full], mine, atol=2e-5)
    ours_ppl = m.evaluate(EVAL)["perplexity"]
    total = sum(ken.score(" ".join(t)) for t in EVAL)
    assert ours_ppl == pytest.approx(10 ** (-total / sum(len(t) + 1 for t in EVAL)), rel=1e-5)


def test_literal_unk_is_the_unknown_word_entry(tmp_path):
    kenlm = pytest.importorskip("kenlm")
    sents = [s.split() for s in ["a <unk> b", "<unk> a", "b b <unk>", "a b"]]
    words, tables = count_sentences(sents, 3)
    m = estimate(words, tables, "kneser-ney")
    ken = kenlm.Model(str(write_arpa(m, tmp_path / "u.arpa")))
    for s in ["a zzz b", "<unk> a", "qq rr"]:
        assert m.score_sentence(s.split()) == pytest.approx(ken.score(s), abs=1e-4)
    # an OOV scores exactly as the literal <unk>
    assert m.score_sentence(["zzz", "a"]) == pytest.approx(m.score_sentence(["<unk>", "a"]))
