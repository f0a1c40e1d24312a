"""``--json`` is strict JSON everywhere (issue 35, defect 5): a non-finite number is null with a note saying where it
was and why, file keys are the paths as the user typed them; every command's output parses with a strict parser."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from corpusforge.cli import app
from corpusforge.cli.common import json_line
from tests.conftest import write
from tests.flows.cli.test_main import cli_env

CLI = str(Path(sys.executable).parent / "corpusforge")
TEACHING = "the cat sat on the mat\nthe cat ate the fish\nthe dog sat on the mat\n"
runner = CliRunner()


def strict(line: str):
    """json.loads as jq, JavaScript's JSON.parse or Go read it: NaN, Infinity and -Infinity are errors."""
    def refuse(constant: str):
        raise ValueError(f"not JSON: {constant}")

    return json.loads(line, parse_constant=refuse)


def last_line(text: str):
    return strict(text.strip().splitlines()[-1])


def test_non_finite_numbers_become_null_with_a_note():
    payload = {"metrics": {"final_loss": math.nan, "ok": 1.5, "n": 3, "flag": True},
               "perplexity": {"../held out.txt": math.inf}, "top": [{"prob": np.float32(0.25)}, {"lp": -math.inf}],
               "notes": ["given first"]}
    out = strict(json_line(payload, why={"perplexity": "an unseen n-gram"}))
    assert out["metrics"] == {"final_loss": None, "ok": 1.5, "n": 3, "flag": True}
    assert out["perplexity"] == {"../held out.txt": None} and out["top"] == [{"prob": 0.25}, {"lp": None}]
    assert out["notes"] == ["given first",
                            "metrics.final_loss is NaN; written as null",
                            'perplexity["../held out.txt"] is infinite (an unseen n-gram); written as null',
                            "top[1].lp is minus infinite; written as null"]
    assert "notes" not in strict(json_line({"a": 1.0}))  # nothing to say, no notes key
    assert strict(json_line([1.0, math.nan])) == [1.0, None]  # a list has no room for notes: they go to stderr


def test_every_command_prints_strict_json_and_ngram_mle_perplexity_is_null_with_a_note(prefect_harness, tmp_path,
                                                                                      monkeypatch):
    """The issue's repro (`ngram estimate --smoothing mle --eval v.txt --json` printed Infinity), then a
    representative --json of each command group, parsed strictly. Only the ngram pipeline runs in a process of its
    own (every pipeline command prints through the same helper); the embeddings and the tokenizer the read-only
    commands read are built by their steps in this process, into the same store."""
    from corpusforge.storage.store import ArtifactStore
    from corpusforge.tasks.embeddings.build import build_embeddings
    from corpusforge.tasks.embeddings.config import EmbeddingsConfig
    from corpusforge.tasks.tokenizer.config import tokenizer_config_from_dict
    from corpusforge.tasks.tokenizer.train import build_tokenizer
    from tests.tasks.embeddings.test_embeddings import fake_corpus

    monkeypatch.chdir(tmp_path)  # the read-only commands run in this process
    write(tmp_path / "train.txt", TEACHING)
    write(tmp_path / "v.txt", "the zebra sat\n")
    write(tmp_path / "sub" / "w.txt", "the cat sat on the mat\n")  # every bigram seen: a finite perplexity
    store = str(tmp_path / "store")
    res = subprocess.run([CLI, "ngram", "estimate", "train.txt", "--order", "2", "--smoothing", "mle", "--eval", "v.txt",
                          "--eval", "./sub/w.txt", "--store", store, "--json"], cwd=tmp_path, capture_output=True,
                         text=True, env=cli_env(prefect_harness), timeout=300, check=False)
    assert res.returncode == 0, res.stderr[-3000:]
    lines = TEACHING.splitlines() * 5
    corpus = fake_corpus(tmp_path / "fixture", lines, valid=lines[:3])
    embeddings = build_embeddings(corpus, EmbeddingsConfig(kind="word2vec", name="e", dim=8, min_count=1, epochs=1,
                                                           workers=1), ArtifactStore(store))[-1]
    tokenizer = build_tokenizer(corpus, tokenizer_config_from_dict({"name": "t", "kind": "char"}), ArtifactStore(store))

    payload = last_line(res.stdout)
    assert payload["perplexity"]["v.txt"] is None and payload["perplexity_without_oov"]["v.txt"] is None
    assert 'perplexity["v.txt"] is infinite (an n-gram unseen in training has probability 0 under mle; add-k or ' \
           "kneser-ney smoothing give it some); written as null" in payload["notes"]
    # keys are exactly what was typed (not resolved, not normalised by pathlib)
    assert list(payload["perplexity"]) == ["v.txt", "./sub/w.txt"] and payload["oov"] == {"v.txt": 1, "./sub/w.txt": 0}
    # P(the|<s>) P(cat|the) P(sat|cat) P(on|sat) P(the|on) P(mat|the) P(</s>|mat) = 1 * 2/6 * 1/2 * 1 * 1 * 2/6 * 1
    assert payload["perplexity"]["./sub/w.txt"] == pytest.approx((2 / 6 * 1 / 2 * 2 / 6) ** (-1 / 7))

    store_opt = ["--store", store]
    ngram_id, embed_id, tok_id = payload["id"][:12], embeddings.id[:12], tokenizer.id[:12]
    query = runner.invoke(app, ["ngram", "query", ngram_id, "--context", "the", "--word", "zebra",
                                "--sentence", "the zebra sat", *store_opt, "--json"])
    assert query.exit_code == 0, query.output
    answer = last_line(query.stdout)
    assert answer["word"]["log10_prob"] is None and answer["word"]["prob"] == 0.0
    assert answer["sentences"][0]["perplexity"] is None
    assert any(n.startswith("word.log10_prob is minus infinite") for n in answer["notes"])
    evaluate = runner.invoke(app, ["ngram", "evaluate", ngram_id, "./v.txt", *store_opt, "--json"])
    assert evaluate.exit_code == 0, evaluate.output
    assert list(last_line(evaluate.stdout)["results"]) == ["./v.txt"]

    for args in (["embed", "neighbors", embed_id, "cat", "--top", "2"],
                 ["embed", "eval", embed_id, "--neighbors", "cat", "--query", "cat - dog + mat"],
                 ["tokenizer", "encode", tok_id, "the cat"],
                 ["tokenizer", "compare", tok_id],
                 ["artifacts", "find"],
                 ["artifacts", "show", embed_id],
                 ["artifacts", "gc"],
                 ["server", "status"]):
        res = runner.invoke(app, [*args, *store_opt, "--json"])
        assert res.exit_code == 0, (args, res.output[-2000:])
        last_line(res.stdout)
