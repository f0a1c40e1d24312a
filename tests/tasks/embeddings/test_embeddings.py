"""corpusforge.tasks.embeddings.build*: the steps on small corpora, with expected values computed independently."""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from scipy import sparse

from corpusforge.storage.store import ArtifactStore, read_manifest
from corpusforge.tasks.config import ConfigError
from corpusforge.tasks.embeddings.build import build_embeddings
from corpusforge.tasks.embeddings.config import EmbeddingsConfig, embeddings_config_from_dict
from corpusforge.tasks.step import StepResult
from tests.conftest import SHARED


def fake_corpus(root: Path, train: list[str], valid: list[str] = (), name: str = "c") -> StepResult:
    """A directory shaped like a corpus artifact (only the columns the embeddings steps read)."""
    path = root / f"corpus-{name}"
    path.mkdir(parents=True)
    for split, texts in (("train", train), ("valid", list(valid)), ("test", [])):
        pl.DataFrame({"doc_id": [f"{split}{i}" for i in range(len(texts))], "text": list(texts)},
                     schema={"doc_id": pl.String, "text": pl.String}).write_parquet(path / f"{split}.parquet")
    import hashlib

    cid = hashlib.sha256(("|".join(train) + "#" + "|".join(valid)).encode()).hexdigest()
    return StepResult(id=cid, step="corpus", name=name, path=str(path), reused=False, seconds=0.0)


def only(results, step):
    [r] = [r for r in results if r.step == step]
    return r


# --- TF-IDF -------------------------------------------------------------------------------------------

def test_teaching_text_tfidf_through_duckdb(tmp_path):
    corpus = fake_corpus(tmp_path, ["I love coffee.", "I love tea."])
    [res] = build_embeddings(corpus, EmbeddingsConfig(kind="tfidf"), ArtifactStore(tmp_path / "s"))
    vocab = pl.read_parquet(Path(res.path) / "vocab.parquet")
    col = dict(zip(vocab["term"], vocab["term_id"]))
    assert set(col) == {"i", "love", "coffee", "tea"}  # punctuation dropped, lowercased
    m = sparse.load_npz(Path(res.path) / "train_tfidf.npz").toarray()
    expected = (1 / 3) * math.log(2)  # TF = 1/3 (3 tokens), IDF = ln(2 docs / 1 doc)
    assert m[0, col["i"]] == m[0, col["love"]] == m[1, col["i"]] == m[1, col["love"]] == 0.0
    assert m[0, col["coffee"]] == pytest.approx(expected, rel=1e-12) and m[1, col["coffee"]] == 0.0
    assert m[1, col["tea"]] == pytest.approx(expected, rel=1e-12) and m[0, col["tea"]] == 0.0
    bow = sparse.load_npz(Path(res.path) / "train_bow.npz").toarray()
    assert bow.sum() == 6 and bow[0, col["coffee"]] == 1
    docs = pl.read_parquet(Path(res.path) / "train_docs.parquet")
    assert docs["doc_id"].to_list() == ["train0", "train1"] and docs["n_tokens"].to_list() == [3, 3]


def test_bow_teaching_example_and_min_max_df(tmp_path):
    store = ArtifactStore(tmp_path / "s")
    corpus = fake_corpus(tmp_path, ["We learn NLP. For NLP we need to learn BoW.", "we like cats", "we like dogs"])
    [res] = build_embeddings(corpus, EmbeddingsConfig(kind="tfidf"), store)
    vocab = pl.read_parquet(Path(res.path) / "vocab.parquet")
    col = dict(zip(vocab["term"], vocab["term_id"]))
    bow = sparse.load_npz(Path(res.path) / "train_bow.npz").toarray()
    assert [bow[0, col[w]] for w in ["we", "learn", "nlp", "for", "need", "to", "bow"]] == [2, 2, 2, 1, 1, 1, 1]
    onehot = sparse.load_npz(Path(res.path) / "train_onehot.npz").toarray()
    assert set(np.unique(onehot)) == {0.0, 1.0} and onehot[0, col["we"]] == 1
    # df: we=3, like=2, the rest 1. min_df=2 keeps {we, like}; max_df=0.9 (2.7 docs) drops "we".
    [cut] = build_embeddings(corpus, EmbeddingsConfig(kind="tfidf", min_df=2, max_df=0.9), store)
    assert pl.read_parquet(Path(cut.path) / "vocab.parquet")["term"].to_list() == ["like"]
    assert cut.id != res.id


