"""corpusforge.tasks.ngram.build on real files: corpus artifact -> counts in DuckDB -> model -> evaluation -> ARPA.

Expected perplexities come from the naive dict-based Kneser-Ney in tests/models/test_ngram.py or
from hand arithmetic, never from the code under test.
"""

from __future__ import annotations

import gzip
import json
import math
from pathlib import Path

import pytest

from corpusforge.storage.store import ArtifactStore, read_manifest
from corpusforge.tasks.config import ConfigError
from corpusforge.tasks.corpus.config import corpus_config_from_dict
from corpusforge.tasks.corpus.merge import build_corpus, resolve_sources
from corpusforge.tasks.corpus.shard import build_corpus_shard
from corpusforge.tasks.ngram.build import build_ngram, load_ngram_model
from corpusforge.tasks.ngram.config import ngram_config_from_dict
from tests.conftest import write
from tests.models.test_ngram import CORPUS, naive_mkn

TEACHING = "the cat sat on the mat\nthe cat ate the fish\nthe dog sat on the mat\n"


def line_corpus(root: Path, text: str, store: ArtifactStore, name: str = "train"):
    src = write(root / f"{name}.txt", text)
    cfg = corpus_config_from_dict({"name": name, "sources": [str(src)], "reader": {"txt_mode": "line"},
                                   "clean": {"preset": "raw"}, "dedup": {"exact": False},
                                   "split": {"valid": 0, "test": 0}, "validate": {"max_chars": 1_000_000}})
    shards = [build_corpus_shard(r, cfg, store) for r in resolve_sources(cfg)]
    return build_corpus(shards, cfg, store)


@pytest.fixture(scope="module")
def zipf(tmp_path_factory):
    root = tmp_path_factory.mktemp("ngram")
    store = ArtifactStore(root / "store")
    corpus = line_corpus(root, "\n".join(" ".join(s) for s in CORPUS) + "\n", store)
    held_out = write(root / "heldout.txt", "w0 w1 w2\nw5 zzz w0 w0\n\nw3 w3 w3 w3 w1\n")
    cfg = ngram_config_from_dict({"order": 3, "smoothing": "modified-kneser-ney", "eval": [str(held_out)],
                                  "threads": 1, "memory_limit": "512MB"})
    return store, corpus, cfg, held_out, build_ngram(corpus, cfg, store)


def test_artifact_files_and_counts(zipf):
    store, corpus, cfg, held_out, result = zipf
    path = Path(result.path)
    for f in ("counts.duckdb", "model/model.npz", "model/words.json", "stats.json", "zipf.png", "model.arpa.gz"):
        assert (path / f).is_file(), f
    m = read_manifest(path)["metrics"]
    distinct = {n: len({tuple(t[i:i + n]) for s in CORPUS for t in [["<s>"] + s + ["</s>"]]
                        for i in range(len(t) - n + 1)}) for n in (1, 2, 3)}
    assert {n: m[f"distinct_{n}grams"] for n in (1, 2, 3)} == distinct
    assert m["sentences"] == len(CORPUS) and m["tokens"] == sum(len(s) + 1 for s in CORPUS)
    assert 0 < m["singleton_ratio_3"] <= 1
    with gzip.open(path / "model.arpa.gz", "rt") as f:
        assert f.readline().strip() == "\\data\\"


def test_perplexity_matches_naive_reference(zipf):
    store, corpus, cfg, held_out, result = zipf
    p, vocab = naive_mkn(CORPUS, 3)
    total, n, n_oov_excluded, total_known, oov = 0.0, 0, 0, 0.0, 0
    for line in held_out.read_text().splitlines():
        toks = line.split()
        if not toks:
            continue
        hist = ("<s>",)
        for w in toks + ["</s>"]:
            lp = math.log10(p(w if w in vocab else "<unk>", hist[-2:]))
            total += lp
            n += 1
            if w in vocab:
                total_known += lp
                n_oov_excluded += 1
            else:
                oov += 1
            hist = hist + (w if w in vocab else "<unk>",)
    stats = json.loads((Path(result.path) / "stats.json").read_text())
    (ev,) = [e for e in stats["evaluations"].values() if e["source"] == held_out.name]
    assert ev["perplexity"] == pytest.approx(10 ** (-total / n), rel=1e-9)
    assert ev["perplexity_without_oov"] == pytest.approx(10 ** (-total_known / n_oov_excluded), rel=1e-9)
    assert ev["oov"] == oov == 1
    assert ev["sentences"] == 3


