"""``corpusforge embed search --mode bm25|dense|hybrid`` in this process (typer's CliRunner): BM25 needs no encoder
and keeps its index in the store's scratch per file content (reused the next time, rebuilt when the file changes);
dense and hybrid need ID (one line, exit 2, without it); hybrid fuses both sides (with a stand-in encoder put where
the command loads the trained one: the wiring is what is tested here, the trained encoder in test_sentences.py)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
from typer.testing import CliRunner

from corpusforge.cli import app
from corpusforge.models.retrieval import rrf

LINES = ["The Black Death was a bubonic plague pandemic in Europe.",
         "Nikola Tesla designed the alternating current induction motor.",
         "Warsaw is the capital and largest city of Poland.",
         "Oxygen is a chemical element with the symbol O.",
         "The Super Bowl is the annual championship game of the NFL."]


def run(*args: str, code: int = 0):
    result = CliRunner().invoke(app, ["embed", "search", *map(str, args)], catch_exceptions=False)
    assert result.exit_code == code, (result.exit_code, result.stdout, result.stderr)
    return result


def write_corpus(tmp_path):
    corpus = tmp_path / "passages.txt"
    corpus.write_text("\n".join(LINES) + "\n", encoding="utf-8")
    return corpus


def test_bm25_search_without_an_encoder_and_its_kept_index(tmp_path):
    store, corpus = tmp_path / "store", write_corpus(tmp_path)
    first = json.loads(run("who designed the induction motors", "--corpus", corpus, "--mode", "bm25", "--top", "3",
                           "--store", store, "--json").stdout.strip().splitlines()[-1])
    assert first["mode"] == "bm25" and first["id"] is None and first["sentences"] == 5
    assert not first["index_reused"] and first["hits"][0]["line"] == 2 and first["hits"][0]["rank"] == 1
    assert first["hits"][0]["text"] == LINES[1] and first["hits"][0]["score"] > 0
    kept = list((store / ".scratch" / "bm25_index").iterdir())
    assert len(kept) == 1 and (kept[0] / "retrieval.json").is_file()
    for npy in kept[0].glob("*.npy"):
        np.load(npy, allow_pickle=False)
    again = json.loads(run("who designed the induction motors", "--corpus", corpus, "--mode", "bm25", "--top", "3",
                           "--store", store, "--json").stdout.strip().splitlines()[-1])
    assert again["index_reused"] and again["hits"] == first["hits"]
    nothing = json.loads(run("xyzzy", "--corpus", corpus, "--mode", "bm25", "--store", store,
                             "--json").stdout.strip().splitlines()[-1])
    assert nothing["hits"] == [] and nothing["index_reused"]
    corpus.write_text("\n".join(LINES[::-1]) + "\n", encoding="utf-8")  # new content: a new index
    moved = json.loads(run("Poland capital", "--corpus", corpus, "--mode", "bm25", "--store", store,
                           "--json").stdout.strip().splitlines()[-1])
    assert not moved["index_reused"] and moved["hits"][0]["line"] == 3
    assert len(list((store / ".scratch" / "bm25_index").iterdir())) == 2
    text = run("Poland capital", "--corpus", corpus, "--mode", "bm25", "--store", store).stdout
    assert "line 3" in text and LINES[2] in text


def test_dense_and_hybrid_need_an_id(tmp_path):
    corpus = write_corpus(tmp_path)
    for mode in ("dense", "hybrid"):
        failed = run("a query", "--corpus", corpus, "--mode", mode, "--store", tmp_path / "store", code=2)
        assert len(failed.stderr.strip().splitlines()) == 1 and f"--mode {mode} needs ID" in failed.stderr
    failed = run("a query", "--corpus", corpus, "--store", tmp_path / "store", code=2)  # dense is the default
    assert "needs ID" in failed.stderr
    failed = run("a query", "--corpus", corpus, "--mode", "bm25", "--weights", "1,1", "--store", tmp_path / "s",
                 code=2)
    assert "--weights applies to --mode hybrid" in failed.stderr


class LetterEncoder:
    """A stand-in sentence encoder: unit letter-count vectors."""

    dim = 26

    def encode(self, texts):
        texts = [texts] if isinstance(texts, str) else list(texts)
        out = np.zeros((len(texts), 26), dtype=np.float32)
        for r, text in enumerate(texts):
            for ch in text.lower():
                if "a" <= ch <= "z":
                    out[r, ord(ch) - 97] += 1
        return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-9)

    def search(self, query, vectors, top=10):
        scores = np.asarray(vectors) @ self.encode([query])[0]
        order = np.lexsort((np.arange(len(scores)), -scores))[:top]
        return [(int(i), float(scores[i])) for i in order]


def test_hybrid_fuses_bm25_and_dense(tmp_path, monkeypatch):
    from corpusforge.cli import sentences
    from corpusforge.models.retrieval import BM25Index

    store, corpus = tmp_path / "store", write_corpus(tmp_path)
    found = SimpleNamespace(manifest={"id": "e" * 64}, path=store / "sentence_embeddings" / "stub-eeeeeeeeeeee")
    monkeypatch.setattr(sentences, "_encoder", lambda artifact_id, store: (found, LetterEncoder()))
    query = "Tesla motor in Poland"
    args = ("stub", query, "--corpus", corpus, "--mode", "hybrid", "--store", store, "--json")
    first = json.loads(run(*args, "--top", "4").stdout.strip().splitlines()[-1])
    assert first["mode"] == "hybrid" and first["id"] == "e" * 64 and not first["index_reused"]
    encoder = LetterEncoder()
    lexical = BM25Index.build(LINES).search([query], 100)[0]
    dense = encoder.search(query, encoder.encode(LINES), 100)
    expected = rrf([lexical, dense], k=60, top=4)
    assert [(h["line"] - 1, h["score"]) for h in first["hits"]] == [(i, s) for i, s in expected]
    again = json.loads(run(*args, "--top", "4").stdout.strip().splitlines()[-1])
    assert again["index_reused"] and again["hits"] == first["hits"]
    weighted = json.loads(run(*args, "--weights", "0,1").stdout.strip().splitlines()[-1])
    assert [h["line"] - 1 for h in weighted["hits"]] == [i for i, _ in rrf([lexical, dense], [0, 1], top=10)]
    bad = run(*args, "--weights", "1", code=2)
    assert "W_BM25,W_DENSE" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1