def test_valid_split_uses_train_vocabulary_and_idf(tmp_path):
    corpus = fake_corpus(tmp_path, ["a b", "a c", "b c c"], valid=["c d d", "zzz"])
    cfg = EmbeddingsConfig(kind="tfidf", idf="smooth", tf="raw")
    [res] = build_embeddings(corpus, cfg, ArtifactStore(tmp_path / "s"))
    vocab = pl.read_parquet(Path(res.path) / "vocab.parquet")
    assert vocab["term"].to_list() == ["a", "b", "c"]  # d and zzz only occur in valid
    valid = sparse.load_npz(Path(res.path) / "valid_tfidf.npz").toarray()
    idf_c = math.log((1 + 3) / (1 + 2)) + 1  # smooth IDF from train: N = 3, df(c) = 2
    np.testing.assert_allclose(valid, [[0, 0, 1 * idf_c], [0, 0, 0]])


# --- co-occurrence and GloVe -----------------------------------------------------------------------------

def reference_cooccurrence(docs: list[str], window: int, min_count: int) -> dict[tuple[str, str], float]:
    counts = Counter(w for d in docs for w in d.lower().split())
    out: dict[tuple[str, str], float] = defaultdict(float)
    for d in docs:
        toks = [w for w in d.lower().split() if counts[w] >= min_count]  # OOV removed before windowing
        for pos, w in enumerate(toks):
            for dist in range(1, window + 1):
                if pos - dist < 0:
                    break
                c = toks[pos - dist]
                out[(w, c)] += 1.0 / dist
                out[(c, w)] += 1.0 / dist
    return dict(out)


def test_cooccurrence_counts_match_a_python_reference(tmp_path):
    from corpusforge.tasks.embeddings.glove import build_cooccurrence

    # Unicode whitespace (no-break space, em space) must split exactly as str.split() does
    docs = ["the cat sat on the mat", "The dog sat on the log rare", "cat\u00a0dog cat\u2003dog\nthe end"]
    corpus = fake_corpus(tmp_path, docs)
    res = build_cooccurrence(corpus, EmbeddingsConfig(kind="glove", window=3, min_count=2), ArtifactStore(tmp_path / "s"))
    vocab = pl.read_parquet(Path(res.path) / "vocab.parquet")
    words = dict(zip(vocab["id"], vocab["word"]))
    assert vocab["word"][0] == "the" and vocab["count"][0] == 5  # most frequent first
    assert "rare" not in set(words.values()) and "end" not in set(words.values())
    trip = pl.read_parquet(Path(res.path) / "cooccurrence.parquet")
    got = {(words[i], words[j]): x for i, j, x in trip.iter_rows()}
    expected = reference_cooccurrence(docs, window=3, min_count=2)
    assert got.keys() == expected.keys()
    for key, value in expected.items():
        assert got[key] == pytest.approx(value, rel=1e-12), key


