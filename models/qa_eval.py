"""How good an extractive answer is (issue 48, item 3): SQuAD v1.1's exact match and token F1, and the sliding-window
baseline an answer figure is read against; pure functions over strings, no torch.

- :func:`normalize_answer`, :func:`exact_match`, :func:`f1`, :func:`squad_scores`: the official SQuAD v1.1
  evaluation script (``evaluate-v1.1.py``, Rajpurkar et al. 2016) function for function: the same normalisation, the
  best score over a question's gold answers, the corpus figure as a 0-100 average over every gold question, a
  question without a prediction scoring 0 (the script prints "Unanswered question ... will receive score 0."; we
  count them in ``unanswered``) and predictions for questions that are not in the golds ignored.
- :func:`sliding_window_answer`: the "Sliding Window Baseline" of the SQuAD paper (Rajpurkar et al. 2016, section 5,
  after Richardson et al. 2013's MCTest baseline). The paper's description, paraphrased: for each candidate answer,
  the unigram/bigram overlap between the question and the sentence containing the candidate, the candidate itself
  left out, is computed; the candidates with the largest overlap are kept, and the best of them is chosen with
  Richardson et al.'s sliding window: with S the set of the question's and the candidate's words, a window of |S|
  words slides over the text and scores the inverse counts IC(w) = log(1 + 1/C(w)) of its words that are in S
  (C(w): how often w occurs in the passage); the candidate's score is its best window. The paper used the sentence
  of the candidate, not the whole passage, as the window's text, for speed; so do we (C(w) still counts the whole
  paragraph). On SQuAD v1.1 dev the paper reports 13.2 EM / 20.2 F1 for it (random guess 1.1 / 4.1).

  Differences, because we have no parser: the paper's candidates are the constituents of Stanford CoreNLP's
  constituency parse; ours are every span of 1 to ``max_words`` consecutive words of one sentence (a word: a run of
  non-space characters that starts and ends with a letter or digit, so ``"1973,"`` is ``1973``) whose first and
  last words are not stop words (a short English function-word list below; a phrase-like span, as a constituent is
  once the articles SQuAD's scoring ignores are left off: 95% of XQuAD-en's gold answers are such spans) and that is
  not made of question words and stop words only. Sentences end after ``. ! ?`` (and closing quotes or brackets)
  followed by whitespace, so an abbreviation (``U.S. Army``) may split one. Words are compared lowercased with
  SQuAD's punctuation removed (``world's`` = ``worlds``). The distance-based extension (Richardson et al.'s SW+D,
  13.3 EM in the paper) is not implemented. Ties go to the earliest, then shortest, span.
  ``max_words`` defaults to 4: SQuAD's answers are mostly entities, dates, numbers and short noun phrases (the
  paper's Table 2), and 83% of XQuAD-en's gold answers are 1-4 words (counted on the answers alone). The window
  score counts the candidate's own words, so of nested spans the longest wins: answers are mostly ``max_words``
  long, which costs exact match more than F1. On XQuAD-en (623 questions): 4.3 EM / 21.0 F1 (with candidates not
  required to start and end on a content word: 1.6 / 17.0); the first word of the context: 1.1 / 2.0.
"""

from __future__ import annotations

import math
import re
import string
from collections import Counter
from collections.abc import Mapping, Sequence

