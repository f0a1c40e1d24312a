"""ARPA export/import (models/ngram_arpa.py), checked against KenLM itself (the `kenlm` package) and,
for PTB see tests/tasks/ngram/test_ngram_parity.py."""

from __future__ import annotations

import numpy as np
import pytest

from corpusforge.models.ngram import count_sentences, estimate
from corpusforge.models.ngram_arpa import read_arpa, write_arpa
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


# ------------------------------------------------------------------ the vectorized writer vs a plain one
def reference_arpa_text(model) -> str:
    """The ARPA text written one n-gram at a time with Python's own '%.8g' (obviously correct, slow)."""
    def number(x: float) -> str:
        x = -99.0 if x == float("-inf") else x
        return "%.8g" % (0.0 if x == 0 else x)

    out = ["\\data\\\n"] + [f"ngram {n}={len(model.ids[n - 1])}\n" for n in range(1, model.order + 1)]
    for n in range(1, model.order + 1):
        out.append(f"\n\\{n}-grams:\n")
        for row, ids in enumerate(model.ids[n - 1].tolist()):
            gram = " ".join(model.words[i] for i in ids)
            line = f"{number(model.logprob[n - 1][row])}\t{gram}"
            out.append(line + (f"\t{number(model.backoff[n - 1][row])}\n" if n < model.order else "\n"))
    out.append("\n\\end\\\n")
    return "".join(out)


HOSTILE_WORDS = [s.split() for s in ["été über ñandú 東京 x", "a looooooooooooooooooooooooong word", "é é x",
                                     "über a x"]]


@pytest.mark.parametrize("block_rows", [None, 1, 7])
@pytest.mark.parametrize("method", ["modified-kneser-ney", "mle", "add-k"])
def test_writer_equals_reference_byte_for_byte(tmp_path, method, block_rows):
    """Blocks of any size, -inf (MLE), non-ASCII and long words: the same bytes as the plain writer."""
    words, tables = count_sentences(CORPUS[:60] + HOSTILE_WORDS, 3)
    model = estimate(words, tables, method, k=0.3)
    path = write_arpa(model, tmp_path / "m.arpa", block_rows=block_rows)
    assert path.read_bytes() == reference_arpa_text(model).encode("utf-8")


def test_number_format_is_python_g8_exactly():
    """Decimal conversion in integer arithmetic against Python's, on the hard cases: ties, carries into
    a new digit, powers of ten, the switch to exponent notation, -0, -inf, nan, and random magnitudes."""
    from corpusforge.models.ngram_arpa_text import FILL, format_g8

    rng = np.random.default_rng(3)
    edge = [0.0, -0.0, 1.0, -1.0, 0.5, 2.5, 0.125, 1e-4, 9.99999995e-5, 1e-5, 0.1, 0.30000000000000004,
            99999999.5, 9.99999995, 99.999999949, 1e7, 1e8, 12345678.0, 123456785.0, 0.000123456785, 1234.5,
            10.0, 100.0, -99.0, 1e-300, 3e22, 1e23, float("inf"), float("nan"), float("-inf"), 5e-324]
    values = np.concatenate([
        np.array(edge),
        rng.standard_normal(20000) * 10.0 ** rng.integers(-9, 10, 20000),
        rng.integers(1, 10**9, 20000) / 10.0 ** rng.integers(0, 13, 20000),  # short decimals: exact ties
        -rng.random(20000) * 8,  # the log10 probabilities of real models
    ])
    matrix = format_g8(values)
    got = [bytes(r[r != FILL]).decode() for r in matrix]
    cleaned = np.where(np.isneginf(values), -99.0, values)
    expected = ["%.8g" % (0.0 if x == 0 else x) for x in cleaned.tolist()]
    assert got == expected


def test_gzip_is_byte_identical_across_runs_and_names(tmp_path):
    """No timestamp and no file name in the gzip header: the same model gives the same file."""
    import gzip

    words, tables = count_sentences(CORPUS, 3)
    model = estimate(words, tables)
    first = write_arpa(model, tmp_path / "a.arpa.gz").read_bytes()
    second = write_arpa(model, tmp_path / "other-name.arpa.gz").read_bytes()
    assert first == second
    assert first[:10] == b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x04\x03"  # deflate, no flags, mtime 0, unix
    assert gzip.decompress(first) == reference_arpa_text(model).encode("utf-8")


def test_failed_write_leaves_no_file(tmp_path):
    words, tables = count_sentences(CORPUS, 2)
    model = estimate(words, tables)
    model.ids[1][5, 1] = len(words) + 10  # an id outside the vocabulary: fails in the middle of order 2
    with pytest.raises(IndexError):
        write_arpa(model, tmp_path / "broken.arpa.gz", block_rows=3)
    assert not (tmp_path / "broken.arpa.gz").exists()


def kenlm_query_figures(ken, sentences) -> dict:
    """What KenLM's `query` prints, computed from the `kenlm` module: a token is an OOV when it maps to <unk>
    (id 0, a literal <unk> included); "Perplexity excluding OOVs" sums the log10 probs of the other words and
    every </s> and divides by their number."""
    total = total_known = 0.0
    tokens = oov = 0
    for toks in sentences:
        for (logp, _, is_oov) in ken.full_scores(" ".join(toks)):  # words, then </s> (never an OOV)
            total += logp
            tokens += 1
            if is_oov:
                oov += 1
            else:
                total_known += logp
    return {"perplexity": 10 ** (-total / tokens), "perplexity_without_oov": 10 ** (-total_known / (tokens - oov)),
            "oov": oov}


@pytest.mark.parametrize("order", [2, 3])
def test_perplexity_without_oov_is_kenlm_query_s(tmp_path, order):
    """A literal <unk> is an OOV for KenLM (it is the unknown-word entry, id 0) whether or not training saw
    one: our OOV count and perplexity excluding OOVs match query's on the ARPA we write."""
    kenlm = pytest.importorskip("kenlm")
    train = [s.split() for s in ["a <unk> b c", "<unk> a b", "b b <unk> c", "a b c", "c a b a"]]
    words, tables = count_sentences(train, order)
    m = estimate(words, tables, "modified-kneser-ney")
    ken = kenlm.Model(str(write_arpa(m, tmp_path / "m.arpa")))
    text = [s.split() for s in ["a <unk> b", "zzz a b c", "<unk> qq <unk>", "c b a", "a yy"]]
    want = kenlm_query_figures(ken, text)
    got = m.evaluate(text)
    assert got["oov"] == want["oov"] == 6  # 3 literal <unk> + zzz, qq, yy
    assert got["perplexity"] == pytest.approx(want["perplexity"], rel=1e-5)
    assert got["perplexity_without_oov"] == pytest.approx(want["perplexity_without_oov"], rel=1e-5)
    # the old definition (a literal <unk> counted as known) would differ here
    known = [lp for toks in text for lp, t in zip(m.score_streams([m.encode(toks)[0]]), toks + ["</s>"])
             if t == "</s>" or t in m.word_index]
    assert 10 ** (-sum(known) / len(known)) != pytest.approx(want["perplexity_without_oov"], rel=1e-3)
