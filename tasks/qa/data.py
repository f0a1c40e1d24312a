"""Question-answering records as the qa stage reads them, and the windows a reader reads.

A corpus split's question-answering records (corpus.reader.squad, storage/squad.py) are one record per paragraph:
``text`` the paragraph as written (cleaning leaves it alone, so the answers' character offsets hold), ``title`` its
article, and ``meta`` its questions: ``{"qas": [{"id", "question", "answers": [{"text", "answer_start"}]}]}``.

A reader reads a question with a passage as ``[CLS] question [SEP] window [SEP]``, within its block. A passage too
long for one window is read in several that overlap (:func:`windows`: BERT's SQuAD code, ``doc_stride``), each
keeping its tokens' character offsets so a span found in any window maps back to the passage's characters. In
training, a window that holds the whole answer points at its first and last token; the others at [CLS] (position 0).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class Question:
    id: str
    question: str
    answers: list[dict[str, Any]]  # [{"text": str, "answer_start": int}]

    @property
    def texts(self) -> list[str]:
        return [a["text"] for a in self.answers]


@dataclass
class Paragraph:
    title: str
    context: str
    questions: list[Question] = field(default_factory=list)


def paragraphs_from(items: Sequence[dict[str, Any]]) -> list[Paragraph]:
    """Paragraph dicts ``{title, context, qas}`` (storage.squad.load_squad's) as :class:`Paragraph` objects."""
    return [Paragraph(str(p.get("title") or ""), p["context"],
                      [Question(str(q["id"]), q["question"], list(q.get("answers") or [])) for q in p.get("qas") or []])
            for p in items]


def read_split(corpus_dir: Path, split: str) -> list[Paragraph] | None:
    """The split's paragraphs with their questions, or None when the corpus has no such split."""
    import polars as pl

    path = Path(corpus_dir) / f"{split}.parquet"
    if not path.exists():
        return None
    columns = pl.read_parquet_schema(path)
    if "meta" not in columns:
        raise ValueError(f"the corpus's {split} split has no meta column: qa trains on question-answering records "
                         "(corpus.reader.squad)")
    wanted = ["text", "meta"] + (["title"] if "title" in columns else [])
    out = []
    for row in pl.read_parquet(path, columns=wanted).iter_rows(named=True):
        meta = json.loads(row["meta"]) if row["meta"] else {}
        if "qas" not in meta:
            raise ValueError(f"the corpus's {split} split holds records without questions: qa trains on "
                             "question-answering records (corpus.reader.squad)")
        out.extend(paragraphs_from([{"title": row.get("title") or meta.get("title") or "", "context": row["text"],
                                     "qas": meta["qas"]}]))
    return out


@dataclass
class Window:
    """One window of a passage read with a question: ``ids`` and ``segments`` as the model reads them, where the
    passage's tokens begin in ``ids`` (``first``), and each of those tokens' character span in the passage."""

    ids: list[int]
    segments: list[int]
    first: int
    offsets: list[tuple[int, int]]


class Windower:
    """Cuts (question, passage) into windows of at most ``block_size`` tokens with a checkpoint's tokenizer (a
    corpusforge HF-backed tokenizer: its ``hf`` gives each token's character offsets)."""

    def __init__(self, tokenizer: Any, block_size: int, cls_id: int, sep_id: int, max_query_len: int = 64,
                 stride: int = 0):
        if getattr(tokenizer, "hf", None) is None:
            raise ValueError("a reader needs a tokenizer that gives character offsets (WordPiece, BPE: the "
                             "tokenizers library's); this checkpoint's does not")
        self.tok, self.block, self.cls, self.sep = tokenizer, block_size, cls_id, sep_id
        self.max_query_len, self.stride = max_query_len, stride
        self.cut_questions = 0  # questions longer than max_query_len, cut (said by the stage)

    def question(self, text: str) -> list[int]:
        ids = self.tok.hf.encode(text, add_special_tokens=False).ids
        if len(ids) > self.max_query_len:
            self.cut_questions += 1
        return ids[: self.max_query_len]

    def passage(self, text: str) -> tuple[list[int], list[tuple[int, int]]]:
        """The passage's token ids and, for each token, the characters of the whole word it is part of (the
        tokenizer's pre-tokenized words: "1973" and "," apart): a span decoded from a word's middle piece
        ("##ence") reads as the word, as BERT's SQuAD code maps tokens back to whole words, and an answer's first
        and last token in training are its first word's first piece and its last word's last."""
        enc = self.tok.hf.encode(text, add_special_tokens=False)
        offsets = [tuple(o) for o in enc.offsets]
        words = enc.word_ids
        first: dict[int, int] = {}
        last: dict[int, int] = {}
        for i, w in enumerate(words):
            if w is not None:
                first.setdefault(w, offsets[i][0])
                last[w] = offsets[i][1]
        return list(enc.ids), [(first[w], last[w]) if w is not None else o for w, o in zip(words, offsets)]

    def step(self, question: Sequence[int]) -> int:
        """Tokens between the starts of consecutive windows beside this question (stride 0: half a window)."""
        room = self.room(question)
        return min(room, self.stride) if self.stride else max(1, room // 2)

    def room(self, question: Sequence[int]) -> int:
        """Passage tokens per window beside this question: the block less the question and [CLS] [SEP] [SEP]."""
        room = self.block - len(question) - 3
        if room < 1:
            raise ValueError(f"the model's block of {self.block} tokens leaves no room for a passage beside a "
                             f"{len(question)}-token question; lower qa.max_query_len")
        return room

    def windows(self, question: Sequence[int], passage: tuple[list[int], list[tuple[int, int]]]) -> list[Window]:
        """The passage's windows with this question (one when it fits; an empty passage gives one empty window)."""
        ids, offsets = passage
        room = self.room(question)
        out, start = [], 0
        while True:
            piece = ids[start: start + room]
            row = [self.cls, *question, self.sep, *piece, self.sep]
            segments = [0] * (len(question) + 2) + [1] * (len(piece) + 1)
            out.append(Window(row, segments, len(question) + 2, offsets[start: start + len(piece)]))
            if start + room >= len(ids):
                return out
            start += self.step(question)


def token_span(offsets: Sequence[tuple[int, int]], start: int, end: int) -> tuple[int, int] | None:
    """The first and last token (indices into ``offsets``) covering characters [start, end), or None."""
    first = next((i for i, (a, b) in enumerate(offsets) if b > start), None)
    last = next((i for i in range(len(offsets) - 1, -1, -1) if offsets[i][0] < end), None)
    if first is None or last is None or last < first:
        return None
    return first, last


def training_windows(windower: Windower, paragraphs: Sequence[Paragraph]) -> tuple[list[tuple], dict[str, int]]:
    """Every (question, first answer) of ``paragraphs`` as windows with the answer's token positions: (ids,
    segments, start, end), start = end = 0 in a window without the whole answer; and counts (questions, windows,
    windows holding the answer, answers no token covers)."""
    out: list[tuple] = []
    counts = {"questions": 0, "windows": 0, "answer_windows": 0, "untokenized_answers": 0}
    for p in paragraphs:
        passage = windower.passage(p.context)
        for q in p.questions:
            if not q.answers:
                continue
            counts["questions"] += 1
            answer = q.answers[0]
            a = int(answer["answer_start"])
            qids = windower.question(q.question)
            span = token_span(passage[1], a, a + len(answer["text"]))
            if span is None:
                counts["untokenized_answers"] += 1
                continue
            step = windower.step(qids)
            for k, w in enumerate(windower.windows(qids, passage)):
                offset = k * step
                s, e = span[0] - offset, span[1] - offset
                if 0 <= s and e < len(w.offsets):
                    out.append((w.ids, w.segments, w.first + s, w.first + e))
                    counts["answer_windows"] += 1
                else:
                    out.append((w.ids, w.segments, 0, 0))
                counts["windows"] += 1
    return out, counts


def passages_from_file(path: Path) -> list[str]:
    """The passages a question is answered from (``qa ask --corpus``): a SQuAD-format ``.json`` (its paragraphs), a
    ``.jsonl`` (each record's ``context``, else its ``text``), or text (paragraphs separated by a blank line; a file
    without blank lines: one passage per line). A ValueError of one line when it holds none."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"{path}: no such file")
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise ValueError(f"{path}: line {line} is not UTF-8") from None
    if path.suffix == ".json":
        from corpusforge.storage.squad import load_squad

        passages = [p["context"] for p in load_squad(path)]
    elif path.suffix == ".jsonl":
        passages = []
        for n, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}: line {n} is not JSON ({exc.msg})") from None
            value = record.get("context", record.get("text")) if isinstance(record, dict) else None
            if not isinstance(value, str):
                raise ValueError(f"{path}: line {n} has no string field context or text")
            passages.append(value)
    else:
        blocks = [b.strip() for b in text.replace("\r\n", "\n").split("\n\n")]
        blocks = [b for b in blocks if b]
        passages = blocks if len(blocks) > 1 else [line.strip() for line in text.splitlines() if line.strip()]
    passages = [p for p in passages if p.strip()]
    if not passages:
        raise ValueError(f"{path}: holds no passage to answer from")
    return passages


class PassageSearch:
    """Retrieval over documents (paragraphs) or over fixed-size chunks of them with an overlap
    (corpusforge.models.retrieval.chunk_passages: ``chunk_words`` words, ``overlap`` shared with the next; 0: each
    document is one passage). ``retriever(units)`` builds the search over the passage texts (a
    models.retrieval.Retriever: bm25, dense or hybrid). :meth:`search` gives, per question, the documents ranked by
    their best passage (what retrieval top-1/top-5/MRR score against the gold paragraph) and the ``top`` passages to
    read, each with the document it is cut from and where it starts there."""

    def __init__(self, documents: Sequence[str], retriever, chunk_words: int = 0, overlap: int = 0):
        from corpusforge.models.retrieval import chunk_passages

        self.units = chunk_passages(list(documents), chunk_words, overlap)
        if not self.units:
            raise ValueError("no passage to search: the documents hold no word")
        self.retriever = retriever([u[3] for u in self.units])
        self.mode = getattr(self.retriever, "mode", "bm25")
        self.chunked = bool(chunk_words)

    def search(self, questions: Sequence[str], top: int) -> list[dict[str, Any]]:
        """Per question: ``documents`` (every document a passage of which matched, best first: MRR is over the
        whole ranking), ``read`` (the ``top`` passages: (document index, start character there, passage text))
        and their ``scores``."""
        out = []
        for hits in self.retriever.search(list(questions), len(self.units)):
            documents: list[int] = []
            for unit, _ in hits:
                if self.units[unit][0] not in documents:
                    documents.append(self.units[unit][0])
            out.append({"documents": documents,
                        "read": [(self.units[u][0], self.units[u][1], self.units[u][3]) for u, _ in hits[:top]],
                        "scores": [float(s) for _, s in hits[:top]]})
        return out