@pytest.fixture(scope="module")
def teaching(tmp_path_factory):
    root = tmp_path_factory.mktemp("teaching")
    store = ArtifactStore(root / "store")
    return store, line_corpus(root, TEACHING, store)


def test_unseen_fraction_by_hand(tmp_path, teaching):
    store, corpus = teaching
    held = write(tmp_path / "held.txt", "the cat sat\n")
    result = build_ngram(corpus, ngram_config_from_dict({"order": 2, "smoothing": "mle", "eval": [str(held)]}), store)
    m = read_manifest(Path(result.path))
    # bigrams of "<s> the cat sat </s>": only "sat </s>" is unseen -> 1/4; MLE perplexity is infinite
    key = [k for k in m["metrics"] if k.endswith("unseen_2gram_fraction")][0]
    assert m["metrics"][key] == pytest.approx(0.25)
    assert not any(k.endswith(".perplexity") for k in m["metrics"])  # inf is kept out of metrics
    assert list(m["evaluations"].values())[0]["perplexity"] is None
    model = load_ngram_model(result.path)
    assert 10 ** model.log10_prob("sat", ["cat"]) == pytest.approx(0.5)


def test_rerun_is_reused_and_config_changes_the_id(zipf):
    store, corpus, cfg, held_out, result = zipf
    again = build_ngram(corpus, cfg, store)
    assert again.reused and again.id == result.id
    other = build_ngram(corpus, ngram_config_from_dict({"order": 2, "smoothing": "kneser-ney"}), store)
    assert other.id != result.id
    # resources do not change the output, so they do not change the id
    same = build_ngram(corpus, ngram_config_from_dict({"order": 3, "eval": [str(held_out)], "threads": 2,
                                                       "memory_limit": "1GB"}), store)
    assert same.id == result.id and same.reused


def test_stupid_backoff_has_no_arpa_and_says_scores(teaching):
    store, corpus = teaching
    result = build_ngram(corpus, ngram_config_from_dict({"order": 2, "smoothing": "stupid-backoff"}), store)
    assert not (Path(result.path) / "model.arpa.gz").exists()
    assert read_manifest(Path(result.path))["scores_are_probabilities"] is False


def test_config_errors_name_the_field():
    with pytest.raises(ConfigError, match="ngram.smoothing"):
        ngram_config_from_dict({"smoothing": "witten-bell"})
    with pytest.raises((ConfigError, ValueError), match="order"):
        ngram_config_from_dict({"order": 0})
    with pytest.raises((ConfigError, ValueError), match="k"):
        ngram_config_from_dict({"smoothing": "add-k", "k": 0})


def test_pipeline_end_to_end(prefect_harness, tmp_path):
    from corpusforge.pipeline import run_pipeline

    src = write(tmp_path / "data" / "train.txt", TEACHING * 3)
    config = {"name": "ngram-e2e", "corpus": {"name": "teach", "sources": [str(src)], "reader": {"txt_mode": "line"},
                                              "clean": {"preset": "raw"}, "dedup": {"exact": False},
                                              "split": {"valid": 0, "test": 0}},
              "ngram": {"order": 2, "smoothing": "add-k", "k": 1.0, "vocab_size": 6}}
    summary = run_pipeline(config, store=tmp_path / "store")
    out = summary["stages"]["ngram"]
    # 13 distinct bigrams: <s> the, the cat, cat sat, sat on, on the, the mat, mat </s>, cat ate, ate the,
    # the fish, fish </s>, the dog, dog sat
    assert out["step"] == "ngram" and out["metrics"]["distinct_2grams"] == 13
    model = load_ngram_model(out["path"])
    # Laplace, V = 6, counts tripled: P(sat|cat) = (3+1)/(6+6)
    assert 10 ** model.log10_prob("sat", ["cat"]) == pytest.approx(4 / 12)
    again = run_pipeline(config, store=tmp_path / "store")
    assert again["stages"]["ngram"]["reused"] and again["stages"]["ngram"]["id"] == out["id"]


