"""Question-answering records in SQuAD v1.1 form (issue 48, item 1): ``{"data": [{"title": ..., "paragraphs":
[{"context": ..., "qas": [{"id": ..., "question": ..., "answers": [{"text": ..., "answer_start": ...}]}]}]}]}``, the
format of SQuAD, XQuAD and most extractive QA sets.

One record per paragraph (:func:`read_squad`): its text is the paragraph's ``context`` exactly as written (an answer
is a character offset into it, so not a character may move), its ``title`` field the article's title, and its
``meta`` ``{"qas": [{"id", "question", "answers": [{"text", "answer_start"}]}]}`` (SQuAD's keys only; other keys of
a question are left out). The locator is the paragraph's place in the file, ``data[3].paragraphs[2]`` (0-based).

A paragraph is quarantined whole, never dropped silently nor cut down to its good questions, when:
``answer_offset`` (an answer_start that is not an integer, a span outside the context, or a context that does not
read the answer's text there: ``context[start:start + len(text)] != text``), ``malformed_qa`` (a paragraph, question
or answer without SQuAD's keys and types; a question without answers, as SQuAD 2.0's unanswerable ones; an empty
answer; a question id that an earlier question of the file has), ``control_character`` (a C0/C1 control character
in the context: the corpus stage removes those from every text, which would move the offsets after it) and
``too_large`` (a context over the reader's max_document_bytes). The detail names the question id and the offset.
A file that is not SQuAD-shaped (not an object with a ``data`` list of articles that each have a ``paragraphs``
list) is a :class:`SquadError` (one line, naming what is missing), raised before any record; a file that is not
JSON is one ``invalid_json`` record, one that is not UTF-8 one ``invalid_utf8``.

A SQuAD file is one JSON document, parsed whole: its size is bounded by :data:`MAX_FILE_BYTES` (SQuAD v1.1's train
file is 30 MB), a larger file being one ``too_large`` record. The corpus stage reads it from the stream it hashes
(``corpus.reader.squad``, corpusforge.storage.readers). :func:`load_squad` reads a file for a command that must
refuse a bad one before it runs: the first problem of any kind is a SquadError.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, BinaryIO

from corpusforge.storage.records import RAW_CAP, RawRecord

MAX_FILE_BYTES = 256 << 20
# what the corpus stage strips from every text before cleaning (tasks/corpus/shard.py): none may be in a context
CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")


class SquadError(ValueError):
    """A SQuAD file that cannot be read as one (one line: the file, where and what to change)."""


def _short(text: str, n: int = 40) -> str:
    return repr(text if len(text) <= n else text[:n] + "...")


def _problem(context: str, qas: Any, seen: Mapping[str, str] | None = None) -> tuple[str, str] | None:
    """(reason, detail) of the first problem of a paragraph's questions, or None. ``seen``: question ids met earlier
    in the file -> where."""
    if not isinstance(qas, list):
        return "malformed_qa", f'"qas" is {type(qas).__name__}, not a list of questions'
    ids: dict[str, int] = {}
    for k, qa in enumerate(qas):
        if not isinstance(qa, dict):
            return "malformed_qa", f"qas[{k}] is {type(qa).__name__}, not a question object"
        qid = qa.get("id")
        if not isinstance(qid, str) or not qid:
            return "malformed_qa", f'qas[{k}] has no "id" string'
        if qid in ids or (seen is not None and qid in seen):
            where = f"qas[{ids[qid]}] of this paragraph" if qid in ids else seen[qid]  # type: ignore[index]
            return "malformed_qa", f"question {qid}: {where} has a question with this id too (ids must be unique)"
        ids[qid] = k
        if not isinstance(qa.get("question"), str) or not qa["question"].strip():
            return "malformed_qa", f'question {qid}: no "question" text'
        answers = qa.get("answers")
        if not isinstance(answers, list) or not answers:
            what = "an empty answers list" if isinstance(answers, list) else 'no "answers" list'
            return "malformed_qa", f"question {qid}: {what} (SQuAD v1.1 questions have one or more answers)"
        for n, answer in enumerate(answers):
            if not isinstance(answer, dict) or not isinstance(answer.get("text"), str):
                return "malformed_qa", f'question {qid}: answer {n} has no "text" string'
            text, start = answer["text"], answer.get("answer_start")
            if not text:
                return "malformed_qa", f"question {qid}: answer {n} is empty"
            if isinstance(start, bool) or not isinstance(start, int):
                return "answer_offset", f"question {qid}: answer {n}: answer_start {start!r} is not an integer"
            end = start + len(text)
            if start < 0 or end > len(context):
                return "answer_offset", (f"question {qid}: answer {n} at [{start}, {end}) lies outside the context "
                                         f"({len(context)} characters)")
            if context[start:end] != text:
                return "answer_offset", (f"question {qid}: answer {n} at {start}: the context reads "
                                         f"{_short(context[start:end])} there, the answer is {_short(text)}")
    return None


def check_answers(context: str, qas: Any) -> str | None:
    """The first problem of a paragraph's questions (``qas``, SQuAD's list) against its ``context``, as one line
    naming the question id (and the offset, for an answer that does not match), or None when every answer is the
    context's text at its answer_start."""
    found = _problem(context, qas)
    return None if found is None else found[1]


