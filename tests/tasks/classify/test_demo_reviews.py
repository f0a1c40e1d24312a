"""The demo's bundled labelled reviews (data/labelled/reviews.tsv) are what their committed script writes, and their
labels follow its rule: negation flips a clause, and after "but" the second clause decides."""

from __future__ import annotations

import importlib.util

from tests.conftest import REPO

FOLDER = REPO / "data" / "labelled"


def _script():
    spec = importlib.util.spec_from_file_location("make_reviews", FOLDER / "make_reviews.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_file_is_the_scripts_output():
    assert (FOLDER / "reviews.tsv").read_text(encoding="utf-8") == _script().render()


def polarity(clause: str, m) -> bool:
    words = clause.split()
    adjective = words[-1]
    positive = adjective in m.POSITIVE
    assert positive or adjective in m.NEGATIVE, clause
    negated = any(n.strip() in words for n in m.NEGATIONS)
    return positive != negated


def test_the_labels_follow_the_rule():
    m = _script()
    rows = m.rows()
    assert len(rows) == 2400 and {label for _, label in rows} == {"positive", "negative"}
    for text, label in rows:
        if " but " in text:
            first, second = text.split(" but ")
            assert polarity(first, m) != polarity(second, m)
            meaning = polarity(second, m)
        elif " and " in text:
            first, second = text.split(" and ")
            assert polarity(first, m) == polarity(second, m)
            meaning = polarity(first, m)
        else:
            meaning = polarity(text, m)
        assert label == ("positive" if meaning else "negative"), text
