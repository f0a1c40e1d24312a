"""Write reviews.tsv: 2,400 short film reviews made by a rule, each labelled positive or negative (CC0).

A review is one or two clauses. A clause says something about one aspect of a film with an adjective of known
polarity, perhaps intensified, perhaps negated ("the plot was not dull"): negation flips the polarity. Two clauses are
joined by "but", and then the second one decides ("the acting was wooden but the ending was moving" is positive), or
by "and" when both agree. So the label depends on word order and on negation, not on which words occur: a bag of
words cannot get every review right, a recurrent or attention model can. Seeded: the output is the same every time
(tests/data/test_bundled_data.py checks the file is this script's output).

    python data/labelled/make_reviews.py   # rewrites data/labelled/reviews.tsv
"""

from __future__ import annotations

import random
from pathlib import Path

ASPECTS = ["the plot", "the acting", "the script", "the ending", "the soundtrack", "the dialogue", "the cast",
           "the pacing", "the camera work", "the story", "the humour", "the lead actor", "the direction", "the film"]
VERBS = ["was", "is", "felt", "seemed"]
POSITIVE = ["wonderful", "moving", "brilliant", "charming", "gripping", "funny", "clever", "beautiful", "superb",
            "delightful", "fresh", "touching"]
NEGATIVE = ["dull", "boring", "wooden", "clumsy", "predictable", "tedious", "awful", "bland", "messy", "lifeless",
            "shallow", "forgettable"]
INTENSIFIERS = ["", "", "", "really ", "truly ", "quite ", "very "]
NEGATIONS = ["not ", "never ", "hardly "]
N, SEED = 2400, 20261127


def clause(rng: random.Random, positive: bool) -> str:
    """One clause whose meaning is ``positive``: a plain adjective of that polarity, or a negated opposite one."""
    negate = rng.random() < 0.35
    words = (NEGATIVE if positive else POSITIVE) if negate else (POSITIVE if positive else NEGATIVE)
    neg = rng.choice(NEGATIONS) if negate else ""
    return f"{rng.choice(ASPECTS)} {rng.choice(VERBS)} {neg}{rng.choice(INTENSIFIERS)}{rng.choice(words)}"


def review(rng: random.Random) -> tuple[str, str]:
    positive = rng.random() < 0.5
    shape = rng.random()
    if shape < 0.45:
        text = clause(rng, positive)
    elif shape < 0.75:  # a contrast: the second clause decides
        text = f"{clause(rng, not positive)} but {clause(rng, positive)}"
    else:
        text = f"{clause(rng, positive)} and {clause(rng, positive)}"
    return text, "positive" if positive else "negative"


def rows(n: int = N, seed: int = SEED) -> list[tuple[str, str]]:
    rng = random.Random(seed)
    return [review(rng) for _ in range(n)]


def render(n: int = N, seed: int = SEED) -> str:
    return "text\tlabel\n" + "".join(f"{t}\t{label}\n" for t, label in rows(n, seed))


if __name__ == "__main__":
    (Path(__file__).parent / "reviews.tsv").write_text(render(), encoding="utf-8")
