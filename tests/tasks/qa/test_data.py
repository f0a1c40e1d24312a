"""The qa stage's data (tasks/qa/data.py, build.py): windows of a long passage overlap and cover every token, their
offsets map a span back to whole words of the passage, training windows point at the answer's first and last token
(or at [CLS] when a window lacks it), folds keep an article's paragraphs together, and the passages `qa ask` reads
from a file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from corpusforge.models.tokenization import make_tokenizer
from corpusforge.tasks.qa.build import folds_of, hold_out
from corpusforge.tasks.qa.data import Paragraph, Question, Windower, passages_from_file, token_span, training_windows

TEXT = ("The Black Death was a bubonic plague pandemic occurring in Afro-Eurasia from 1346 to 1353. It is the most "
        "fatal pandemic recorded in human history, causing the deaths of 75 to 200 million people, peaking in "
        "Europe from 1347 to 1351. Bubonic plague is caused by the bacterium Yersinia pestis spread by fleas.")


@pytest.fixture(scope="module")
def tokenizer():
    tok = make_tokenizer("wordpiece", unk_token="[UNK]", normalizers=["nfc", "lowercase"], pre_tokenizer="bert",
                         roles={"cls": "[CLS]", "sep": "[SEP]", "mask": "[MASK]", "pad": "[PAD]"})
    tok.train([TEXT, "When did the plague peak in Europe?", "What causes bubonic plague?"] * 3, vocab_size=120)
    return tok


def windower(tok, block=24, stride=0, max_query_len=8):
    return Windower(tok, block, tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]"), max_query_len, stride)


def test_windows_overlap_and_cover_every_passage_token(tokenizer):
    w = windower(tokenizer, block=24, stride=5)
    question = w.question("When did the plague peak in Europe?")
    ids, offsets = w.passage(TEXT)
    windows = w.windows(question, (ids, offsets))
    room = 24 - len(question) - 3
    assert len(windows) > 3 and all(len(x.ids) <= 24 for x in windows)
    seen = []
    for k, x in enumerate(windows):
        assert x.ids[0] == tokenizer.token_to_id("[CLS]") and x.ids[x.first - 1] == tokenizer.token_to_id("[SEP]")
        assert x.segments == [0] * x.first + [1] * (len(x.ids) - x.first)
        assert x.ids[x.first: x.first + len(x.offsets)] == ids[5 * k: 5 * k + len(x.offsets)]
        assert len(x.offsets) <= room
        seen.extend(range(5 * k, 5 * k + len(x.offsets)))
    assert set(seen) == set(range(len(ids)))  # no token between two windows is skipped
    half = windower(tokenizer, block=24)  # stride 0: half a window's passage tokens
    assert half.step(question) == room // 2


def test_offsets_read_whole_words_as_written(tokenizer):
    w = windower(tokenizer)
    ids, offsets = w.passage(TEXT)
    pieces = tokenizer.hf.encode(TEXT, add_special_tokens=False).tokens
    split = [i for i, p in enumerate(pieces) if p.startswith("##")]
    assert split, "the test needs a word cut into sub-words"
    i = split[0]
    a, b = offsets[i]
    assert TEXT[a:b] == TEXT[a:b].strip() and " " not in TEXT[a:b]  # the whole word, not "##..."
    assert offsets[i] == offsets[i - 1]  # every piece of a word maps to the word
    assert TEXT[slice(*offsets[0])] == "The"  # the text as written (the tokenizer lowercases)


def test_training_windows_point_at_the_answer_or_at_cls(tokenizer):
    w = windower(tokenizer, block=24, stride=5)
    start = TEXT.index("1347 to 1351")
    p = Paragraph("Black_Death", TEXT, [Question("q1", "When did the plague peak in Europe?",
                                                 [{"text": "1347 to 1351", "answer_start": start}])])
    windows, counts = training_windows(w, [p])
    assert counts["questions"] == 1 and counts["windows"] == len(windows) > 1
    holding = [x for x in windows if x[2] != 0]
    assert counts["answer_windows"] == len(holding) >= 1
    passage = w.passage(TEXT)
    for ids, segments, s, e in holding:
        # the window's tokens at s..e are the answer's tokens in the passage
        k = next(k for k, x in enumerate(w.windows(w.question(p.questions[0].question), passage)) if x.ids == ids)
        x = w.windows(w.question(p.questions[0].question), passage)[k]
        assert TEXT[x.offsets[s - x.first][0]: x.offsets[e - x.first][1]] == "1347 to 1351"
    assert all(x[2] == x[3] == 0 for x in windows if x not in holding)
    assert token_span([(0, 3), (4, 9)], 20, 25) is None


def _paragraph(title, n=1):
    return Paragraph(title, f"text of {title}", [Question(f"{title}-{i}", "q?", [{"text": "text", "answer_start": 0}])
                                                 for i in range(n)])


def test_folds_keep_articles_together_and_hold_out_a_tenth():
    paragraphs = [_paragraph(t) for t in "abcdefghijkl" for _ in range(2)]
    folds = folds_of(paragraphs, 5)
    assert sorted(i for f in folds for i in f) == list(range(len(paragraphs)))
    for f in folds:
        titles = {paragraphs[i].title for i in f}
        assert all(p.title not in titles for j, p in enumerate(paragraphs) if j not in f)
    train, valid = hold_out(paragraphs)
    assert {p.title for p in valid} == {"a", "k"} and not {p.title for p in train} & {"a", "k"}
    with pytest.raises(ValueError, match="5 folds over articles, but the train split has 3"):
        folds_of([_paragraph(t) for t in "abc"], 5)


def test_passages_from_a_file(tmp_path: Path):
    text = tmp_path / "p.txt"
    text.write_text("First passage,\nstill first.\n\nSecond passage.\n", encoding="utf-8")
    assert passages_from_file(text) == ["First passage,\nstill first.", "Second passage."]
    lines = tmp_path / "lines.txt"
    lines.write_text("one\ntwo\n\n", encoding="utf-8")
    assert passages_from_file(lines) == ["one", "two"]
    records = tmp_path / "p.jsonl"
    records.write_text(json.dumps({"context": "a"}) + "\n" + json.dumps({"text": "b"}) + "\n", encoding="utf-8")
    assert passages_from_file(records) == ["a", "b"]
    squad = tmp_path / "s.json"
    squad.write_text(json.dumps({"data": [{"title": "t", "paragraphs": [
        {"context": "Paris is in France.", "qas": [{"id": "1", "question": "Where is Paris?",
                                                    "answers": [{"text": "France", "answer_start": 12}]}]}]}]}))
    assert passages_from_file(squad) == ["Paris is in France."]
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n", encoding="utf-8")
    with pytest.raises(ValueError, match="holds no passage"):
        passages_from_file(empty)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"title": 1}\n', encoding="utf-8")
    with pytest.raises(ValueError, match="line 1 has no string field context or text"):
        passages_from_file(bad)


def test_passage_search_ranks_documents_by_their_best_chunk():
    from corpusforge.models.retrieval import Retriever
    from corpusforge.tasks.qa.data import PassageSearch

    docs = ["alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu",
            "the plague reached europe in 1347 and peaked there in 1351",
            "oil prices rose in 1973 when the embargo began"]
    whole = PassageSearch(docs, lambda units: Retriever(units, mode="bm25"))
    (found,) = whole.search(["when did the plague peak in europe"], top=2)
    assert found["documents"][0] == 1 and found["read"][0] == (1, 0, docs[1])
    chunked = PassageSearch(docs, lambda units: Retriever(units, mode="bm25"), chunk_words=4, overlap=1)
    (found,) = chunked.search(["when did the plague peak in europe", ], top=3)
    assert found["documents"][0] == 1 and len(set(found["documents"])) == len(found["documents"])
    for doc, start, text in found["read"]:
        assert docs[doc][start:start + len(text)] == text and len(text.split()) <= 4
    with pytest.raises(ValueError, match="overlap"):
        PassageSearch(docs, lambda units: Retriever(units), chunk_words=3, overlap=3)
