"""The classify stage on the bundled labelled reviews (data/labelled, made by a rule), through the real corpus,
tokenizer and embeddings cores: a BiLSTM whose embedding starts from the project's word2vec learns the labels
(string classes), scores itself (accuracy, macro F1, the confusion matrix: recomputed here from the artifact's own
predictions), a rerun reuses it, the artifact loads as a classifier, and a classifier continued from it starts where
it ended (lineage included)."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

from corpusforge.storage.store import ArtifactStore, read_manifest
from corpusforge.tasks.classify.build import build_classify
from corpusforge.tasks.classify.scoring import scores
from corpusforge.tasks.embeddings.build import build_embeddings

REVIEWS = Path(__file__).resolve().parents[3] / "data" / "labelled" / "reviews.tsv"
TRAIN = {"max_iters": 300, "batch_size": 32, "lr": 5.0e-3, "min_lr": 5.0e-4, "warmup_iters": 10,
         "weight_decay": 0.0, "eval_interval": 150, "eval_iters": 0, "log_interval": 50, "cpu_threads": 1}
SECTION = {"name": "reviews", "family": "rnn_classifier", "embeddings": "embeddings", "train": TRAIN,
           "model": {"n_hidden": 32, "dropout": 0.1, "pooling": "last"}}


def config(section: dict):
    from corpusforge.pipeline_config import pipeline_config_from_dict

    return pipeline_config_from_dict({
        "name": "reviews",
        "corpus": {"name": "reviews", "sources": [str(REVIEWS)],
                   "reader": {"labels": {"label": {"column": "label", "type": "str"}}},
                   "split": {"valid": 0.1, "test": 0.1, "seed": 0}},
        "tokenizer": {"name": "words", "kind": "word", "vocab_size": 200},
        "embeddings": {"name": "w2v", "kind": "word2vec", "dim": 24, "min_count": 1, "epochs": 5, "workers": 1,
                       "seed": 1},
        "classify": section,
    })


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("classify")
    store = ArtifactStore(tmp / "store")
    cfg = config(SECTION)
    from corpusforge.tasks.corpus.merge import build_corpus, resolve_packs
    from corpusforge.tasks.corpus.shard import build_corpus_shard
    from corpusforge.tasks.tokenizer.train import run_tokenizer_stage

    corpus = build_corpus([build_corpus_shard(p, cfg.corpus, store) for p in resolve_packs(cfg.corpus)], cfg.corpus,
                          store)
    enc = run_tokenizer_stage(corpus, cfg.tokenizer, store)[-1]
    vectors = build_embeddings(corpus, cfg.embeddings, store)[-1]
    seen: list[int] = []
    model = build_classify(enc, cfg.classify, store, on_metrics=lambda step, m: seen.append(step),
                           refs={"embeddings": vectors})
    return {"store": store, "cfg": cfg, "encoded": enc, "vectors": vectors, "model": model, "seen": seen,
            "corpus": Path(corpus.path)}


@pytest.mark.learns
def test_the_stage_learns_the_labels_and_scores_itself(trained):
    model = trained["model"]
    assert model.step == "classify" and not model.reused and max(trained["seen"]) == TRAIN["max_iters"]
    manifest = read_manifest(Path(model.path))
    m = manifest["metrics"]
    assert m["accuracy"] == m["test_accuracy"] >= 0.9 and m["val_accuracy"] >= 0.9 and m["f1"] == m["test_f1"]
    assert trained["vectors"].id in {i["id"] for i in manifest["inputs"]}  # the word vectors are in its lineage
    spec = json.loads((Path(model.path) / "config.json").read_text())
    assert spec["classify"]["classes"] == ["negative", "positive"] and spec["classify"]["scored_split"] == "test"
    coverage = spec["classify"]["embeddings"]
    assert coverage["found"] >= 40 and coverage["coverage"] > 0.5  # every word of the reviews has a vector
    evaluation = json.loads((Path(model.path) / "evaluation.json").read_text())
    test = evaluation["splits"]["test"]
    # recompute the test scores from the artifact's own predictions of the corpus's test texts
    from corpusforge.api import Artifact

    classifier = Artifact.from_dir(model.path).load()
    frame = pl.read_parquet(trained["corpus"] / "test.parquet")
    predicted = [r["label"] for r in classifier.predict(frame["text"].to_list())]
    classes = ["negative", "positive"]
    again = scores([classes.index(v) for v in frame["label"].to_list()], [classes.index(p) for p in predicted], classes)
    assert again == test and test["records"] == frame.height == sum(map(sum, test["confusion_matrix"]))
    assert sum(test["confusion_matrix"][i][i] for i in range(2)) / test["records"] == pytest.approx(test["accuracy"])
    assert (Path(model.path) / "confusion_matrix.png").stat().st_size > 1000
    probs = classifier.predict("the plot was not dull but the acting was wonderful")[0]
    assert probs["label"] == "positive" and sum(probs["probabilities"].values()) == pytest.approx(1.0)


def test_scores_match_a_hand_computation():
    # 3 classes; rows: true, columns: predicted
    targets = [0, 0, 0, 1, 1, 2]
    predictions = [0, 0, 1, 1, 2, 2]
    s = scores(targets, predictions, ["a", "b", "c"])
    assert s["confusion_matrix"] == [[2, 1, 0], [0, 1, 1], [0, 0, 1]] and s["accuracy"] == pytest.approx(4 / 6)
    # a: P 2/2 R 2/3 F1 0.8; b: P 1/2 R 1/2 F1 0.5; c: P 1/2 R 1 F1 2/3
    assert s["per_class"]["a"]["f1"] == pytest.approx(0.8) and s["per_class"]["c"]["recall"] == 1.0
    assert s["f1"] == pytest.approx((0.8 + 0.5 + 2 / 3) / 3)


def test_a_rerun_reuses_and_a_continued_classifier_starts_where_it_ended(trained):
    store, cfg = trained["store"], trained["cfg"]
    again = build_classify(trained["encoded"], cfg.classify, store, refs={"embeddings": trained["vectors"]})
    assert again.reused and again.id == trained["model"].id
    parent = trained["model"]
    section = {**SECTION, "name": "continued", "init": parent.id[:12], "embeddings": None,
               "train": {**TRAIN, "max_iters": 1, "lr": 1.0e-9, "min_lr": 1.0e-10, "warmup_iters": 0,
                         "eval_interval": 1}}
    child = build_classify(trained["encoded"], config(section).classify, store)
    m, pm = read_manifest(Path(child.path))["metrics"], read_manifest(Path(parent.path))["metrics"]
    assert m["val_accuracy"] == pm["val_accuracy"] and m["val_loss"] == pytest.approx(pm["val_loss"], abs=1e-5)
    manifest = read_manifest(Path(child.path))
    assert parent.id in {i["id"] for i in manifest["inputs"]}
    started = json.loads((Path(child.path) / "config.json").read_text())["classify"]["init"]
    assert started["step"] == "classify" and not started["missing"] and not started["mismatched"]


def test_a_labels_map_merges_raw_labels_into_the_classes_and_scores_files_with_them(trained):
    """Issue 44, item 2: ``classify.labels`` maps raw labels to classes on every split; the map is recorded, so a
    file scored later with the raw labels is read the same way."""
    from corpusforge.tasks.classify.inference import load_classifier

    section = {**SECTION, "name": "relabelled", "embeddings": None, "labels": {"negative": "bad", "positive": "good"},
               "train": {**TRAIN, "max_iters": 2, "eval_interval": 2}}
    model = build_classify(trained["encoded"], config(section).classify, trained["store"])
    spec = json.loads((Path(model.path) / "config.json").read_text())["classify"]
    assert spec["classes"] == ["bad", "good"] and spec["labels"] == {"negative": "bad", "positive": "good"}
    clf = load_classifier(model.path)
    raw = clf.evaluate(["the plot was dull", "a fine film"], ["negative", " positive"])
    mapped = clf.evaluate(["the plot was dull", "a fine film"], ["bad", "good"])
    assert raw["records"] == 2 and raw["confusion_matrix"] == mapped["confusion_matrix"]