def test_glove_stage_exports_word2vec_formats_and_reuses(tmp_path):
    from gensim.models import KeyedVectors

    store = ArtifactStore(tmp_path / "s")
    docs = ["a b c d e f a b c d", "b c d e f a b", "f e d c b a f e d"] * 3
    corpus = fake_corpus(tmp_path, docs)
    cfg = EmbeddingsConfig(kind="glove", dim=6, window=2, min_count=1, epochs=3, batch_size=8, device="cpu")
    cooc, glove = build_embeddings(corpus, cfg, store)
    assert (cooc.step, glove.step) == ("cooccurrence", "embeddings")
    kv_txt = KeyedVectors.load_word2vec_format(str(Path(glove.path) / "vectors.txt"))
    kv_bin = KeyedVectors.load_word2vec_format(str(Path(glove.path) / "vectors.bin"), binary=True)
    assert sorted(kv_txt.index_to_key) == list("abcdef") and kv_txt.vector_size == 6
    np.testing.assert_allclose(kv_txt.vectors, kv_bin.vectors, atol=1e-5)
    manifest = read_manifest(Path(glove.path))
    assert manifest["vectors_path"] == "vectors.txt" and manifest["metrics"]["final_loss"] > 0
    # a GloVe-only change reuses the co-occurrence artifact; the same config reuses both
    cooc2, glove2 = build_embeddings(corpus, EmbeddingsConfig(**{**cfg.__dict__, "epochs": 4}), store)
    assert cooc2.reused and cooc2.id == cooc.id and not glove2.reused and glove2.id != glove.id
    again = build_embeddings(corpus, cfg, store)
    assert all(r.reused for r in again) and again[-1].id == glove.id


PTB_TRAIN = SHARED / "corpora" / "ptb" / "ptb.train.txt"


@pytest.mark.skipif(not PTB_TRAIN.is_file(), reason="needs ../shared/corpora/ptb")
def test_glove_with_default_settings_on_2000_lines_of_ptb_gives_finite_vectors(tmp_path):
    # Regression test for issue 35 (defect 3): `head -2000 ptb.train.txt`, `embed train --kind glove` published
    # final_loss NaN and 131,400 of 131,400 NaN values (1,314 words: few, dense rows summed in 32,768-entry steps)
    from gensim.models import KeyedVectors

    lines = PTB_TRAIN.read_text(encoding="utf-8").splitlines()[:2000]
    corpus = fake_corpus(tmp_path, lines)
    _cooc, glove = build_embeddings(corpus, EmbeddingsConfig(kind="glove", name="p-glove", device="cpu"),
                                    ArtifactStore(tmp_path / "s"))
    metrics = read_manifest(Path(glove.path))["metrics"]
    assert math.isfinite(metrics["final_loss"]) and metrics["final_loss"] < 0.06  # measured 0.0526
    assert metrics["batch_size"] < 32768  # capped (3,788)
    kv = KeyedVectors.load_word2vec_format(str(Path(glove.path) / "vectors.bin"), binary=True)
    assert kv.vectors.shape == (1314, 100) and np.isfinite(kv.vectors).all()


def test_a_diverged_fit_fails_in_one_line_and_publishes_nothing(tmp_path):
    from corpusforge.tasks.training import TrainingDiverged

    store = ArtifactStore(tmp_path / "s")
    docs = ["a b c d e f a b c d", "b c d e f a b", "f e d c b a f e d"] * 3
    corpus = fake_corpus(tmp_path, docs)
    cfg = EmbeddingsConfig(kind="glove", name="g", dim=6, window=2, min_count=1, epochs=3, learning_rate=1e6,
                           device="cpu")
    with pytest.raises(TrainingDiverged) as caught:
        build_embeddings(corpus, cfg, store)
    message = str(caught.value)
    assert "\n" not in message and isinstance(caught.value, ValueError)
    assert message.startswith("embeddings g (glove): training diverged (") and "nothing was published" in message
    assert "final_loss is " in message and "36 of 36 weight values are NaN or infinite" in message
    assert message.endswith("lower embeddings.learning_rate (now 1e+06; glove.c's is 0.05)")
    assert not (store.root / "embeddings").exists() or not any((store.root / "embeddings").iterdir())
    # the same corpus at the default learning rate is published
    _cooc, glove = build_embeddings(corpus, EmbeddingsConfig(**{**cfg.__dict__, "learning_rate": 0.0}), store)
    assert [p.name for p in (store.root / "embeddings").iterdir()] == [Path(glove.path).name]


# --- word2vec / fastText ----------------------------------------------------------------------------------

SENTENCES = ["the king rules the land", "the queen rules the land", "a man walks", "a woman walks",
             "the king and the queen", "the man and the woman"] * 20


