"""Question-answering records in SQuAD v1.1 form (issue 48, item 1): one record per paragraph whose text is the
context exactly as written, with the title and every question's answers and offsets; a paragraph whose answer is not
the context's text at its offset quarantined whole with the question id, never dropped; a file that is not SQuAD
one line. Through the corpus reader (reader.squad) from the hashed, decompressed stream, as every format."""

from __future__ import annotations

import copy
import gzip
import json

import pytest

from corpusforge.storage.readers import ReaderConfig, discover_sources, read_batches, read_records
from corpusforge.storage.squad import SquadError, check_answers, load_squad, read_squad
from tests.conftest import SHARED, write

CONTEXT_1 = "  The Eiffel Tower was completed in 1889.\nIt stands in Paris.  "  # edge spaces and a line break kept
CONTEXT_2 = "Gustave Eiffel’s company — “Compagnie des Établissements Eiffel” — built it. 😀 Then it rained."
CONTEXT_3 = "Warsaw is the capital of Poland."


def qa(qid: str, question: str, *answers: tuple[str, int]) -> dict:
    return {"id": qid, "question": question, "answers": [{"text": t, "answer_start": s} for t, s in answers]}


SQUAD = {"version": "1.1", "data": [
    {"title": "Eiffel_Tower", "paragraphs": [
        {"context": CONTEXT_1, "qas": [qa("q1", "When was it completed?", ("1889", 36), ("in 1889", 33)),
                                       qa("q2", "Where is it?", ("Paris", 55))]},
        {"context": CONTEXT_2, "qas": [qa("q3", "Who built it?", ("Compagnie des Établissements Eiffel", 28))]},
    ]},
    {"title": "Warsaw", "paragraphs": [
        {"context": CONTEXT_3, "qas": [qa("q4", "Capital of what?", ("Poland", 25))]},
    ]},
]}


def squad_with(**changes) -> dict:
    """SQUAD with data[i].paragraphs[j] replaced: changes {"i_j": paragraph}."""
    doc = copy.deepcopy(SQUAD)
    for where, paragraph in changes.items():
        i, j = map(int, where.split("_"))
        doc["data"][i]["paragraphs"][j] = paragraph
    return doc


def test_offsets_of_the_fixture_are_right():
    for article in SQUAD["data"]:
        for p in article["paragraphs"]:
            assert check_answers(p["context"], p["qas"]) is None


def test_a_two_article_file_round_trips_into_one_record_per_paragraph():
    records = list(read_squad("a.json", json.dumps(SQUAD, ensure_ascii=False)))
    assert [r.locator for r in records] == ["data[0].paragraphs[0]", "data[0].paragraphs[1]", "data[1].paragraphs[0]"]
    assert all(r.ok for r in records)
    assert [r.text for r in records] == [CONTEXT_1, CONTEXT_2, CONTEXT_3]
    assert [r.fields for r in records] == [{"text": CONTEXT_1, "title": "Eiffel_Tower"},
                                           {"text": CONTEXT_2, "title": "Eiffel_Tower"},
                                           {"text": CONTEXT_3, "title": "Warsaw"}]
    assert records[0].meta == {"qas": SQUAD["data"][0]["paragraphs"][0]["qas"]}
    for r in records:  # every answer reads off the record's text at its offset
        for q in r.meta["qas"]:
            for a in q["answers"]:
                assert r.text[a["answer_start"]:a["answer_start"] + len(a["text"])] == a["text"]


def test_other_keys_of_a_question_are_left_out_of_meta():
    extra = copy.deepcopy(SQUAD["data"][1]["paragraphs"][0])
    extra["qas"][0]["is_impossible"] = False
    extra["qas"][0]["answers"][0]["answer_end"] = 31
    (rec,) = [r for r in read_squad("a.json", json.dumps(squad_with(**{"1_0": extra}))) if r.locator.startswith("data[1]")]
    assert rec.meta == {"qas": [qa("q4", "Capital of what?", ("Poland", 25))]}