def test_counting_over_a_trained_tokenizer(tmp_path):
    """With ngram.tokenizer, n-grams are over the tokenizer's tokens: here a char tokenizer, so the
    unigram counts are character counts (computed by hand from the text below)."""
    from corpusforge.tasks.tokenizer.config import tokenizer_config_from_dict
    from corpusforge.tasks.tokenizer.train import build_tokenizer

    store = ArtifactStore(tmp_path / "store")
    corpus = line_corpus(tmp_path, "abba\nab\n", store)
    tok = build_tokenizer(corpus, tokenizer_config_from_dict({"kind": "char", "vocab_size": 50}), store)
    cfg = ngram_config_from_dict({"order": 2, "smoothing": "mle", "tokenizer": tok.id[:10], "arpa": False,
                                  "eval_splits": ["train"], "threads": 1})
    result = build_ngram(corpus, cfg, store)
    manifest = read_manifest(Path(result.path))
    assert tok.id in [i["id"] for i in manifest["inputs"]]  # the tokenizer is part of the identity
    assert manifest["metrics"]["tokens"] == 4 + 2 + 2  # a b b a + a b, plus one </s> per line
    model = load_ngram_model(result.path)
    # MLE bigram: P(b | a) = c(a b) / c(a) = 2 / 3 ("abba" has a b, "ab" has a b; a occurs 3 times)
    assert math.isclose(10 ** model.log10_prob("b", ["a"]), 2 / 3, rel_tol=1e-9)
    whitespace = build_ngram(corpus, ngram_config_from_dict({"order": 2, "smoothing": "mle", "arpa": False}), store)
    assert whitespace.id != result.id


def test_artifact_is_byte_reproducible_and_counts_are_queryable(tmp_path, zipf):
    """A rebuild in another store writes the same model.arpa.gz bytes (no gzip timestamp), and the
    counts file answers SQL per order (ngrams_<n> views over the one padded table)."""
    import duckdb

    store, corpus, cfg, held_out, result = zipf
    other_store = ArtifactStore(tmp_path / "other")
    again = build_ngram(line_corpus(tmp_path, "\n".join(" ".join(s) for s in CORPUS) + "\n", other_store), cfg,
                        other_store)
    assert not again.reused
    assert (Path(again.path) / "model.arpa.gz").read_bytes() == (Path(result.path) / "model.arpa.gz").read_bytes()
    con = duckdb.connect(str(Path(result.path) / "counts.duckdb"), read_only=True)
    try:
        (bigram_total,) = con.execute("SELECT sum(count) FROM ngrams_2").fetchone()
        (distinct_3,) = con.execute("SELECT count(*) FROM ngrams_3").fetchone()
    finally:
        con.close()
    assert bigram_total == sum(len(s) + 1 for s in CORPUS)  # one bigram per word and per </s>
    assert distinct_3 == read_manifest(Path(result.path))["metrics"]["distinct_3grams"]


def test_an_eval_file_elsewhere_gives_the_same_id_and_bytes(zipf, tmp_path, monkeypatch):
    """Issue 35, item 6: an ngram.eval file enters the id by its name and content digest, not by where it lies,
    and the artifact says nothing of its path: the same file in another folder (another checkout, a moved
    project) is the same artifact, reused; a file with other content is not."""
    store, corpus, cfg, held_out, result = zipf
    elsewhere = tmp_path / "other-checkout" / held_out.name
    elsewhere.parent.mkdir()
    elsewhere.write_bytes(held_out.read_bytes())
    monkeypatch.chdir(elsewhere.parent)
    moved = build_ngram(corpus, ngram_config_from_dict({"order": 3, "smoothing": "modified-kneser-ney",
                                                        "eval": [held_out.name], "threads": 1,
                                                        "memory_limit": "512MB"}), store)
    assert moved.id == result.id and moved.reused
    # the config (in the id) and the artifact's files name the file only; the input entry's "path" is where this
    # run read it (relative to the working directory when under it, as for corpus sources): informational
    config = json.dumps(read_manifest(Path(result.path))["config"])
    stats = (Path(result.path) / "stats.json").read_text()
    assert str(held_out.parent) not in config and str(held_out.parent) not in stats
    elsewhere.write_text("w0 w1\n")
    changed = build_ngram(corpus, ngram_config_from_dict({"order": 3, "smoothing": "modified-kneser-ney",
                                                          "eval": [str(elsewhere)], "threads": 1,
                                                          "memory_limit": "512MB"}), store)
    assert changed.id != result.id
