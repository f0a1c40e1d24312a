"""Sentence embeddings end to end: a pipeline with a sentence_embeddings section trains a siamese encoder on pairs
(the demo's German/English number words; real Prefect API and MLflow), then ``embed sentences`` writes one unit vector per line (the rows the Python API
gives), ``embed search`` finds a sentence's partner first (and reuses its index the second time), and the registered
MLflow model returns the same vectors."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from tests.commands import corpusforge
from tests.flows.cli.test_seq2seq import cli_env
from tests.conftest import REPO
from tests.tasks.seq2seq.pairs_fixtures import write_pairs

PAIRS = REPO / "data" / "pairs"  # German and English number words, made by a rule


@pytest.mark.e2e
def test_train_embed_search_and_the_registered_model(prefect_harness, tmp_path, monkeypatch):
    data = tmp_path / "data"
    de = (PAIRS / "numbers.de").read_text(encoding="utf-8").splitlines()
    en = (PAIRS / "numbers.en").read_text(encoding="utf-8").splitlines()
    train = write_pairs(data, "train", list(zip(de[:1500], en[:1500])))
    valid = write_pairs(data, "valid", list(zip(de[2000:2100], en[2000:2100])))
    store = tmp_path / "store"
    config = tmp_path / "pipeline.yaml"
    config.write_text(yaml.safe_dump({
        "name": "shifted",
        "corpus": {"name": "shifted", "dedup": {"exact": False},
                   "sources": [{"fields": {"src": str(train[0]), "tgt": str(train[1])}},
                               {"fields": {"src": str(valid[0]), "tgt": str(valid[1])}}],
                   "split": {"valid": 0.0, "test": 0.0, "by_source": {"valid.src+valid.tgt": "valid"}}},
        "tokenizer": {"name": "numbers-bpe", "kind": "bpe", "vocab_size": 250},
        "sentence_embeddings": {"name": "digit-encoder", "fields": ["src", "tgt"],
                                "model": {"n_layer": 2, "n_head": 4, "n_embd": 64, "block_size": 48, "dropout": 0.0},
                                "train": {"max_iters": 300, "batch_size": 32, "lr": 2.0e-3, "min_lr": 2.0e-4,
                                          "warmup_iters": 10, "weight_decay": 0.0, "eval_interval": 250,
                                          "eval_iters": 0, "log_interval": 50, "cpu_threads": 1}},
    }), encoding="utf-8")
    res = corpusforge("run", config, "--store", store, "--json", env=cli_env(prefect_harness), code=0)
    summary = json.loads(res.stdout.strip().splitlines()[-1])
    step = next(s for s in summary["steps"] if s["step"] == "sentence_embeddings")
    manifest = json.loads((Path(step["path"]) / "manifest.json").read_text())
    m = manifest["metrics"]
    assert m["val_top1"] >= 0.9 and m["val_top1_reverse"] >= 0.9 and m["top1"] == m["val_top1"], m
    evaluation = json.loads((Path(step["path"]) / "evaluation.json").read_text())
    assert evaluation["splits"]["valid"]["pairs"] == 100

    def cli(*args, code=0, subprocess=False):  # in this process unless asked (tests/commands.py)
        return corpusforge("embed", *args, "--store", store, env=cli_env(None), code=code, subprocess=subprocess)

    targets = valid[1].read_text(encoding="utf-8").splitlines()
    npy = tmp_path / "v.npy"
    made = json.loads(cli("sentences", step["id"][:10], str(valid[1]), "-o", str(npy), "--json",
                          subprocess=True).stdout)
    vectors = np.load(npy)
    assert made["sentences"] == 100 and vectors.shape == (100, 64)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    import corpusforge as cf

    embedder = cf.artifacts.load(step["id"], store=store)
    np.testing.assert_allclose(embedder.encode(targets), vectors, atol=1e-6)

    source = valid[0].read_text(encoding="utf-8").splitlines()[7]
    first = json.loads(cli("search", step["id"][:10], source, "--corpus", str(valid[1]), "--top", "3",
                           "--json", subprocess=True).stdout)
    assert first["hits"][0]["text"] == targets[7] and not first["index_reused"]
    assert [h["rank"] for h in first["hits"]] == [1, 2, 3] and first["hits"][0]["score"] >= first["hits"][1]["score"]
    again = json.loads(cli("search", step["id"][:10], source, "--corpus", str(valid[1]), "--json").stdout)
    assert again["index_reused"] and again["hits"][:3] == first["hits"]
    assert "not a sentence encoder" in cli("search", summary["corpus"]["id"][:12], "x", "--corpus", str(valid[1]),
                                           code=2).stderr

    import mlflow

    uri = f"sqlite:///{store / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("MLFLOW_REGISTRY_URI", uri)
    model = mlflow.pyfunc.load_model("models:/digit-encoder@latest")
    np.testing.assert_allclose(np.asarray(model.predict(targets[:5])), vectors[:5], atol=1e-6)