@pytest.mark.parametrize(("paragraph", "reason", "detail"), [
    ({"context": CONTEXT_3, "qas": [qa("q4", "Capital?", ("Poland", 24))]}, "answer_offset",
     "question q4: answer 0 at 24: the context reads ' Polan' there, the answer is 'Poland'"),
    ({"context": CONTEXT_3, "qas": [qa("q4", "Capital?", ("Poland.", 26))]}, "answer_offset",
     "question q4: answer 0 at [26, 33) lies outside the context (32 characters)"),
    ({"context": CONTEXT_3, "qas": [qa("q4", "Capital?", ("Poland", -1))]}, "answer_offset",
     "question q4: answer 0 at [-1, 5) lies outside the context (32 characters)"),
    ({"context": CONTEXT_3, "qas": [qa("q4", "Capital?", ("Poland", "25"))]}, "answer_offset",
     "question q4: answer 0: answer_start '25' is not an integer"),
    ({"context": CONTEXT_3, "qas": [qa("q4", "Capital?", ("Poland", 25.0))]}, "answer_offset",
     "question q4: answer 0: answer_start 25.0 is not an integer"),
    ({"context": CONTEXT_3, "qas": [qa("q4", "Capital?", ("", 3))]}, "malformed_qa", "question q4: answer 0 is empty"),
    ({"context": CONTEXT_3, "qas": [qa("q4", "Capital?")]}, "malformed_qa",
     "question q4: an empty answers list (SQuAD v1.1 questions have one or more answers)"),
    ({"context": CONTEXT_3, "qas": [{"id": "q4", "question": "Capital?"}]}, "malformed_qa",
     'question q4: no "answers" list (SQuAD v1.1 questions have one or more answers)'),
    ({"context": CONTEXT_3, "qas": [qa("q4", "Capital?", ("Poland", 25)), qa("q4", "Again?", ("Warsaw", 0))]},
     "malformed_qa", "question q4: qas[0] of this paragraph has a question with this id too (ids must be unique)"),
    ({"context": CONTEXT_3, "qas": [qa("q1", "Capital?", ("Poland", 25))]}, "malformed_qa",
     "question q1: data[0].paragraphs[0] has a question with this id too (ids must be unique)"),
    ({"context": CONTEXT_3, "qas": [{"question": "Capital?", "answers": []}]}, "malformed_qa",
     'qas[0] has no "id" string'),
    ({"qas": []}, "malformed_qa", 'no "context" string'),
    ({"context": "Warsaw\x07 is the capital of Poland.", "qas": [qa("q4", "Capital?", ("Poland", 26))]},
     "control_character", "context character 6 is U+0007"),
])
def test_a_bad_paragraph_is_quarantined_whole_with_the_question_id(paragraph, reason, detail):
    records = list(read_squad("a.json", json.dumps(squad_with(**{"1_0": paragraph}))))
    assert [r.ok for r in records] == [True, True, False]  # the other paragraphs are kept
    bad = records[2]
    assert (bad.locator, bad.reason) == ("data[1].paragraphs[0]", reason)
    assert bad.detail.startswith(detail)
    assert json.loads(bad.raw) == paragraph  # the paragraph as it was, for the quarantine table


def test_check_answers_names_the_first_problem_in_one_line():
    assert check_answers(CONTEXT_3, [qa("a", "?", ("Warsaw", 0)), qa("b", "?", ("capital", 13))]) == (
        "question b: answer 0 at 13: the context reads ' capita' there, the answer is 'capital'")
    assert check_answers(CONTEXT_3, [qa("a", "?", ("Warsaw", 0))]) is None
    assert check_answers(CONTEXT_3, []) is None  # a paragraph without questions is fine
    assert "\n" not in check_answers(CONTEXT_3, [qa("a", "?", ("x\ny", 0))])


def test_a_context_over_the_limit_is_too_large():
    records = list(read_squad("a.json", json.dumps(SQUAD), limit=40))
    assert [r.reason for r in records] == ["too_large", "too_large", None]
    assert records[0].detail == "a context of 63 bytes > max_document_bytes 40"


@pytest.mark.parametrize(("doc", "match"), [
    ([{"title": "x", "paragraphs": []}], "the top level is a list"),
    ({"version": "1.1"}, 'no top-level "data" list of articles'),
    ({"data": {"title": "x"}}, 'no top-level "data" list of articles'),
    ({"data": [{"title": "x", "paragraphs": []}, {"title": "y"}]}, 'data\\[1\\] has no "paragraphs" list'),
    ({"data": [{"title": 7, "paragraphs": []}]}, "data\\[0\\].title is int"),
])
def test_a_file_that_is_not_squad_is_one_line_before_any_record(doc, match):
    with pytest.raises(SquadError, match=f"^b.json: .*{match}") as info:
        next(read_squad("b.json", json.dumps(doc)))
    assert "\n" not in str(info.value)


def test_a_file_that_is_not_json_or_not_utf8_is_one_record():
    (rec,) = read_squad("c.json", b'{"data": [')
    assert (rec.locator, rec.reason) == ("file", "invalid_json") and rec.detail.startswith("line 1 column 11")
    (rec,) = read_squad("c.json", b'{"data": ["\xff"]}')
    assert (rec.reason, rec.detail) == ("invalid_utf8", "invalid UTF-8 at byte 11")


