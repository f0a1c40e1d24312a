"""A trained reader as something that answers: :class:`Reader` (what ``Artifact.load()`` returns for a qa artifact,
what the registered MLflow pyfunc wraps, and what ``corpusforge qa ask/evaluate`` call).

A question is read with each passage it is given, window by window (tasks/qa/data.py); in each window the n best
start and n best end positions inside the passage are paired (end not before start, at most ``max_answer_len``
tokens: BERT's SQuAD decoding), scored by start + end logit, and the best pair of any window of any passage is the
answer, mapped back to the passage's characters through its tokens' offsets. The passage text is read as written:
the reader's tokenizer normalises it (lowercase, NFC) but the offsets are the original string's."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from corpusforge.tasks.qa.data import Paragraph, PassageSearch, Windower


def best_spans(start, end, first: int, length: int, n_best: int, max_answer_len: int) -> list[tuple[float, int, int]]:
    """(score, start, end) of the valid spans among the ``n_best`` starts and ends of one window's passage tokens
    (positions ``first .. first + length - 1``), best first: end >= start, end - start < max_answer_len."""
    import numpy as np

    if length < 1:
        return []
    s = np.asarray(start[first: first + length], dtype=np.float64)
    e = np.asarray(end[first: first + length], dtype=np.float64)
    starts = np.argsort(-s, kind="stable")[:n_best]
    ends = np.argsort(-e, kind="stable")[:n_best]
    found = [(float(s[i] + e[j]), int(i), int(j)) for i in starts for j in ends if i <= j < i + max_answer_len]
    found.sort(key=lambda t: (-t[0], t[1], t[2]))
    return found


class Reader:
    """A trained reader and its tokenizer: ``answer(question, passages)`` gives the best answer span of any passage;
    ``answer_batch`` does many questions at once."""

    def __init__(self, model, tokenizer, spec: dict[str, Any]):
        self.model, self.tokenizer, self.spec = model, tokenizer, spec
        qa = spec.get("qa") or {}
        cfg = model.cfg
        self.windower = Windower(tokenizer, cfg.block_size, cfg.cls_id, cfg.sep_id,
                                 int(qa.get("max_query_len", 64)), int(qa.get("stride", 0)))
        self.max_answer_len = int(qa.get("max_answer_len", 30))
        self.n_best = int(qa.get("n_best", 20))

    def answer(self, question: str, passages: str | Sequence[str]) -> dict[str, Any]:
        """The best answer: ``answer`` (text), ``score`` (start + end logit), ``passage`` (its index in
        ``passages``), ``start``/``end`` (characters in that passage); ``answer`` empty when no passage has a
        token."""
        passages = [passages] if isinstance(passages, str) else list(passages)
        return self.answer_batch([question], [passages])[0]

    def answer_batch(self, questions: Sequence[str], passages: Sequence[Sequence[str]],
                     batch_size: int = 32) -> list[dict[str, Any]]:
        """Per question, its best answer among its own passages (``passages[i]`` for ``questions[i]``)."""
        import torch

        from corpusforge.models.objectives import evaluating

        if len(questions) != len(passages):
            raise ValueError(f"{len(questions)} questions but {len(passages)} passage lists")
        encoded: dict[str, tuple] = {}
        items = []  # (question index, passage index, window)
        for qi, (question, texts) in enumerate(zip(questions, passages)):
            qids = self.windower.question(question)
            for pi, text in enumerate(texts):
                if text not in encoded:
                    encoded[text] = self.windower.passage(text)
                items.extend((qi, pi, w) for w in self.windower.windows(qids, encoded[text]))
        best: list[dict[str, Any]] = [{"answer": "", "score": float("-inf"), "passage": None, "start": None,
                                       "end": None} for _ in questions]
        device = next(self.model.parameters()).device
        order = sorted(range(len(items)), key=lambda i: len(items[i][2].ids))
        with evaluating(self.model), torch.no_grad():
            for at in range(0, len(order), batch_size):
                chunk = [items[i] for i in order[at: at + batch_size]]
                tensors = tuple(t.to(device) for t in self.model.collate([(w.ids, w.segments) for _, _, w in chunk]))
                start, end = (t.float().cpu().numpy() for t in self.model(*tensors))
                for row, (qi, pi, w) in enumerate(chunk):
                    spans = best_spans(start[row], end[row], w.first, len(w.offsets), self.n_best,
                                       self.max_answer_len)
                    if spans and spans[0][0] > best[qi]["score"]:
                        score, i, j = spans[0]
                        text = passages[qi][pi]
                        a, b = w.offsets[i][0], w.offsets[j][1]
                        best[qi] = {"answer": text[a:b], "score": score, "passage": pi, "start": a, "end": b}
        for row in best:
            if row["passage"] is None:
                row["score"] = None
        return best


def question_ids(paragraphs: Sequence[Paragraph]) -> list[str]:
    return [q.id for p in paragraphs for q in p.questions]


def gold_inputs(paragraphs: Sequence[Paragraph]) -> tuple[list[str], list[list[str]]]:
    """(questions, [their own paragraph]) in :func:`question_ids` order."""
    questions, passages = [], []
    for p in paragraphs:
        for q in p.questions:
            questions.append(q.question)
            passages.append([p.context])
    return questions, passages


def score(reader, paragraphs: Sequence[Paragraph], top: int, predicted: Mapping[str, str] | None = None,
          retrieved: Mapping[str, str] | None = None, retriever: Any = None) -> dict[str, Any]:
    """SQuAD exact match and F1 (0-100) of the answers to ``paragraphs``' questions read from their own paragraph
    (the reader's, or ``predicted``), the sliding-window baseline on the same questions, retrieval over these
    paragraphs (top-1, top-5, MRR against each question's own; ``retriever``: a tasks.qa.data.PassageSearch over
    them, by paragraph or by chunk; default BM25 by paragraph), and the answers read from the ``top`` retrieved
    passages (``*_retrieved``: the reader's, or ``retrieved``). Answers left out of ``predicted``/``retrieved``
    count as wrong (SQuAD's official script)."""
    from corpusforge.models.qa_eval import sliding_window_answer, squad_scores
    from corpusforge.models.retrieval import Retriever, retrieval_metrics

    ids = question_ids(paragraphs)
    golds = {q.id: q.texts for p in paragraphs for q in p.questions}
    questions, passages = gold_inputs(paragraphs)
    if ids and retriever is None:
        retriever = PassageSearch([p.context for p in paragraphs], lambda units: Retriever(units, mode="bm25"))
    found = retriever.search(questions, top) if ids else []
    if reader is not None:
        predicted = {qid: a["answer"] for qid, a in zip(ids, reader.answer_batch(questions, passages))}
        read = reader.answer_batch(questions, [[text for _, _, text in f["read"]] for f in found])
        retrieved = {qid: a["answer"] for qid, a in zip(ids, read)}
    scores = squad_scores(predicted or {}, golds)
    base = squad_scores({qid: sliding_window_answer(q, ps[0])[2] for qid, q, ps in zip(ids, questions, passages)},
                        golds)
    out: dict[str, Any] = {"questions": len(ids), "paragraphs": len(paragraphs),
                           "exact_match": scores["exact_match"], "f1": scores["f1"],
                           "baseline_exact_match": base["exact_match"], "baseline_f1": base["f1"]}
    if ids:
        gold_paragraph = [i for i, p in enumerate(paragraphs) for _ in p.questions]
        ranks = retrieval_metrics([f["documents"] for f in found], gold_paragraph)
        out.update(retrieval_mode=retriever.mode, retrieval_top1=ranks["retrieval_top1"],
                   retrieval_top5=ranks["retrieval_top5"], retrieval_mrr=ranks["retrieval_mrr"])
        read = squad_scores(retrieved or {}, golds)
        out.update(exact_match_retrieved=read["exact_match"], f1_retrieved=read["f1"])
    out["predictions"] = dict(predicted or {})
    return out


def load_reader(model_dir: str | Path, tokenizer_dir: str | Path | None = None, device: str = "cpu") -> Reader:
    """The reader saved in ``model_dir`` with its tokenizer (the one its config.json records, or ``tokenizer_dir``:
    a registered model's own copy). Nothing is unpickled."""
    from corpusforge.tasks.encoded import load_with_tokenizer

    model, tokenizer, spec = load_with_tokenizer(model_dir, tokenizer_dir, device)
    return Reader(model, tokenizer, spec)


def load_artifact(artifact_dir: Path, manifest: dict[str, Any]) -> Reader:
    """``Artifact.load()`` for a qa artifact (its files already checked against their digests)."""
    return load_reader(artifact_dir)


def highlights(model_dir: Path) -> list[str]:
    """The scores worth reading at once: exact match and F1 beside the sliding-window baseline, retrieval, and one
    answered question."""
    path = Path(model_dir) / "evaluation.json"
    if not path.is_file():
        return []
    ev = json.loads(path.read_text(encoding="utf-8"))
    lines = []
    for name, s in (ev.get("scores") or {}).items():
        line = (f"{name}: exact match {s['exact_match']:.1f}, F1 {s['f1']:.1f} on {s['questions']} questions "
                f"(sliding-window baseline F1 {s['baseline_f1']:.1f})")
        if "retrieval_top1" in s:
            line += (f"; {s.get('retrieval_mode', 'bm25')} retrieval top-1 {s['retrieval_top1']:.2f}, top-5 "
                     f"{s['retrieval_top5']:.2f}, then read: F1 {s['f1_retrieved']:.1f}")
        lines.append(line)
    example = ev.get("example")
    if example:
        lines.append(f"Q: {example['question']}  A: {example['answer']!r}  (gold {example['gold']!r})")
    return lines
