"""`corpusforge ngram estimate | query | evaluate`: each once through the real console script, the rest in this
process (tests/commands.py).

Expected numbers are hand arithmetic on the teaching text (issue 4): add-one bigrams with the
vocabulary {the cat sat on mat ate fish dog </s> <unk>}, V = 10.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.commands import corpusforge
from tests.conftest import write
from tests.flows.cli.test_main import cli_env

TEACHING = "the cat sat on the mat\nthe cat ate the fish\nthe dog sat on the mat\n"


def run(args, cwd, api_url=None, subprocess=False):
    """In this process (tests/commands.py); ``subprocess=True`` for the console script itself."""
    return corpusforge(*args, cwd=cwd, env=cli_env(api_url), subprocess=subprocess)


def test_estimate_query_evaluate(prefect_harness, tmp_path):
    write(tmp_path / "train.txt", TEACHING)
    write(tmp_path / "held.txt", "the cat sat\n")
    store = str(tmp_path / "store")
    res = run(["ngram", "estimate", "train.txt", "--order", "2", "--smoothing", "add-k", "--k", "1",
               "--eval", "held.txt", "--arpa", "out.arpa", "--store", store, "--json"], tmp_path, prefect_harness,
              subprocess=True)
    assert res.returncode == 0, res.stderr[-3000:]
    payload = json.loads(res.stdout.strip().splitlines()[-1])
    assert set(payload) >= {"id", "perplexity", "oov", "sentences"}
    # P(the|<s>) = 4/13, P(cat|the) = 3/16, P(sat|cat) = 2/12, P(</s>|sat) = 1/12
    expected = (4 / 13 * 3 / 16 * 2 / 12 * 1 / 12) ** (-1 / 4)
    assert payload["perplexity"] == {"held.txt": pytest.approx(expected)}
    assert payload["oov"] == {"held.txt": 0} and payload["sentences"] == 3
    assert (tmp_path / "out.arpa").read_text().startswith("\\data\\")

    again = run(["ngram", "estimate", "train.txt", "--order", "2", "--smoothing", "add-k", "--k", "1",
                 "--eval", "held.txt", "--arpa", "out/m.arpa.gz", "--store", store, "--json"], tmp_path, prefect_harness)
    assert again.returncode == 0, again.stderr[-3000:]
    second = json.loads(again.stdout.strip().splitlines()[-1])
    assert second["reused"] and second["id"] == payload["id"]
    assert (tmp_path / "out" / "m.arpa.gz").read_bytes() == (Path(payload["path"]) / "model.arpa.gz").read_bytes()

    q = run(["ngram", "query", payload["id"][:10], "--context", "the", "--top", "2", "--word", "dog",
             "--store", store, "--json"], tmp_path, subprocess=True)
    assert q.returncode == 0, q.stderr[-3000:]
    answer = json.loads(q.stdout.strip().splitlines()[-1])
    assert sorted(t["word"] for t in answer["top"]) == ["cat", "mat"]
    assert answer["top"][0]["prob"] == pytest.approx(3 / 16)
    assert answer["word"]["prob"] == pytest.approx(2 / 16)

    human = run(["ngram", "query", payload["id"][:10], "--context", "the cat", "--top", "5", "--store", store],
                tmp_path)
    assert human.returncode == 0 and "sat" in human.stdout and "ate" in human.stdout

    ev = run(["ngram", "evaluate", "out.arpa", "held.txt", "--json"], tmp_path, subprocess=True)
    assert ev.returncode == 0, ev.stderr[-3000:]
    result = json.loads(ev.stdout.strip().splitlines()[-1])["results"]["held.txt"]
    assert result["perplexity"] == pytest.approx(expected, rel=1e-6)  # read back from the ARPA file


def test_bad_usage_exits_2(tmp_path):
    write(tmp_path / "train.txt", TEACHING)
    res = run(["ngram", "estimate", "train.txt", "--smoothing", "witten-bell"], tmp_path)
    assert res.returncode == 2 and "--smoothing" in res.stderr
    res = run(["ngram", "estimate", "train.txt", "--smoothing", "stupid-backoff", "--arpa", "x.arpa"], tmp_path)
    assert res.returncode == 2 and "not probabilities" in res.stderr
    res = run(["ngram", "query", "ffff0000", "--store", str(tmp_path / "s")], tmp_path)
    assert res.returncode == 2


def test_estimate_with_prune(prefect_harness, tmp_path):
    """--prune 0,1 (lmplz's --prune 0 1: bigrams and trigrams seen once dropped) changes the model and its id."""
    write(tmp_path / "train.txt", TEACHING * 2 + "a cat sat on a fish\n")
    write(tmp_path / "held.txt", "the cat sat on the fish\n")
    store = str(tmp_path / "store")
    res = run(["ngram", "estimate", "train.txt", "--order", "3", "--prune", "0,1", "--eval", "held.txt", "--arpa",
               "p.arpa", "--store", store, "--json"], tmp_path, prefect_harness)
    assert res.returncode == 0, res.stderr[-3000:]
    payload = json.loads(res.stdout.strip().splitlines()[-1])
    assert payload["prune"] == [0, 1]
    stats = json.loads((Path(payload["path"]) / "stats.json").read_text())
    # seen once, all in the added sentence: <s> a, a cat, on a, a fish; <s> a cat, a cat sat, sat on a, on a fish,
    # a fish </s> (cat sat, sat on, fish </s>, cat sat on are in the teaching text too)
    assert stats["model"]["prune"] == [0, 1, 1] and stats["model"]["pruned"] == {"1": 0, "2": 4, "3": 5}
    header = (tmp_path / "p.arpa").read_text().split("\n\n")[0].splitlines()
    per_order = stats["per_order"]
    assert header[1:] == [f"ngram 1={per_order['1']['distinct'] + 1}",  # + <unk>, unseen
                          f"ngram 2={per_order['2']['distinct'] - 4}", f"ngram 3={per_order['3']['distinct'] - 5}"]
    ev = run(["ngram", "evaluate", "p.arpa", "held.txt", "--json"], tmp_path)
    assert ev.returncode == 0, ev.stderr[-3000:]
    assert json.loads(ev.stdout.strip().splitlines()[-1])["results"]["held.txt"]["perplexity"] == pytest.approx(
        payload["perplexity"]["held.txt"], rel=1e-6)

    for args, message in ((["--set", "prune=[0,2,1]"], "ngram.prune: thresholds must be non-decreasing"),
                          (["--prune", "x"], "--prune: 'x' is not a list")):  # the other rules: test_ngram_prune_kenlm
        bad = run(["ngram", "estimate", "train.txt", *args, "--store", store], tmp_path, prefect_harness)
        assert bad.returncode == 2 and message in bad.stderr, (args, bad.stderr[-500:])
