"""SQuAD v1.1's answer metrics (issue 48, item 3): the official evaluate-v1.1.py's normalisation, exact match and
token F1 on hand examples whose figures are worked out in the comments, and the sliding-window baseline's spans.
On ../shared: the baseline over XQuAD-en's 623 questions, between the first-word floor and 100."""

from __future__ import annotations

import json

import pytest

from corpusforge.models.qa_eval import (exact_match, f1, first_word_answer, normalize_answer, sliding_window_answer,
                                        squad_scores)
from tests.conftest import SHARED


@pytest.mark.parametrize(("raw", "normal"), [
    ("The  Quick, Brown fox!", "quick brown fox"),  # case, punctuation, article, whitespace
    ("an apple a day", "apple day"),
    ("Theater of the Absurd", "theater of absurd"),  # articles only as whole words
    ("A-Team", "ateam"),  # punctuation goes first: "a-team" -> "ateam", no article left
    ("U.S.", "us"),
    ("  \t\n", ""),
    ("“Smart” quotes", "“smart” quotes"),  # string.punctuation is ASCII only, as in the script
])
def test_normalize_answer_is_the_official_one(raw, normal):
    assert normalize_answer(raw) == normal


def test_exact_match_on_normalised_text_best_over_golds():
    assert exact_match("the Eiffel Tower.", ["Eiffel tower"]) == 1.0
    assert exact_match("Eiffel", ["Eiffel Tower"]) == 0.0
    assert exact_match("1889", ["in 1889", "1889"]) == 1.0  # the best gold
    assert exact_match("", ["dog"]) == 0.0


def test_f1_of_partial_overlap_by_hand():
    # "big red dog" vs "red dog barked": 2 shared words, P = R = 2/3, F1 = 2/3
    assert f1("the big red dog", ["red dog barked"]) == pytest.approx(2 / 3)
    # "cat sat on mat" vs "cat on mat mat": cat, on, mat shared once each (bags): P = R = 3/4
    assert f1("a cat sat on the mat", ["cat on a mat mat"]) == pytest.approx(0.75)
    # "red" vs "red dog": P = 1, R = 1/2, F1 = 2 * 1 * 0.5 / 1.5 = 2/3
    assert f1("red", ["red dog"]) == pytest.approx(2 / 3)
    assert f1("red", ["blue cat", "red dog", "red"]) == 1.0  # the best over golds
    assert f1("", ["dog"]) == 0.0 and f1("dog", ["cat"]) == 0.0


def test_answers_that_normalise_to_nothing_match_exactly_but_score_no_f1():
    # the official script's quirk, kept: "" == "" for EM, no shared token for F1
    assert exact_match("a", ["the"]) == 1.0 and f1("a", ["the"]) == 0.0


def test_golds_must_be_a_list():
    with pytest.raises(ValueError, match="non-empty list"):
        f1("x", [])
    with pytest.raises(ValueError, match="non-empty list"):
        exact_match("x", "x")


def test_squad_scores_count_a_missing_prediction_as_zero():
    golds = {"q1": ["Paris"], "q2": ["red dog"], "q3": ["1889"]}
    predictions = {"q1": "paris.", "q2": "red", "q9": "not asked"}  # q3 unanswered, q9 ignored
    scores = squad_scores(predictions, golds)
    assert scores["questions"] == 3 and scores["unanswered"] == 1
    assert scores["exact_match"] == pytest.approx(100 / 3)  # q1 only
    assert scores["f1"] == pytest.approx(100 * (1 + 2 / 3) / 3)  # q1 1, q2 2/3, q3 0
    with pytest.raises(ValueError, match="no question"):
        squad_scores({}, {})


CONTEXT = ("The Eiffel Tower was completed in 1889. It is located in Paris, France, on the Champ de Mars. "
           "Gustave Eiffel's company (“Compagnie des Établissements Eiffel”) designed and built it.")


def test_the_baseline_finds_an_easy_answer():
    assert sliding_window_answer("When was the Eiffel Tower completed?", CONTEXT) == (34, 38, "1889")


@pytest.mark.parametrize("question", [
    "When was the Eiffel Tower completed?", "Where is it located?", "Whose company designed the tower?",
    "What is the Champ de Mars?", "the", "", "Établissements?",
])
@pytest.mark.parametrize("max_words", [1, 4, 9])
def test_the_baseline_span_slices_back_to_the_context(question, max_words):
    start, end, text = sliding_window_answer(question, CONTEXT, max_words)
    assert 0 <= start < end <= len(CONTEXT) and CONTEXT[start:end] == text
    assert len(text.split()) <= max_words


def test_the_baseline_on_degenerate_contexts():
    assert sliding_window_answer("why?", "") == (0, 0, "")
    assert sliding_window_answer("why?", " ... !? ") == (0, 0, "")
    start, end, text = sliding_window_answer("what is it?", "It is what it is.")  # only stop and question words
    assert "It is what it is."[start:end] == text and text
    with pytest.raises(ValueError, match="max_words"):
        sliding_window_answer("q", "c", 0)


XQUAD = SHARED / "corpora" / "xquad-en" / "dev.json"


@pytest.mark.corpus
@pytest.mark.skipif(not XQUAD.exists(), reason="needs ../shared/corpora/xquad-en")
def test_the_baseline_on_xquad_en_beats_the_first_word():
    data = json.loads(XQUAD.read_text(encoding="utf-8"))["data"]
    golds, window, first = {}, {}, {}
    for article in data:
        for paragraph in article["paragraphs"]:
            context = paragraph["context"]
            for qa in paragraph["qas"]:
                golds[qa["id"]] = [a["text"] for a in qa["answers"]]
                start, end, text = sliding_window_answer(qa["question"], context)
                assert context[start:end] == text
                window[qa["id"]] = text
                first[qa["id"]] = first_word_answer(context)[2]
    ours, floor = squad_scores(window, golds), squad_scores(first, golds)
    print(f"XQuAD-en sliding window: EM {ours['exact_match']:.1f} F1 {ours['f1']:.1f}; "
          f"first word: EM {floor['exact_match']:.1f} F1 {floor['f1']:.1f}")
    assert ours["questions"] == 623 and ours["unanswered"] == 0
    assert 0 < ours["exact_match"] <= ours["f1"] < 100
    assert ours["f1"] > floor["f1"] and ours["exact_match"] > floor["exact_match"]
