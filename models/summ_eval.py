"""How good a summary is (issue 47, item 2): ROUGE against one or several references, and the two baselines every
summarization figure is read between; pure functions over strings, no torch.

- :func:`rouge`: ROUGE-1, ROUGE-2 and ROUGE-L F1 on a 0-100 scale (like BLEU), with Google's ``rouge-score``
  package and its Porter stemmer, averaged over documents. A document with several references (SciTLDR's dev set
  has 1-4 TLDRs per paper) is scored by one of two rules, and a figure must say which:
  ``best`` (the default): each metric takes its best reference, as most papers report SciTLDR;
  ``rouge1``: the SciTLDR authors' rule (their ``cal-rouge.py``): the reference with the best ROUGE-1 is chosen and
  all three metrics are read off that one reference (its ROUGE-2 and ROUGE-L are at most ``best``'s).
- :func:`lead` (Lead-k: the first k non-empty source sentences) and :func:`oracle` (the sentences the data labels
  as the extractive oracle): an abstractive model stands between the two. On SciTLDR-A dev, ``best`` rule:
  Lead-1 30.11 / 11.45 / 23.72 (the anchor in ../shared/DATA.md: 30.1 / 11.5 / 23.7), oracle 44.06 / 23.98 / 36.58.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

METRICS = ("rouge1", "rouge2", "rougeL")
RULES = ("best", "rouge1")


@lru_cache(maxsize=1)
def _scorer():
    from rouge_score import rouge_scorer

    return rouge_scorer.RougeScorer(list(METRICS), use_stemmer=True)


def rouge_one(prediction: str, references: Sequence[str], rule: str = "best") -> dict[str, float]:
    """One document's ROUGE F1 (0-1) per metric against its references, by ``rule`` (module docstring)."""
    if rule not in RULES:
        raise ValueError(f"rule: {rule!r} is not one of {', '.join(RULES)}")
    if isinstance(references, str) or not references:
        raise ValueError("references: a non-empty list of strings (one or more reference summaries)")
    scores = [_scorer().score(ref, prediction) for ref in references]
    if rule == "best":
        return {m: max(s[m].fmeasure for s in scores) for m in METRICS}
    chosen = max(scores, key=lambda s: s["rouge1"].fmeasure)  # the first reference among equals
    return {m: chosen[m].fmeasure for m in METRICS}


def rouge(predictions: Sequence[str], references: Sequence[Sequence[str]], rule: str = "best") -> dict[str, float]:
    """Mean ROUGE-1/2/L F1 over documents, 0-100: ``references[i]`` are document i's reference summaries."""
    if len(predictions) != len(references):
        raise ValueError(f"{len(predictions)} predictions but {len(references)} documents with references")
    if not predictions:
        raise ValueError("no documents to score")
    totals = dict.fromkeys(METRICS, 0.0)
    for prediction, refs in zip(predictions, references):
        for metric, value in rouge_one(prediction, refs, rule).items():
            totals[metric] += value
    return {metric: 100.0 * total / len(predictions) for metric, total in totals.items()}


def lead(source: Sequence[str], k: int = 1) -> str:
    """The first ``k`` non-empty sentences of a document, stripped and joined by one space (Lead-k)."""
    return " ".join([s.strip() for s in source if s.strip()][:k])


def oracle(source: Sequence[str], labels: Sequence[int]) -> str:
    """The sentences labelled 1 (the data's extractive oracle), stripped and joined by one space."""
    if len(source) != len(labels):
        raise ValueError(f"{len(source)} sentences but {len(labels)} oracle labels")
    return " ".join(s.strip() for s, keep in zip(source, labels) if keep and s.strip())


def best_sentence(source: Sequence[str], references: Sequence[str], rule: str = "best") -> str:
    """The one-sentence extractive oracle of a document without oracle labels: its non-empty sentence with the
    highest ROUGE-1 F1 against the references (by ``rule``; the first among equals), stripped. SciTLDR's
    ``source_labels`` mark the sentence chosen the same way against the author's TLDR; this one may use every
    reference, so its score is at least as high (on SciTLDR-A dev, best rule: see tests/models/test_summ_eval.py)."""
    sentences = [s.strip() for s in source if s.strip()]
    if not sentences:
        return ""
    return max(sentences, key=lambda s: rouge_one(s, references, rule)["rouge1"])


def baselines(sources: Sequence[Sequence[str]], references: Sequence[Sequence[str]],
              rule: str = "best") -> dict[str, float]:
    """Lead-1 and the one-sentence oracle (:func:`best_sentence`) on the same documents, as ``lead1_<metric>`` and
    ``oracle_<metric>`` (0-100): the two figures any summarizer's ROUGE is read between."""
    leads = [lead(s, 1) for s in sources]
    oracles = [best_sentence(s, r, rule) for s, r in zip(sources, references)]
    out = {f"lead1_{m}": v for m, v in rouge(leads, references, rule).items()}
    out.update({f"oracle_{m}": v for m, v in rouge(oracles, references, rule).items()})
    return out
