"""ROUGE and the summarization baselines (issue 47, item 2): hand-computed ROUGE on a toy pair, the two rules for
several references, and SciTLDR-A dev's Lead-1 against the anchor in ../shared/DATA.md."""

from __future__ import annotations

import json

import pytest

from corpusforge.models.summ_eval import lead, oracle, rouge, rouge_one
from tests.conftest import SHARED


def test_rouge_of_a_toy_pair_by_hand():
    # unigrams {the, cat, sat} vs {the, cat, ran}: 2 of 3 on each side; bigrams {the cat, cat sat} vs
    # {the cat, cat ran}: 1 of 2; the longest common subsequence "the cat": 2 of 3
    got = rouge_one("the cat sat", ["the cat ran"])
    assert got["rouge1"] == pytest.approx(2 / 3) and got["rouge2"] == pytest.approx(1 / 2)
    assert got["rougeL"] == pytest.approx(2 / 3)
    # the Porter stemmer: "running" and "runs" both stem to "run"
    assert rouge_one("dogs running", ["dog runs"])["rouge1"] == pytest.approx(1.0)


def test_two_rules_for_several_references():
    # "d c b a" has every word of the prediction (ROUGE-1 F1 1.0) but no bigram of it and a longest common
    # subsequence of 1 (ROUGE-L 1/4); "a b x" has 2 of its words (F1 2*(1/2)(2/3)/(7/6) = 4/7), its bigram "a b"
    # (P 1/3, R 1/2: F1 2/5) and the subsequence "a b" (P 1/2, R 2/3: F1 4/7)
    pred, refs = "a b c d", ["d c b a", "a b x"]
    best = rouge_one(pred, refs, "best")
    assert best == pytest.approx({"rouge1": 1.0, "rouge2": 2 / 5, "rougeL": 4 / 7})
    chosen = rouge_one(pred, refs, "rouge1")  # the authors' rule: all three from the ROUGE-1 choice, "d c b a"
    assert chosen == pytest.approx({"rouge1": 1.0, "rouge2": 0.0, "rougeL": 1 / 4})
    assert rouge([pred, "x"], [refs, ["x"]]) == pytest.approx({"rouge1": 100.0, "rouge2": 20.0,
                                                                "rougeL": 50 * (4 / 7 + 1)})


def test_bad_input_is_one_line():
    with pytest.raises(ValueError, match="non-empty list"):
        rouge_one("a", [])
    with pytest.raises(ValueError, match="non-empty list"):
        rouge_one("a", "a b")
    with pytest.raises(ValueError, match="rule"):
        rouge_one("a", ["a"], rule="mean")
    with pytest.raises(ValueError, match="2 predictions but 1"):
        rouge(["a", "b"], [["a"]])
    with pytest.raises(ValueError, match="3 sentences but 2"):
        oracle(["a", "b", "c"], [1, 0])


def test_lead_and_oracle_pick_sentences():
    source = ["  ", "First one. ", "Second.\n", "Third."]
    assert lead(source) == "First one." and lead(source, 2) == "First one. Second."
    assert oracle(source, [0, 0, 1, 1]) == "Second. Third."


SCITLDR = SHARED / "corpora" / "scitldr" / "dev.jsonl"


@pytest.mark.corpus
@pytest.mark.skipif(not SCITLDR.exists(), reason="needs ../shared/corpora/scitldr")
def test_scitldr_dev_lead1_is_the_anchor_and_the_oracle_is_above_it():
    records = [json.loads(line) for line in SCITLDR.read_text(encoding="utf-8").splitlines()]
    refs = [r["target"] for r in records]
    lead1 = rouge([lead(r["source"]) for r in records], refs)
    # ../shared/DATA.md: Lead-1 on dev 30.1 / 11.5 / 23.7 (rouge-score F1, Porter stemmer, best reference)
    assert (round(lead1["rouge1"], 1), round(lead1["rouge2"], 1), round(lead1["rougeL"], 1)) == (30.1, 11.5, 23.7)
    chosen = rouge([lead(r["source"]) for r in records], refs, rule="rouge1")
    assert chosen["rouge1"] == pytest.approx(lead1["rouge1"]) and chosen["rouge2"] < lead1["rouge2"]
    best_oracle = rouge([oracle(r["source"], r["source_labels"]) for r in records], refs)
    assert all(best_oracle[m] > lead1[m] + 5 for m in lead1)  # 44.06 / 23.98 / 36.58 measured
