"""``corpusforge embed import``: word vectors trained elsewhere (word2vec text or binary, GloVe text) become an
embeddings artifact that the rest of the project reads like a trained one. The vectors are real: gensim's word2vec
trained here on the Shakespeare sample, saved in the three formats by gensim itself."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from tests.commands import corpusforge
from tests.conftest import REPO
from tests.flows.cli.test_seq2seq import cli_env

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def vectors(tmp_path_factory) -> dict[str, Path]:
    from gensim.models import Word2Vec

    folder = tmp_path_factory.mktemp("vectors")
    text = (REPO / "data" / "sample" / "tinyshakespeare.txt").read_text(encoding="utf-8").lower()
    model = Word2Vec([line.split() for line in text.splitlines() if line.strip()], vector_size=16, min_count=3,
                     epochs=2, workers=1, seed=1)
    model.wv.save_word2vec_format(str(folder / "w2v.txt"))
    model.wv.save_word2vec_format(str(folder / "w2v.bin"), binary=True)
    with open(folder / "glove.txt", "w", encoding="utf-8") as fh:  # GloVe's layout: no header line
        for word in model.wv.index_to_key:
            fh.write(word + " " + " ".join(repr(float(x)) for x in model.wv[word]) + "\n")
    return {"text": folder / "w2v.txt", "binary": folder / "w2v.bin", "glove": folder / "glove.txt",
            "kv": model.wv}


def run(*args: str, store: Path, code: int = 0, env=None, subprocess: bool = False):
    """The command in this process (tests/commands.py); ``subprocess=True``: the console script (the first import
    of the first test: one end-to-end run of `embed import`)."""
    return corpusforge(*args, "--store", store, env=env or cli_env(None), subprocess=subprocess, code=code)


def imported(*args: str, store: Path, subprocess: bool = False) -> dict:
    return json.loads(run("embed", "import", *args, "--json", store=store, subprocess=subprocess).stdout)


def test_three_formats_import_the_same_vectors_and_the_id_follows_the_content(vectors, tmp_path):
    import corpusforge.api as cf

    store = tmp_path / "store"
    kv = vectors["kv"]
    text = imported(str(vectors["text"]), store=store, subprocess=True)
    binary = imported(str(vectors["binary"]), store=store)
    glove = imported(str(vectors["glove"]), "--lowercase", store=store)
    assert (text["format"], binary["format"], glove["format"]) == ("word2vec", "word2vec-binary", "glove")
    assert (text["kind"], glove["kind"]) == ("word2vec", "glove") and text["step"] == "embeddings"
    assert text["metrics"]["vocab_size"] == len(kv) and text["metrics"]["dim"] == kv.vector_size
    assert len({text["id"], binary["id"], glove["id"]}) == 3
    for found in (text, binary, glove):  # every word, every number (the text formats round to 6 decimals)
        loaded = cf.artifacts.load(found["id"][:12], store=store)
        assert loaded.index_to_key == kv.index_to_key
        assert np.allclose(loaded.vectors, kv.vectors, atol=1e-5)
    # the same file again, or its copy elsewhere, is the same artifact; other settings are another
    moved = shutil.copy(vectors["text"], tmp_path / "w2v.txt")
    again = imported(str(moved), store=store)
    assert again["id"] == text["id"] and again["reused"] is True
    assert imported(str(moved), "--limit", "50", store=store)["metrics"]["vocab_size"] == 50
    assert run("artifacts", "verify", text["id"][:12], store=store).stdout.startswith("OK")
    manifest = json.loads((Path(text["path"]) / "manifest.json").read_text(encoding="utf-8"))
    (source,) = manifest["inputs"]
    assert (source["kind"], source["name"]) == ("source", "w2v.txt")  # its id is the content's digest, not the path
    assert source["id"] == hashlib.sha256(vectors["text"].read_bytes()).hexdigest()


def test_imported_vectors_answer_neighbours_as_gensim_does(vectors, tmp_path):
    store = tmp_path / "store"
    kv = vectors["kv"]
    glove = imported(str(vectors["glove"]), "--lowercase", store=store)
    word = kv.index_to_key[10]
    got = json.loads(run("embed", "neighbors", glove["id"][:12], word.upper(), "--top", "5", "--json",
                         store=store).stdout)
    expected = [w for w, _ in kv.most_similar(word, topn=5)]
    assert [n["word"] if isinstance(n, dict) else n[0] for n in got["neighbors"]] == expected


def test_bad_files_are_one_line_errors(vectors, tmp_path):
    store = tmp_path / "store"
    prose = tmp_path / "prose.txt"
    prose.write_text("this is not a vectors file\nat all\n", encoding="utf-8")
    for args, said in ((["missing.txt"], "does not exist"), ([str(prose)], "neither word2vec"),
                       ([str(vectors["glove"]), "--format", "word2vec-binary"], "not readable as word2vec-binary"),
                       ([str(vectors["text"]), "--format", "nonsense"], "nonsense")):
        err = run("embed", "import", *args, store=store, code=2).stderr
        assert said in err and "Traceback" not in err, err
    assert not (store / "embeddings").exists() or not any((store / "embeddings").iterdir())


def test_a_classifier_starts_from_imported_vectors(prefect_harness, vectors, tmp_path):
    store = tmp_path / "store"
    found = imported(str(vectors["text"]), store=store)
    out = json.loads(run("classify", "train", str(REPO / "data" / "labelled" / "reviews.tsv"), "--preset",
                         "sst2-bilstm", "--set", f"embeddings={found['id'][:12]}", "--set", "corpus.split.valid=0.1",
                         "--set", "train.max_iters=20", "--set", "train.eval_interval=20", "--set",
                         "model.n_hidden=16", "--set", "tracking.enabled=false", "--json", store=store,
                         env=cli_env(prefect_harness)).stdout.strip().splitlines()[-1])
    spec = json.loads((Path(out["path"]) / "config.json").read_text(encoding="utf-8"))
    started = spec["classify"]["embeddings"]
    assert started["id"] == found["id"] and started["found"] > 0
    assert spec["model"]["n_embd"] == vectors["kv"].vector_size  # the embedding took the vectors' size
    manifest = json.loads((Path(out["path"]) / "manifest.json").read_text(encoding="utf-8"))
    assert found["id"] in {i["id"] for i in manifest["inputs"]}  # the imported vectors are in the lineage