def _clean_qas(qas: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """A paragraph's checked questions with SQuAD v1.1's keys only."""
    return [{"id": qa["id"], "question": qa["question"],
             "answers": [{"text": a["text"], "answer_start": a["answer_start"]} for a in qa["answers"]]}
            for qa in qas]


def _articles(doc: Any, name: str) -> list[tuple[int, str, list]]:
    """(index, title, paragraphs) of each article, or SquadError naming what makes ``doc`` no SQuAD file."""
    want = 'a SQuAD file is {"data": [{"title": ..., "paragraphs": [...]}, ...], "version": ...}'
    if not isinstance(doc, dict):
        raise SquadError(f"{name}: not a SQuAD file: the top level is a {type(doc).__name__}; {want}")
    if not isinstance(doc.get("data"), list):
        raise SquadError(f'{name}: not a SQuAD file: no top-level "data" list of articles; {want}')
    out = []
    for i, article in enumerate(doc["data"]):
        if not isinstance(article, dict) or not isinstance(article.get("paragraphs"), list):
            raise SquadError(f'{name}: not a SQuAD file: data[{i}] has no "paragraphs" list; {want}')
        title = article.get("title", "")
        if not isinstance(title, str):
            raise SquadError(f"{name}: data[{i}].title is {type(title).__name__}; a title is a string")
        out.append((i, title, article["paragraphs"]))
    return out


def _paragraph_problem(paragraph: Any) -> tuple[str, str] | None:
    if not isinstance(paragraph, dict):
        return "malformed_qa", f"a {type(paragraph).__name__}, not a paragraph object with context and qas"
    if not isinstance(paragraph.get("context"), str):
        return "malformed_qa", 'no "context" string'
    return None


def _read_all(data: bytes | str | BinaryIO) -> bytes | str | None:
    """The whole file, or None when it is larger than MAX_FILE_BYTES."""
    if hasattr(data, "read"):
        data = data.read(MAX_FILE_BYTES + 1)  # type: ignore[union-attr]
    return None if len(data) > MAX_FILE_BYTES else data  # type: ignore[arg-type]


def _raw(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False).encode("utf-8", "surrogatepass")[:RAW_CAP]


def read_squad(name: str, data: bytes | str | BinaryIO, *, limit: int | None = None) -> Iterator[RawRecord]:
    """The paragraphs of a SQuAD v1.1 file as records, good or quarantined (the module docstring). ``name`` names
    the file in errors; ``data``: its text, bytes (UTF-8) or a binary stream of them (the corpus reader's, BOM
    removed); ``limit``: the largest context in UTF-8 bytes (reader.max_document_bytes). Raises SquadError for a
    file that is not SQuAD-shaped, before yielding anything."""
    whole = _read_all(data)
    if whole is None:
        yield RawRecord("file", reason="too_large", detail=f"a SQuAD file over {MAX_FILE_BYTES >> 20} MiB (it is "
                        "parsed whole): split its articles into several files")
        return
    if isinstance(whole, bytes):
        try:
            whole = whole.decode("utf-8")
        except UnicodeDecodeError as exc:
            yield RawRecord("file", reason="invalid_utf8", detail=f"invalid UTF-8 at byte {exc.start}",
                            raw=whole[max(0, exc.start - 64):exc.start + 64])
            return
    try:
        doc = json.loads(whole.removeprefix("\ufeff"))
    except json.JSONDecodeError as exc:
        yield RawRecord("file", reason="invalid_json", detail=f"line {exc.lineno} column {exc.colno}: {exc.msg}",
                        raw=whole[max(0, exc.pos - 64):exc.pos + 64].encode("utf-8", "surrogatepass"))
        return
    seen: dict[str, str] = {}
    for i, title, paragraphs in _articles(doc, name):
        for j, paragraph in enumerate(paragraphs):
            locator = f"data[{i}].paragraphs[{j}]"
            found = _paragraph_problem(paragraph)
            if found is None:
                context = paragraph["context"]
                found = _problem(context, paragraph.get("qas"), seen)
                size = len(context.encode("utf-8", "surrogatepass")) if limit is not None else 0
                if found is None and limit is not None and size > limit:
                    found = "too_large", f"a context of {size} bytes > max_document_bytes {limit}"
                if found is None and (m := CONTROL.search(context)):
                    found = "control_character", (f"context character {m.start()} is U+{ord(m.group()):04X}, a control "
                                                  "character the corpus stage removes, which would move the answer "
                                                  "offsets after it (remove it from the file, mending the offsets)")
            if found is not None:
                yield RawRecord(locator, reason=found[0], detail=found[1], raw=_raw(paragraph))
                continue
            for qa in paragraph["qas"]:
                seen[qa["id"]] = locator
            yield RawRecord(locator, text=context, meta={"qas": _clean_qas(paragraph["qas"])},
                            fields={"text": context, "title": title})


def _open_text(path: Path) -> str:
    name = path.name.lower()
    if name.endswith(".gz"):
        import gzip

        raw = gzip.open(path).read(MAX_FILE_BYTES + 1)
    elif name.endswith(".bz2"):
        import bz2

        raw = bz2.open(path).read(MAX_FILE_BYTES + 1)
    elif name.endswith(".xz"):
        import lzma

        raw = lzma.open(path).read(MAX_FILE_BYTES + 1)
    elif name.endswith(".zst"):
        import zstandard

        with open(path, "rb") as fh:
            raw = zstandard.ZstdDecompressor().stream_reader(fh).read(MAX_FILE_BYTES + 1)
    else:
        with open(path, "rb") as fh:
            raw = fh.read(MAX_FILE_BYTES + 1)
    if len(raw) > MAX_FILE_BYTES:
        raise SquadError(f"{path}: over {MAX_FILE_BYTES >> 20} MiB; a SQuAD file is parsed whole: split its articles "
                         "into several files")
    try:
        return raw.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as exc:
        raise SquadError(f"{path}: invalid UTF-8 at byte {exc.start}; SQuAD files are UTF-8 JSON") from None


def load_squad(path: str | Path) -> list[dict[str, Any]]:
    """The paragraphs of a SQuAD v1.1 file (optionally .gz/.bz2/.xz/.zst) as ``{"title", "context", "qas"}`` dicts in
    file order (``qas`` with SQuAD's keys only), for a command that must refuse a bad file before running: its first
    problem (not JSON, not SQuAD-shaped, an answer that is not the context's text at its offset, a question without
    answers, a repeated question id, ...) is a one-line SquadError naming the paragraph and question id."""
    path = Path(path)
    try:
        text = _open_text(path)
    except OSError as exc:
        raise SquadError(f"{path}: cannot read it: {exc.strerror or exc}") from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SquadError(f"{path}: not JSON: line {exc.lineno} column {exc.colno}: {exc.msg}") from None
    out: list[dict[str, Any]] = []
    seen: dict[str, str] = {}
    for i, title, paragraphs in _articles(doc, str(path)):
        for j, paragraph in enumerate(paragraphs):
            locator = f"data[{i}].paragraphs[{j}]"
            found = _paragraph_problem(paragraph) or _problem(paragraph["context"], paragraph.get("qas"), seen)
            if found is not None:
                raise SquadError(f"{path}: {locator}: {found[1]} ({found[0]})")
            for qa in paragraph["qas"]:
                seen[qa["id"]] = locator
            out.append({"title": title, "context": paragraph["context"], "qas": _clean_qas(paragraph["qas"])})
    return out