def test_load_squad_returns_paragraphs_and_refuses_a_bad_file_naming_the_question(tmp_path):
    good = write(tmp_path / "good.json.gz", gzip.compress(json.dumps(SQUAD).encode()))
    paragraphs = load_squad(good)
    assert [(p["title"], p["context"]) for p in paragraphs] == [
        ("Eiffel_Tower", CONTEXT_1), ("Eiffel_Tower", CONTEXT_2), ("Warsaw", CONTEXT_3)]
    assert paragraphs[2]["qas"] == SQUAD["data"][1]["paragraphs"][0]["qas"]
    bad = squad_with(**{"0_1": {"context": CONTEXT_2, "qas": [qa("q3", "Who?", ("Compagnie", 27))]}})
    path = write(tmp_path / "bad.json", json.dumps(bad))
    with pytest.raises(SquadError, match=r"bad.json: data\[0\].paragraphs\[1\]: question q3: answer 0 at 27: .* "
                                         r"\(answer_offset\)$"):
        load_squad(path)
    with pytest.raises(SquadError, match=r"question q4: an empty answers list"):
        load_squad(write(tmp_path / "none.json", json.dumps(squad_with(**{"1_0": {"context": CONTEXT_3,
                                                                                  "qas": [qa("q4", "?")]}}))))
    with pytest.raises(SquadError, match=r"not JSON: line 1"):
        load_squad(write(tmp_path / "broken.json", "{"))
    with pytest.raises(SquadError, match=r'no top-level "data" list'):
        load_squad(write(tmp_path / "other.json", '{"rows": []}'))
    with pytest.raises(SquadError, match="cannot read it"):
        load_squad(tmp_path / "missing.json")


# ----------------------------------------------------------------------------- through the corpus reader

def _read(path, cfg, batches=False):
    (source,) = discover_sources([path]).files
    if batches:
        return list(read_batches(source, cfg, spec=cfg.field_spec()))
    return list(read_records(source, cfg, spec=cfg.field_spec()))


def test_the_corpus_reader_reads_squad_json_compressed_too(tmp_path):
    cfg = ReaderConfig(squad=True)
    for name, data in (("a.json", json.dumps(SQUAD, ensure_ascii=False).encode()),
                       ("b.json.gz", gzip.compress(b"\xef\xbb\xbf" + json.dumps(SQUAD, indent=2).encode()))):
        records = _read(write(tmp_path / name, data), cfg)
        assert [r.fields for r in records] == [{"text": c, "title": t} for c, t in (
            (CONTEXT_1, "Eiffel_Tower"), (CONTEXT_2, "Eiffel_Tower"), (CONTEXT_3, "Warsaw"))]
    (batch,) = _read(tmp_path / "a.json", cfg, batches=True)
    frame = batch.frame()
    assert frame.columns == ["locator", "text", "title", "meta"]
    assert frame["text"].to_list() == [CONTEXT_1, CONTEXT_2, CONTEXT_3]
    assert json.loads(frame["meta"][1]) == {"qas": SQUAD["data"][0]["paragraphs"][1]["qas"]}


def test_a_squad_corpus_reads_only_json_and_a_plain_corpus_reads_json_as_before(tmp_path):
    txt = write(tmp_path / "a.txt", "hello\n")
    (rec,) = _read(txt, ReaderConfig(squad=True))
    assert rec.reason == "unsupported_format" and "reader.squad" in rec.detail
    plain = write(tmp_path / "rows.json", json.dumps([{"text": "one"}, {"text": "two"}]))
    assert [r.text for r in _read(plain, ReaderConfig())] == ["one", "two"]
    with pytest.raises(SquadError, match='rows.json: not a SQuAD file: the top level is a list'):
        _read(plain, ReaderConfig(squad=True))


@pytest.mark.parametrize(("reader", "match"), [
    ({"squad": True, "tags": {"upos": "upos"}}, "leave reader.tags unset"),
    ({"squad": True, "fields": {"q": "question"}}, "leave reader.fields unset"),
    ({"squad": True, "labels": {"y": "y"}}, "leave reader.labels unset"),
    ({"squad": "yes"}, "squad: true or false"),
])
def test_reader_squad_config_errors(reader, match):
    with pytest.raises(ValueError, match=match):
        ReaderConfig(**reader)


def test_squad_enters_the_config_identity_only_when_set():
    from corpusforge.tasks.config import identity

    assert "squad" not in identity(ReaderConfig())
    assert identity(ReaderConfig(squad=True))["squad"] is True


XQUAD = SHARED / "corpora" / "xquad-en" / "dev.json"


@pytest.mark.skipif(not XQUAD.exists(), reason="needs ../shared/corpora/xquad-en")
def test_xquad_en_reads_whole():
    records = list(read_squad("dev.json", XQUAD.read_bytes()))
    assert len(records) == 120 and all(r.ok for r in records)  # the README's counts
    assert sum(len(r.meta["qas"]) for r in records) == 623
    assert len(load_squad(XQUAD)) == 120
