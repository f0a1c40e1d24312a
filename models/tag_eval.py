"""How well a tagger tags (issue 46, item 4): pure functions over words, gold tags and predicted tags, one list per
sentence; no torch.

- :func:`token_accuracy`: the share of words tagged right (part of speech: UPOS, XPOS);
- :func:`most_frequent_tag`: the baseline every report shows beside a model: each training word's most frequent
  tag, words the training data lacks given its most frequent tag overall (about 86 on EWT UPOS dev);
- :func:`entity_scores`: entity-level precision, recall and F1 with ``seqeval``, overall (micro) and per type.
  The default mode is seqeval's conlleval-compatible one, the CoNLL scorer's: an entity counts only when its type
  and both boundaries match, and an ``I-`` tag after ``O`` starts an entity as conlleval reads it; ``strict=True``
  scores entities only where the tags follow the scheme (IOB2 or IOBES) exactly;
- :func:`confusion` and :func:`frequent_errors`: what is mistaken for what, and the (word, gold, predicted)
  triples that go wrong most often;
- :func:`spans`: the entities of one tagged sentence with their character offsets (``--json``, the report).
"""

from __future__ import annotations

import collections
from collections.abc import Sequence
from typing import Any

Sentences = Sequence[Sequence[str]]


def _pairs(gold: Sentences, pred: Sentences):
    if len(gold) != len(pred):
        raise ValueError(f"{len(gold)} gold sentences but {len(pred)} predicted")
    for i, (g, p) in enumerate(zip(gold, pred)):
        if len(g) != len(p):
            raise ValueError(f"sentence {i}: {len(g)} gold tags but {len(p)} predicted")
        yield from zip(g, p)


def token_accuracy(gold: Sentences, pred: Sentences) -> float:
    pairs = list(_pairs(gold, pred))
    return sum(g == p for g, p in pairs) / len(pairs) if pairs else 0.0


def most_frequent_tag(train_words: Sentences, train_tags: Sentences, words: Sentences) -> list[list[str]]:
    """The baseline's tags for ``words``: each word's most frequent tag in the training data (ties: the tag seen
    first), the most frequent tag overall for a word it lacks."""
    by_word: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    overall: collections.Counter = collections.Counter()
    for ws, ts in zip(train_words, train_tags):
        for w, t in zip(ws, ts):
            by_word[w][t] += 1
            overall[t] += 1
    if not overall:
        raise ValueError("no training words: the baseline needs the tags of a training split")
    commonest = overall.most_common(1)[0][0]
    best = {w: c.most_common(1)[0][0] for w, c in by_word.items()}
    return [[best.get(w, commonest) for w in ws] for ws in words]


def entity_scores(gold: Sentences, pred: Sentences, strict: bool = False, scheme: str = "IOB2") -> dict[str, Any]:
    """Entity-level ``precision``, ``recall``, ``f1`` (micro over every entity), ``support`` (gold entities) and
    ``per_type`` {type: the same four}, by seqeval (conlleval's reading unless ``strict``; ``scheme`` IOB2 or
    IOBES for strict)."""
    from seqeval.metrics import classification_report

    list(_pairs(gold, pred))  # aligned, or a ValueError naming the sentence
    kwargs: dict[str, Any] = {}
    if strict:
        from seqeval import scheme as schemes

        kwargs = {"mode": "strict", "scheme": {"IOB2": schemes.IOB2, "IOBES": schemes.IOBES}[scheme]}
    report = classification_report([list(g) for g in gold], [list(p) for p in pred], output_dict=True,
                                   zero_division=0, **kwargs)
    micro = report.get("micro avg", {"precision": 0.0, "recall": 0.0, "f1-score": 0.0, "support": 0})
    per_type = {name: {"precision": float(v["precision"]), "recall": float(v["recall"]),
                       "f1": float(v["f1-score"]), "support": int(v["support"])}
                for name, v in report.items() if not name.endswith(" avg")}
    return {"precision": float(micro["precision"]), "recall": float(micro["recall"]), "f1": float(micro["f1-score"]),
            "support": int(micro["support"]), "per_type": per_type}


def confusion(gold: Sentences, pred: Sentences, tags: Sequence[str] | None = None) -> tuple[list[str], list[list[int]]]:
    """(tags, counts): counts[i][j] words of gold tag i predicted as tag j; ``tags`` in the given order, else
    every tag seen, sorted."""
    pairs = list(_pairs(gold, pred))
    names = list(tags) if tags is not None else sorted({t for pair in pairs for t in pair})
    index = {t: i for i, t in enumerate(names)}
    counts = [[0] * len(names) for _ in names]
    for g, p in pairs:
        if g in index and p in index:
            counts[index[g]][index[p]] += 1
    return names, counts


def frequent_errors(words: Sentences, gold: Sentences, pred: Sentences, top: int = 10) -> list[dict[str, Any]]:
    """The (word, gold, predicted) mistakes made most often, most frequent first (ties: first seen)."""
    seen: collections.Counter = collections.Counter()
    for ws, gs, ps in zip(words, gold, pred):
        if not len(ws) == len(gs) == len(ps):
            raise ValueError("words, gold and predicted tags differ in length")
        for w, g, p in zip(ws, gs, ps):
            if g != p:
                seen[(w, g, p)] += 1
    return [{"word": w, "gold": g, "predicted": p, "count": n} for (w, g, p), n in seen.most_common(top)]


def spans(words: Sequence[str], tags: Sequence[str], offsets: Sequence[Sequence[int]] | None = None,
          text: str | None = None) -> list[dict[str, Any]]:
    """The entities of one sentence (conlleval's reading of its BIO/BIOES tags): type, first and last word
    (inclusive), and with ``offsets`` (each word's [start, end) in ``text``) the character span and its text."""
    from seqeval.metrics.sequence_labeling import get_entities

    if len(words) != len(tags):
        raise ValueError(f"{len(words)} words but {len(tags)} tags")
    out = []
    for kind, first, last in get_entities(list(tags)):
        entity: dict[str, Any] = {"type": kind, "first_word": first, "last_word": last,
                                  "words": " ".join(words[first:last + 1])}
        if offsets is not None:
            entity["start"], entity["end"] = int(offsets[first][0]), int(offsets[last][1])
            if text is not None:
                entity["text"] = text[entity["start"]:entity["end"]]
        out.append(entity)
    return out