@pytest.mark.parametrize("sg", [1, 0])
def test_word2vec_exports_load_with_gensim(tmp_path, sg):
    from gensim.models import KeyedVectors, Word2Vec

    corpus = fake_corpus(tmp_path, SENTENCES)
    cfg = EmbeddingsConfig(kind="word2vec", sg=sg, dim=10, min_count=2, epochs=2, workers=1, seed=3)
    [res] = build_embeddings(corpus, cfg, ArtifactStore(tmp_path / "s"))
    path = Path(res.path)
    kv = KeyedVectors.load_word2vec_format(str(path / "vectors.txt"))
    kv_bin = KeyedVectors.load_word2vec_format(str(path / "vectors.bin"), binary=True)
    expected_vocab = {w for w, n in Counter(" ".join(SENTENCES).split()).items() if n >= 2}
    assert set(kv.index_to_key) == expected_vocab and kv.vector_size == 10
    np.testing.assert_allclose(kv.vectors, kv_bin.vectors, atol=1e-5)
    native = Word2Vec.load(str(path / "gensim" / "word2vec.model"))  # the gensim-user export
    assert native.sg == sg and native.negative == 5 and native.hs == 0 and native.window == 5
    np.testing.assert_allclose(native.wv["king"], kv_bin["king"], atol=1e-6)
    vocab = pl.read_parquet(path / "vocab.parquet")
    assert dict(zip(vocab["word"], vocab["count"]))["the"] == 20 * 8  # "the" occurs 8 times per 6 sentences


def test_fasttext_gives_vectors_for_unseen_words(tmp_path):
    from gensim.models import FastText

    from corpusforge.models.word2vec import load_fasttext_vectors

    corpus = fake_corpus(tmp_path, SENTENCES)
    cfg = EmbeddingsConfig(kind="fasttext", dim=8, min_count=1, epochs=1, workers=1, bucket=5000)
    [res] = build_embeddings(corpus, cfg, ArtifactStore(tmp_path / "s"))
    ft = load_fasttext_vectors(Path(res.path) / "fasttext.bin")
    assert "kingdoms" not in ft.key_to_index
    native = FastText.load(str(Path(res.path) / "gensim" / "fasttext.model"))
    assert (native.wv.min_n, native.wv.max_n) == (3, 6)
    np.testing.assert_allclose(ft["kingdoms"], native.wv["kingdoms"], atol=1e-6)
    assert np.linalg.norm(ft["kingdoms"]) > 0


def test_config_errors_name_the_field():
    with pytest.raises(ConfigError, match=r"embeddings\.sg"):
        embeddings_config_from_dict({"sg": 2})
    with pytest.raises(ConfigError, match=r"embeddings\.kind.*'tfidf'"):
        embeddings_config_from_dict({"kind": "bert"})
    with pytest.raises(ConfigError, match=r"embeddings\.max_df"):
        embeddings_config_from_dict({"kind": "tfidf", "max_df": 2})
    with pytest.raises(ConfigError, match=r"embeddings\.windwo: unknown key"):
        embeddings_config_from_dict({"windwo": 3})


# --- evaluation ----------------------------------------------------------------------------------------