_PUNCTUATION = frozenset(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")


def normalize_answer(s: str) -> str:
    """SQuAD v1.1's normalisation (evaluate-v1.1.py ``normalize_answer``): lowercase, every character of
    ``string.punctuation`` removed, the articles a/an/the removed as whole words, whitespace collapsed to single
    spaces (in that order)."""
    text = "".join(ch for ch in s.lower() if ch not in _PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def _golds(golds: Sequence[str]) -> Sequence[str]:
    if isinstance(golds, str) or not golds:
        raise ValueError("golds: a non-empty list of gold answers (one string is a list of one)")
    return golds


def _exact_one(prediction: str, gold: str) -> float:
    return float(normalize_answer(prediction) == normalize_answer(gold))


def _f1_one(prediction: str, gold: str) -> float:
    predicted = normalize_answer(prediction).split()
    wanted = normalize_answer(gold).split()
    same = sum((Counter(predicted) & Counter(wanted)).values())
    if same == 0:  # also an empty prediction or gold, as the official script (2 empty answers: EM 1, F1 0)
        return 0.0
    precision, recall = same / len(predicted), same / len(wanted)
    return 2 * precision * recall / (precision + recall)


def exact_match(prediction: str, golds: Sequence[str]) -> float:
    """1.0 when the normalised prediction equals a normalised gold answer, else 0.0 (the best over ``golds``)."""
    return max(_exact_one(prediction, g) for g in _golds(golds))


def f1(prediction: str, golds: Sequence[str]) -> float:
    """Token F1 (0-1) of the normalised prediction's words against a gold answer's (bags of words: a word counts as
    often as it occurs in both), the best over ``golds``; 0 when they share no word."""
    return max(_f1_one(prediction, g) for g in _golds(golds))


def squad_scores(predictions: Mapping[str, str], golds: Mapping[str, Sequence[str]]) -> dict[str, float | int]:
    """The official script's figures: ``exact_match`` and ``f1`` as 0-100 averages over every question of ``golds``
    (question id -> its gold answers), a question without a prediction scoring 0; ``questions``: how many;
    ``unanswered``: how many had no prediction. Predictions for ids not in ``golds`` are ignored, as the script
    ignores them."""
    if not golds:
        raise ValueError("golds: no question to score")
    em = score = 0.0
    unanswered = 0
    for qid, answers in golds.items():
        if qid not in predictions:
            unanswered += 1
            continue
        em += exact_match(predictions[qid], answers)
        score += f1(predictions[qid], answers)
    n = len(golds)
    return {"exact_match": 100.0 * em / n, "f1": 100.0 * score / n, "questions": n, "unanswered": unanswered}


# --- the sliding-window baseline ---------------------------------------------------------------------------------

_WORD = re.compile(r"\w(?:\S*\w)?")
_SENTENCE_END = re.compile(r"[.!?]+[\"'\u201d\u2019)\]]*\s+")
# English function words: a candidate made of these and question words only is no answer
STOP_WORDS = frozenset("""
a an the and or but nor so yet if then than that this these those there here of in on at by for with from to into
onto upon over under about above below after before between through during without within among against across
along around as is am are was were be been being has have had having do does did doing will would shall should can
could may might must it its it's he him his she her hers they them their theirs we us our ours you your yours i me
my mine who whom whose which what when where why how not no also just only very more most such some any each all
both either neither other another one ones s
""".split())


def _key(word: str) -> str:
    """How words are compared: lowercased, SQuAD's punctuation removed."""
    return "".join(ch for ch in word.lower() if ch not in _PUNCTUATION) or word.lower()


def _words(text: str) -> list[tuple[int, int, str]]:
    return [(m.start(), m.end(), _key(m.group())) for m in _WORD.finditer(text)]


def _sentences(text: str) -> list[tuple[int, int]]:
    """[start, end) of each sentence: a cut after . ! ? (and closing quotes or brackets) followed by whitespace."""
    cuts = [m.end() for m in _SENTENCE_END.finditer(text)]
    bounds = [0, *cuts, len(text)]
    return [(a, b) for a, b in zip(bounds, bounds[1:]) if a < b]


def _window_score(keys: Sequence[str], wanted: set[str], ic: Mapping[str, float]) -> float:
    """Richardson et al.'s sliding window over ``keys``: the best sum of IC(w) over the words in ``wanted`` of a
    window of ``len(wanted)`` consecutive words (one window of all of them when the text is shorter)."""
    size = max(1, len(wanted))
    gains = [ic[k] if k in wanted else 0.0 for k in keys]
    best = current = sum(gains[:size])
    for j in range(size, len(gains)):
        current += gains[j] - gains[j - size]
        best = max(best, current)
    return best


def sliding_window_answer(question: str, context: str, max_words: int = 4) -> tuple[int, int, str]:
    """The sliding-window baseline's answer to ``question`` in ``context`` (module docstring): ``(start, end,
    text)`` with ``context[start:end] == text``; ``(0, 0, "")`` for a context without a word."""
    if max_words < 1:
        raise ValueError(f"max_words: at least 1, got {max_words}")
    words = _words(context)
    if not words:
        return 0, 0, ""
    counts = Counter(k for _, _, k in words)
    ic = {k: math.log(1.0 + 1.0 / c) for k, c in counts.items()}
    q_keys = [k for _, _, k in _words(question)]
    q_unigrams = set(q_keys)
    q_bigrams = set(zip(q_keys, q_keys[1:]))
    dull = q_unigrams | STOP_WORDS
    # (overlap, window, -start, -length) is maximised; candidates are (sentence's keys, i, j): words i..j-1
    best: tuple[float, ...] | None = None
    answer = (words[0][0], words[0][1])
    best_any: tuple[int, int, int] | None = None
    for lo, hi in _sentences(context):
        idx = [n for n, (s, e, _) in enumerate(words) if s >= lo and e <= hi]
        if not idx:
            continue
        keys = [words[n][2] for n in idx]
        uni = Counter(k for k in keys if k in q_unigrams)
        big = Counter(b for b in zip(keys, keys[1:]) if b in q_bigrams)
        n = len(keys)
        scored: list[tuple[int, int, int]] = []  # (overlap, i, j)
        for i in range(n):
            for j in range(i + 1, min(n, i + max_words) + 1):
                removed_u = Counter(k for k in keys[i:j] if k in q_unigrams)
                removed_b = Counter(b for b in zip(keys[max(i - 1, 0):j + 1], keys[max(i - 1, 0) + 1:j + 1])
                                    if b in q_bigrams)
                overlap = (len(uni) - sum(1 for k, c in removed_u.items() if c == uni[k])
                           + len(big) - sum(1 for b, c in removed_b.items() if c == big[b]))
                if keys[i] in STOP_WORDS or keys[j - 1] in STOP_WORDS or all(k in dull for k in keys[i:j]):
                    if best_any is None or overlap > best_any[0]:  # used only if no span qualifies
                        best_any = (overlap, idx[i], idx[j - 1])
                    continue
                scored.append((overlap, i, j))
        if not scored:
            continue
        top = max(o for o, _, _ in scored)
        if best is not None and top < best[0]:
            continue
        for overlap, i, j in scored:
            if overlap != top:
                continue
            window = _window_score(keys, q_unigrams | set(keys[i:j]), ic)
            start, end = words[idx[i]][0], words[idx[j - 1]][1]
            rank = (overlap, window, -start, -(end - start))
            if best is None or rank > best:
                best, answer = rank, (start, end)
    if best is None and best_any is not None:  # no span qualifies: the best-overlap span of any kind
        answer = (words[best_any[1]][0], words[best_any[2]][1])
    start, end = answer
    return start, end, context[start:end]


def first_word_answer(context: str) -> tuple[int, int, str]:
    """The floor any answerer should beat: the context's first word (as the baseline splits words)."""
    m = _WORD.search(context)
    return (m.start(), m.end(), m.group()) if m else (0, 0, "")
