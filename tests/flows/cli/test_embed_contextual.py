"""``corpusforge embed contextual``: an encoder lm and a word2vec model trained on the same small corpus through the
CLI; "bank" gets two vectors from the encoder (one per sentence) and one from word2vec."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from corpusforge.cli import app
from tests.commands import corpusforge
from tests.conftest import write

runner = CliRunner()
SENTENCES = ["the river bank was muddy after the rain", "she opened a bank account in town",
             "we sat on the bank of the river", "the bank gave him a loan", "fish swim near the river bank",
             "money is safe in the bank"]


def cli(prefect_harness: str, *args: str) -> dict:
    """In this process (tests/commands.py): `lm train` and `embed train` have their end-to-end tests elsewhere."""
    return corpusforge(*args, "--set", "tracking.enabled=false", "--json", env={"PREFECT_API_URL": prefect_harness},
                       code=0).json()


@pytest.mark.e2e
def test_contextual_vectors_differ_where_the_static_one_cannot(prefect_harness, tmp_path):
    corpus = write(tmp_path / "bank.txt", "\n\n".join(SENTENCES * 40) + "\n")  # one document per sentence
    store = str(tmp_path / "store")
    encoder = cli(prefect_harness, "lm", "train", str(corpus), "--preset", "shakespeare-char-cpu", "--store", store,
                  "--set", "family=encoder", "--set", "model.n_layer=1", "--set", "model.n_head=2",
                  "--set", "model.n_embd=32", "--set", "model.block_size=48", "--set", "train.max_iters=30",
                  "--set", "train.eval_interval=15", "--set", "train.eval_iters=2", "--set", "corpus.dedup.exact=false")
    static = cli(prefect_harness, "embed", "train", str(corpus), "--kind", "word2vec", "--store", store,
                 "--set", "dim=16", "--set", "min_count=1", "--set", "epochs=2", "--set", "workers=1",
                 "--set", "corpus.dedup.exact=false")

    res = runner.invoke(app, ["embed", "contextual", encoder["id"][:10], "the river bank", "the bank account",
                              "--word", "bank", "--static", static["id"][:10], "--store", store, "--json"])
    assert res.exit_code == 0, res.output
    report = json.loads(res.stdout.strip().splitlines()[-1])
    assert report["tokens"] == [["b", "a", "n", "k"]] * 2  # the char tokenizer's tokens of the word
    assert report["contextual_cosine"] < 0.999  # the sentence changed the vector
    assert report["static_cosine"] == pytest.approx(1.0, abs=1e-9) and report["static_id"] == static["id"]
    shown = runner.invoke(app, ["embed", "contextual", encoder["id"], "the river bank", "the bank account",
                                "--word", "bank", "--static", static["id"], "--store", store])
    assert shown.exit_code == 0 and "contextual (encoder" in shown.stdout and "static (word2vec" in shown.stdout

    # bad input: one line, exit 2
    wrong = runner.invoke(app, ["embed", "contextual", static["id"], "a bank", "the bank", "--word", "bank",
                                "--store", store])
    assert wrong.exit_code == 2 and "not an encoder lm" in wrong.output
    missing = runner.invoke(app, ["embed", "contextual", encoder["id"], "a river", "the bank", "--word", "bank",
                                  "--store", store])
    assert missing.exit_code == 2 and "'bank' is not a word of 'a river'" in missing.output