def test_evaluation_step_on_shared_evaldata(tmp_path):
    ev = SHARED / "evaldata"
    if not ev.is_dir():
        pytest.skip("../shared/evaldata is absent")
    corpus = fake_corpus(tmp_path, SENTENCES)
    cfg = EmbeddingsConfig(kind="word2vec", dim=10, min_count=1, epochs=1, workers=1,
                           analogies=str(ev / "questions-words.txt"),
                           similarity=(str(ev / "wordsim353.tsv"), str(ev / "simlex999.txt")),
                           neighbors=("king", "nonexistent"), queries=("king - man + woman",),
                           plot_groups=(("king", "queen"), ("man", "woman")))
    store = ArtifactStore(tmp_path / "s")
    results = build_embeddings(corpus, cfg, store)
    assert [r.step for r in results] == ["embeddings_eval", "embeddings"]
    ev_res, emb = results
    m = read_manifest(Path(ev_res.path))["metrics"]
    vocab = set(" ".join(SENTENCES).split())
    # independent counts: questions whose 4 words are all in this tiny vocabulary, pairs with an OOV word
    lines = [line.lower().split() for line in (ev / "questions-words.txt").read_text().splitlines()
             if line and not line.startswith(":")]
    assert m["analogy_questions"] == len(lines) == 19544
    assert m["analogy_covered"] == sum(all(w in vocab for w in q) for q in lines)
    pairs = [line.split("\t") for line in (ev / "wordsim353.tsv").read_text().splitlines()
             if line and not line.startswith("#")]
    assert m["wordsim353_oov_pairs"] == sum(not (a.lower() in vocab and b.lower() in vocab) for a, b, *_ in pairs)
    assert m["wordsim353_pairs"] == 353 and m["simlex999_pairs"] == 999
    import json

    report = json.loads((Path(ev_res.path) / "eval.json").read_text())
    # 10 words in the vocabulary: 9 neighbours besides king, 7 answers besides the 3 query words
    assert report["neighbors"]["nonexistent"] is None and len(report["neighbors"]["king"]) == len(vocab) - 1 == 9
    assert len(report["queries"]["king - man + woman"]) == len(vocab) - 3
    assert (Path(ev_res.path) / "pca.png").stat().st_size > 1000
    # changing only the evaluation reuses the trained vectors
    again = build_embeddings(corpus, EmbeddingsConfig(**{**cfg.__dict__, "neighbors": ("queen",)}), store)
    assert again[-1].reused and again[-1].id == emb.id and not again[0].reused


def test_each_step_id_holds_the_fields_that_declare_it():
    """Item 3 of the house issue: the config's field metadata ("steps") says which fields form each step's id,
    through tasks.config.identity like every other stage; the evaluation and the name change no training id."""
    from corpusforge.tasks.config import to_dict

    base = embeddings_config_from_dict({"kind": "glove", "dim": 8})
    evaluated = embeddings_config_from_dict({"kind": "glove", "dim": 8, "neighbors": ["king"], "top": 3,
                                             "name": "other", "device": "cpu"})
    for step in ("glove", "cooccurrence"):
        assert base.step_config(step) == evaluated.step_config(step)
    assert base.step_config("eval") != evaluated.step_config("eval")
    assert set(base.step_config("cooccurrence")) == {"lowercase", "tokens", "window", "min_count"}
    assert "x_max" in base.step_config("glove") and "sg" not in base.step_config("glove")
    assert "min_n" in base.step_config("fasttext") and "min_n" not in base.step_config("word2vec")
    data = to_dict(base)
    assert all(base.step_config("tfidf")[k] == data[k] for k in base.step_config("tfidf"))
    # every field names its steps; a field in none (name, device) is in no id
    import dataclasses

    from corpusforge.tasks.embeddings.config import STEPS, EmbeddingsConfig
    for f in dataclasses.fields(EmbeddingsConfig):
        assert set(f.metadata["steps"]) <= set(STEPS), f.name
    assert not any("name" in base.step_config(s) or "device" in base.step_config(s) for s in STEPS)


def test_highlights_say_each_query_answer_and_neighbours_in_a_line(tmp_path):
    import json

    from corpusforge.tasks.embeddings.eval import highlights

    (tmp_path / "eval.json").write_text(json.dumps({
        "queries": {"he - king + queen": [["she", 0.6], ["grace", 0.5]], "x - y + z": {"oov": "word 'x' not in vocabulary"}},
        "neighbors": {"king": [["prince", 0.9]], "zzz": None}}))
    assert highlights(tmp_path) == ["he - king + queen \u2192 she, grace",
                                    "x - y + z \u2192 not in the vocabulary: word 'x' not in vocabulary",
                                    "neighbours of king: prince", "neighbours of zzz: not in the vocabulary"]
    assert highlights(tmp_path / "missing") == []
