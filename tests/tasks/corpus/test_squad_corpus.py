"""SQuAD records in the corpus stage (issue 48, item 1): a SQuAD v1.1 file read with ``reader.squad`` becomes one row
per paragraph whose text is the context exactly as written (edge spaces, CRLF, non-ASCII), with its title and
questions; a paragraph whose answer does not read off its context is quarantined with its reason and question id;
filters and dedup drop whole paragraphs; any cleaning op is refused by the config. Expected numbers are counted from
the paragraphs each test writes."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

from corpusforge.storage.store import ArtifactStore, read_manifest
from corpusforge.tasks.config import ConfigError
from corpusforge.tasks.corpus.config import corpus_config_from_dict
from corpusforge.tasks.corpus.merge import build_corpus, resolve_packs
from corpusforge.tasks.corpus.shard import build_corpus_shard
from corpusforge.tasks.corpus.split import SPLITS
from tests.conftest import write

NO_SPLIT = {"valid": 0, "test": 0}
RAW = {"preset": "raw"}

KEPT_1 = "  The Eiffel Tower was completed in 1889.\r\nIt stands in Paris.  "  # kept as written: spaces, CRLF
KEPT_2 = "Gustave Eiffel’s company built it, “Compagnie des Établissements Eiffel”.\u00a0Done."
BAD = "Warsaw is the capital of Poland."
SHORT = "Tiny text."


def qa(qid: str, question: str, text: str, start: int) -> dict:
    return {"id": qid, "question": question, "answers": [{"text": text, "answer_start": start}]}


SQUAD = {"version": "1.1", "data": [
    {"title": "Eiffel_Tower", "paragraphs": [
        {"context": KEPT_1, "qas": [qa("q1", "When?", "1889", KEPT_1.index("1889")),
                                    qa("q2", "Where?", "Paris", KEPT_1.index("Paris"))]},  # data[0].paragraphs[0]
        {"context": KEPT_2, "qas": [qa("q3", "Who?", "Compagnie des Établissements Eiffel",
                                       KEPT_2.index("Compagnie"))]},  # data[0].paragraphs[1]
    ]},
    {"title": "Warsaw", "paragraphs": [
        {"context": BAD, "qas": [qa("q4", "Capital of?", "Poland", 24)]},  # data[1].paragraphs[0]: answer_offset
        {"context": SHORT, "qas": [qa("q5", "What?", "Tiny", 0)]},  # data[1].paragraphs[1]: too_few_words
        {"context": KEPT_1, "qas": [qa("q6", "When?", "1889", KEPT_1.index("1889"))]},  # [2]: conflicting title
    ]},
    {"title": "Eiffel_Tower", "paragraphs": [
        {"context": KEPT_2, "qas": [qa("q7", "Who?", "Gustave Eiffel", 0)]},  # data[2].paragraphs[0]: exact dup
    ]},
]}


def build(config: dict, store: ArtifactStore):
    cfg = corpus_config_from_dict({"split": NO_SPLIT, **config})
    shards = [build_corpus_shard(pack, cfg, store) for pack in resolve_packs(cfg)]
    return shards, build_corpus(shards, cfg, store)


def kept(corpus) -> pl.DataFrame:
    return pl.concat([pl.read_parquet(Path(corpus.path) / f"{s}.parquet") for s in SPLITS], how="vertical")


def table(corpus, name: str) -> dict[str, tuple[str, str]]:
    rows = pl.read_parquet(Path(corpus.path) / f"{name}.parquet").to_dicts()
    return {r["locator"]: (r["reason"], r["detail"]) for r in rows}


@pytest.fixture(scope="module")
def squad_corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("squad")
    write(root / "d" / "dev.json", json.dumps(SQUAD, ensure_ascii=False, indent=1))
    _, corpus = build({"name": "qa", "sources": [str(root / "d")], "reader": {"squad": True}, "clean": RAW,
                       "filters": {"min_words": 3}}, ArtifactStore(root / "store"))
    return corpus


def test_a_squad_file_becomes_one_row_per_paragraph_with_its_context_title_and_questions(squad_corpus):
    rows = kept(squad_corpus)
    assert rows.columns == ["doc_id", "source", "locator", "split", "text", "title", "n_chars", "n_words",
                            "content_hash", "lang", "meta"]
    assert rows.select("locator", "text", "title").rows() == [
        ("data[0].paragraphs[0]", KEPT_1, "Eiffel_Tower"), ("data[0].paragraphs[1]", KEPT_2, "Eiffel_Tower")]
    for text, meta, paragraph in zip(rows["text"], rows["meta"], SQUAD["data"][0]["paragraphs"]):
        qas = json.loads(meta)["qas"]
        assert qas == paragraph["qas"]
        for q in qas:  # the offsets still read the answers off the stored text
            for a in q["answers"]:
                assert text[a["answer_start"]:a["answer_start"] + len(a["text"])] == a["text"]
    manifest = read_manifest(Path(squad_corpus.path))
    assert manifest["named_fields"] == {"text": ["text"], "labels": ["title"]}


def test_each_paragraph_not_kept_is_counted_with_its_reason(squad_corpus):
    acc = read_manifest(Path(squad_corpus.path))["accounting"]
    assert acc["per_source"]["d/dev.json"] == {
        "records_read": 6, "kept": 2, "quarantined": {"answer_offset": 1}, "filtered": {"too_few_words": 1},
        "deduplicated": {"conflicting_label": 1, "exact": 1}}
    quarantine = table(squad_corpus, "quarantine")
    assert quarantine == {"data[1].paragraphs[0]": (
        "answer_offset", "question q4: answer 0 at 24: the context reads ' Polan' there, the answer is 'Poland'")}
    raw = pl.read_parquet(Path(squad_corpus.path) / "quarantine.parquet")["raw"][0]
    assert json.loads(raw)["qas"][0]["id"] == "q4"  # the paragraph as written, for a look
    dropped = table(squad_corpus, "dropped")
    assert dropped["data[1].paragraphs[1]"][0] == "too_few_words"
    assert dropped["data[1].paragraphs[2]"][0] == "conflicting_label"  # the same context under another title
    assert dropped["data[2].paragraphs[0]"][0] == "exact"


@pytest.mark.parametrize(("clean", "match"), [
    ({}, r"corpus.clean.preset: .*nfc, normalize_whitespace would change it: set corpus.clean.preset: raw"),
    ({"preset": "lm"}, "corpus.clean.preset: a SQuAD corpus"),
    ({"preset": "classic"}, "corpus.clean.preset: a SQuAD corpus"),
    ({"preset": "raw", "ops": ["nfc"]}, r"corpus.clean.ops: .*; nfc would change it"),
    ({"preset": "raw", "normalize_whitespace": True}, "corpus.clean.preset: .*normalize_whitespace would change it"),
])
def test_any_cleaning_of_a_squad_corpus_is_refused(clean, match):
    with pytest.raises(ConfigError, match=match):
        corpus_config_from_dict({"name": "c", "sources": ["dev.json"], "reader": {"squad": True}, "clean": clean})
    corpus_config_from_dict({"name": "c", "sources": ["dev.json"], "reader": {"squad": True}, "clean": RAW})


def test_a_squad_corpus_takes_no_line_aligned_sources_nor_tags():
    with pytest.raises(ConfigError, match="corpus.reader.squad: a SQuAD corpus reads .json files"):
        corpus_config_from_dict({"name": "c", "sources": [{"fields": {"a": "x.txt", "b": "y.txt"}}],
                                 "reader": {"squad": True}, "clean": RAW})
    with pytest.raises(ConfigError, match="leave reader.tags unset"):
        corpus_config_from_dict({"name": "c", "sources": ["dev.json"], "clean": RAW,
                                 "reader": {"squad": True, "tags": {"upos": "upos"}}})
