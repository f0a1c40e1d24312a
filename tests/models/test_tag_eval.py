"""Tagging evaluation (corpusforge.models.tag_eval, issue 46 item 4): hand-counted cases for entity precision,
recall and F1 (type and both boundaries must match; conlleval's reading of an I- tag after O against seqeval's
strict mode), the most-frequent-tag baseline, the confusion counts, the frequent errors, entity spans with their
character offsets; and on ../shared, the baseline the issue quotes for EWT UPOS (about 86)."""

from __future__ import annotations

import pytest

from corpusforge.models.tag_eval import (
    confusion,
    entity_scores,
    frequent_errors,
    most_frequent_tag,
    spans,
    token_accuracy,
)
from tests.conftest import REPO

GOLD = [["B-PER", "I-PER", "O", "B-LOC"], ["B-ORG", "O"]]
PRED = [["B-PER", "I-PER", "O", "B-ORG"], ["B-ORG", "O"]]


def test_entity_scores_count_whole_entities_of_the_right_type():
    s = entity_scores(GOLD, PRED)
    # gold: PER, LOC, ORG; predicted: PER, ORG (wrong type at LOC's place), ORG; right: PER and the second ORG
    assert (s["precision"], s["recall"], s["f1"], s["support"]) == pytest.approx((2 / 3, 2 / 3, 2 / 3, 3))
    assert s["per_type"]["PER"] == {"precision": 1.0, "recall": 1.0, "f1": 1.0, "support": 1}
    assert s["per_type"]["LOC"] == {"precision": 0.0, "recall": 0.0, "f1": 0.0, "support": 1}
    assert s["per_type"]["ORG"]["precision"] == 0.5 and s["per_type"]["ORG"]["recall"] == 1.0
    cut_short = entity_scores([["B-PER", "I-PER"]], [["B-PER", "O"]])  # one boundary wrong: no credit
    assert cut_short["precision"] == cut_short["recall"] == 0.0


def test_conlleval_reads_an_inside_tag_after_o_as_an_entity_and_strict_mode_does_not():
    gold, pred = [["O", "B-PER", "O"]], [["O", "I-PER", "O"]]
    assert entity_scores(gold, pred)["f1"] == 1.0  # conlleval: I-PER after O starts a PER entity
    assert entity_scores(gold, pred, strict=True)["f1"] == 0.0  # IOB2 strictly: no entity begins with I-
    bioes = entity_scores([["B-LOC", "E-LOC", "S-PER"]], [["B-LOC", "E-LOC", "S-PER"]], strict=True, scheme="IOBES")
    assert bioes["f1"] == 1.0 and bioes["support"] == 2


def test_token_accuracy_baseline_confusion_and_errors():
    words = [["the", "dog", "runs"], ["a", "run"]]
    gold = [["DET", "NOUN", "VERB"], ["DET", "NOUN"]]
    assert token_accuracy(gold, [["DET", "NOUN", "NOUN"], ["DET", "VERB"]]) == 3 / 5
    train_words = [["the", "run", "run", "runs", "dog"], ["dogs", "run"]]
    train_tags = [["DET", "NOUN", "VERB", "VERB", "NOUN"], ["NOUN", "VERB"]]
    # run: VERB twice, NOUN once; 'a' is unseen: the commonest tag overall (NOUN 3, VERB 3, DET 1: NOUN seen first)
    assert most_frequent_tag(train_words, train_tags, words) == [["DET", "NOUN", "VERB"], ["NOUN", "VERB"]]
    pred = [["DET", "NOUN", "NOUN"], ["DET", "VERB"]]
    names, counts = confusion(gold, pred)
    assert names == ["DET", "NOUN", "VERB"] and counts == [[2, 0, 0], [0, 1, 1], [0, 1, 0]]
    errors = frequent_errors(words + words, gold + gold, pred + [["DET", "NOUN", "VERB"], ["DET", "NOUN"]])
    assert errors[0] == {"word": "runs", "gold": "VERB", "predicted": "NOUN", "count": 1} and len(errors) == 2
    with pytest.raises(ValueError, match="sentence 1: 2 gold tags but 1 predicted"):
        token_accuracy(gold, [pred[0], ["DET"]])


def test_spans_carry_their_character_offsets():
    text = "Peter Blackburn visited New York."
    words = ["Peter", "Blackburn", "visited", "New", "York", "."]
    offsets = [[0, 5], [6, 15], [16, 23], [24, 27], [28, 32], [32, 33]]
    found = spans(words, ["B-PER", "I-PER", "O", "B-LOC", "I-LOC", "O"], offsets, text)
    assert [(e["type"], e["text"], e["start"], e["end"]) for e in found] == [
        ("PER", "Peter Blackburn", 0, 15), ("LOC", "New York", 24, 32)]
    assert found[1]["first_word"] == 3 and found[1]["last_word"] == 4


@pytest.mark.corpus
@pytest.mark.skipif(not (REPO.parent / "shared" / "corpora" / "ud-ewt").is_dir(), reason="needs ../shared ud-ewt")
def test_the_most_frequent_tag_baseline_on_ewt_upos_dev_is_about_86():
    """The issue's anchor ("most frequent tag per word about 86"), computed: 0.8613 on dev (train's counts)."""
    from corpusforge.storage.tagged import TagColumns, read_conllu

    ewt = REPO.parent / "shared" / "corpora" / "ud-ewt"
    train, dev = ([r for r in read_conllu(ewt / f"en_ewt-ud-{s}.conllu", TagColumns({"upos": "upos"}))]
                  for s in ("train", "dev"))
    guess = most_frequent_tag([r.fields["tokens"] for r in train], [r.fields["upos"] for r in train],
                              [r.fields["tokens"] for r in dev])
    assert 0.85 <= token_accuracy([r.fields["upos"] for r in dev], guess) <= 0.87
