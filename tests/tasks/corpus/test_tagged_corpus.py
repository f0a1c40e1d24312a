"""Tagged records in the corpus stage (issue 46, item 1): CoNLL-U and CoNLL column files read into sentences whose
``tokens`` and tag fields line up word for word, every sentence that cannot be aligned quarantined or dropped with
its reason and line, never silently; cleaning goes word by word; what would break the alignment is refused by the
config; a whole file that cannot be read (a missing tag column) stops the build. Expected numbers are counted from
the lines each test writes."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import polars as pl
import pytest

from corpusforge.storage.store import ArtifactStore, read_manifest
from corpusforge.storage.tagged import TaggedError
from corpusforge.tasks.config import ConfigError
from corpusforge.tasks.corpus.config import corpus_config_from_dict
from corpusforge.tasks.corpus.merge import build_corpus, resolve_packs
from corpusforge.tasks.corpus.shard import build_corpus_shard
from corpusforge.tasks.corpus.split import SPLITS
from tests.conftest import write

NO_SPLIT = {"valid": 0, "test": 0}


def row(i: int, form: str, upos: str, misc: str = "_") -> str:
    return f"{i}\t{form}\t{form.lower()}\t{upos}\t_\t_\t0\tdep\t_\t{misc}"


def sentence(*rows: str, sid: str = "") -> str:
    return (f"# sent_id = {sid}\n" if sid else "") + "\n".join(rows) + "\n\n"


# Line numbers in the comments: where each sentence starts.
CONLLU = "".join([
    # line 1: kept; a multiword token (its words share its span) and SpaceAfter=No
    sentence(row(1, "They", "PRON"), "2-3\tdidn't\t_\t_\t_\t_\t_\t_\t_\t_", row(2, "did", "AUX"),
             row(3, "n't", "PART"), row(4, "go", "VERB", "SpaceAfter=No"), row(5, ".", "PUNCT"), sid="1"),
    sentence(row(1, "Hello", "INTJ"), row(2, "there", "ADVV"), sid="2"),  # line 9: unknown_tag
    sentence("1\tbroken\tbroken\tADJ", row(2, "line", "NOUN"), sid="3"),  # line 13: malformed_line on line 14
    sentence(row(1, "New York", "PROPN"), row(2, "rocks", "VERB"), sid="4"),  # line 17: token_whitespace, line 18
    sentence(row(1, "CAFE\u0301", "NOUN"), row(2, "Good", "ADJ"), sid="5"),  # line 21: kept (decomposed É)
    # line 25: the words of sentence 1, the same tags: an exact duplicate
    sentence(row(1, "They", "PRON"), row(2, "did", "AUX"), row(3, "n't", "PART"), row(4, "go", "VERB"),
             row(5, ".", "PUNCT"), sid="6"),
    sentence(row(1, "CAFE\u0301", "PROPN"), row(2, "Good", "ADJ"), sid="7"),  # line 32: other tags: conflicting_label
    sentence(row(1, "Ring", "NOUN"), row(2, "\x07", "SYM"), sid="8"),  # line 36: a word of one control character
])
CONLL = ("-DOCSTART-\tO\n\n"
         "EU\tB-ORG\nrejects\tO\nGerman\tB-MISC\ncall\tO\n"  # line 3: kept
         "\t\n"  # a line holding only a tab ends a sentence (WNUT-17)
         "Peter\tB-PER\nBlackburn\tI-PER\n\n"  # line 8: kept
         "short\n\n"  # line 11: malformed_line
         "bad\tB_PER\n\n"  # line 13: unknown_tag
         "Paris\tB-LOC\n")  # line 15: kept, no blank line at the end


def build(config: dict, store: ArtifactStore):
    cfg = corpus_config_from_dict({"split": NO_SPLIT, **config})
    shards = [build_corpus_shard(pack, cfg, store) for pack in resolve_packs(cfg)]
    return shards, build_corpus(shards, cfg, store)


def kept(corpus) -> pl.DataFrame:
    return pl.concat([pl.read_parquet(Path(corpus.path) / f"{s}.parquet") for s in SPLITS], how="vertical")


def table(corpus, name: str) -> dict[str, tuple[str, str]]:
    rows = pl.read_parquet(Path(corpus.path) / f"{name}.parquet").to_dicts()
    return {r["locator"]: (r["reason"], r["detail"]) for r in rows}


def aligned(rows: pl.DataFrame, tag: str) -> bool:
    return all(len(t.split(" ")) == len(g.split(" ")) for t, g in zip(rows["tokens"], rows[tag]))


@pytest.fixture(scope="module")
def ewt_like(tmp_path_factory):
    root = tmp_path_factory.mktemp("tagged")
    write(root / "d" / "a.conllu", CONLLU)
    shards, corpus = build({"name": "pos", "sources": [str(root / "d")], "reader": {"tags": {"upos": "upos"}}},
                           ArtifactStore(root / "store"))
    return root, shards, corpus


def test_a_conllu_file_becomes_rows_of_aligned_tokens_and_tags(ewt_like):
    _, shards, corpus = ewt_like
    rows = kept(corpus)
    assert rows.columns == ["doc_id", "source", "locator", "split", "tokens", "upos", "n_chars", "n_words",
                            "content_hash", "lang", "meta"]
    assert rows.select("locator", "tokens", "upos").rows() == [
        ("line:1", "They did n't go .", "PRON AUX PART VERB PUNCT"),
        ("line:21", "CAF\u00c9 Good", "NOUN ADJ")]  # cleaned (lm: NFC) word by word
    assert aligned(rows, "upos")
    meta = json.loads(rows["meta"][0])  # the surface text and each word's span in it, for rendering spans later
    assert meta == {"text": "They didn't go.", "offsets": [[0, 4], [5, 11], [5, 11], [12, 14], [14, 15]]}
    assert rows["n_words"].to_list() == [5, 2]
    manifest = read_manifest(Path(corpus.path))
    assert manifest["named_fields"] == {"text": ["tokens"], "labels": ["upos"], "tags": ["upos"]}
    assert manifest["label_counts"]["upos"]["train"] == {"ADJ": 1, "AUX": 1, "NOUN": 1, "PART": 1, "PRON": 1,
                                                         "PUNCT": 1, "VERB": 1}  # tags counted per word
    checked = {(e["expectation"], e["column"]) for e in read_manifest(Path(shards[0].path))["validation"]["expectations"]}
    assert {("expect_column_pair_values_to_be_equal", "_n_upos"), ("expect_column_values_to_not_be_null", "upos"),
            ("expect_column_values_to_not_be_null", "tokens")} <= checked


def test_each_sentence_not_kept_is_counted_with_its_reason_and_line(ewt_like):
    *_, corpus = ewt_like
    acc = read_manifest(Path(corpus.path))["accounting"]
    assert acc["per_source"]["d/a.conllu"] == {
        "records_read": 8, "kept": 2,  # one record per sentence
        "quarantined": {"malformed_line": 1, "token_whitespace": 1, "unknown_tag": 1},
        "filtered": {"alignment_changed": 1}, "deduplicated": {"conflicting_label": 1, "exact": 1}}
    quarantine = table(corpus, "quarantine")
    assert quarantine["line:9"][0] == "unknown_tag" and "'ADVV'" in quarantine["line:9"][1]
    assert quarantine["line:13"] == ("malformed_line", "line 14: 4 tab-separated columns, CoNLL-U has 10")
    assert quarantine["line:17"][0] == "token_whitespace"
    assert quarantine["line:17"][1].startswith("line 18: word 1 'New York' holds whitespace")
    dropped = table(corpus, "dropped")
    first = kept(corpus)["doc_id"]
    assert dropped["line:25"] == ("exact", f"duplicate_of={first[0]}")
    assert dropped["line:32"] == ("conflicting_label", f"duplicate_of={first[1]} upos=PROPN ADJ (first: NOUN ADJ)")
    # the control character is stripped (and counted) as everywhere; the word it was is then empty: dropped, named
    assert dropped["line:36"] == ("alignment_changed", "tokens: word 2 '\x07' is empty after cleaning")


def test_a_conll_column_file_with_named_columns(tmp_path):
    write(tmp_path / "ner.conll", CONLL)
    _, corpus = build({"name": "ner", "sources": [str(tmp_path / "ner.conll")],
                       "reader": {"tags": {"ner": "ner"}, "columns": ["token", "ner"]}}, ArtifactStore(tmp_path / "s"))
    rows = kept(corpus)
    assert rows.select("locator", "tokens", "ner").rows() == [
        ("line:3", "EU rejects German call", "B-ORG O B-MISC O"), ("line:8", "Peter Blackburn", "B-PER I-PER"),
        ("line:15", "Paris", "B-LOC")]
    assert aligned(rows, "ner")
    assert json.loads(rows["meta"][1]) == {"text": "Peter Blackburn", "offsets": [[0, 5], [6, 15]]}
    quarantine = table(corpus, "quarantine")
    assert quarantine["line:11"] == ("malformed_line", "line 11: 1 columns, the file's lines have 2")
    assert quarantine["line:13"][0] == "unknown_tag"
    acc = read_manifest(Path(corpus.path))["accounting"]
    assert (acc["records_read"], acc["kept"]) == (5, 3)


def test_a_gzipped_conllu_reads_as_the_plain_file(tmp_path, ewt_like):
    plain = kept(ewt_like[2])
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "a.conllu.gz").write_bytes(gzip.compress(CONLLU.encode()))
    _, corpus = build({"name": "gz", "sources": [str(tmp_path / "d")], "reader": {"tags": {"upos": 3}}},
                      ArtifactStore(tmp_path / "s"))
    rows = kept(corpus)  # read from the decompressed stream the digest is checked on: no source_changed
    assert rows.select("locator", "tokens", "upos").rows() == plain.select("locator", "tokens", "upos").rows()
    assert set(read_manifest(Path(corpus.path))["accounting"]["quarantined"]) == {
        "malformed_line", "token_whitespace", "unknown_tag"}


def test_cleaning_changes_words_never_their_number(tmp_path):
    text = sentence(row(1, "The", "DET"), row(2, "CAFE\u0301", "NOUN"), row(3, "\u00b4", "PUNCT"))  # line 1
    text += sentence(row(1, "ﬁne", "ADJ"), row(2, "Ｄay", "NOUN"))  # line 6: ligature, fullwidth letter
    write(tmp_path / "a.conllu", text)
    _, corpus = build({"name": "lower", "sources": [str(tmp_path / "a.conllu")], "reader": {"tags": {"upos": "upos"}},
                       "clean": {"ops": ["nfkc", "lowercase"]}}, ArtifactStore(tmp_path / "s"))
    rows = kept(corpus)
    assert rows.select("tokens", "upos").rows() == [("fine day", "ADJ NOUN")]
    assert aligned(rows, "upos")
    # NFKC makes the acute accent U+00B4 a space and a combining accent: the word would split in two
    (drop,) = pl.read_parquet(Path(corpus.path) / "dropped.parquet").to_dicts()
    assert (drop["locator"], drop["stage"], drop["reason"]) == ("line:1", "filter", "alignment_changed")
    assert drop["detail"] == "tokens: word 3 '\u00b4' holds whitespace after cleaning (' \u0301')"
    # with whitespace normalization after it (per word: it strips) the word stays one
    _, corpus = build({"name": "lm", "sources": [str(tmp_path / "a.conllu")], "reader": {"tags": {"upos": "upos"}},
                       "clean": {"ops": ["nfkc", "lowercase", "normalize_whitespace"]}},
                      ArtifactStore(tmp_path / "s2"))
    assert kept(corpus)["tokens"].to_list() == ["the caf\u00e9 \u0301", "fine day"]


@pytest.mark.parametrize(("clean", "match"), [
    ({"ops": ["lowercase", "ptb_tokenize"]}, r"corpus\.clean\.ops: 'ptb_tokenize' splits words"),
    ({"preset": "classic"}, r"corpus\.clean\.preset: 'strip_html' empties tag words"),
    ({"ops": ["remove_stopwords"]}, "'remove_stopwords' empties every stop word"),
    ({"ops": ["mentions"], "mention_mode": "drop"}, "with mention_mode drop"),
])
def test_ops_that_split_merge_or_drop_words_are_refused(clean, match):
    with pytest.raises(ConfigError, match=match):
        corpus_config_from_dict({"name": "c", "sources": ["a.conllu"], "reader": {"tags": {"upos": "upos"}},
                                 "clean": clean})
    corpus_config_from_dict({"name": "c", "sources": ["a.txt"], "clean": clean})  # fine untagged


@pytest.mark.parametrize(("reader", "match"), [
    ({"tags": {"upos": "upos"}, "fields": {"text": "t"}}, "leave reader.fields empty"),
    ({"tags": {"upos": "upos"}, "labels": {"label": "y"}}, "leave reader.labels empty"),
    ({"tags": {"tokens": "upos"}}, "'tokens' is a column every tagged corpus has"),
    ({"tags": {"lang": "upos"}}, "'lang' is a column every tagged corpus has"),
    ({"tags": {"2pos": "upos"}}, "not a field name"),
    ({"tags": {"upos": True}}, r"reader\.tags\.upos: expected str or int"),
    ({"columns": ["token", "ner"]}, "set reader.tags too"),
    ({"tags": {"ner": "ner"}, "columns": ["ner", "ner"]}, "each name once"),
])
def test_reader_tags_config_errors(reader, match):
    with pytest.raises(ConfigError, match=match):
        corpus_config_from_dict({"name": "c", "sources": ["a.conllu"], "reader": reader})


def test_a_tagged_file_in_an_untagged_corpus_and_the_reverse_are_unsupported(tmp_path):
    write(tmp_path / "d" / "a.conllu", CONLLU)
    write(tmp_path / "d" / "b.txt", "plain text\n")
    for tags, reason_of in (({}, "d/a.conllu"), ({"upos": "upos"}, "d/b.txt")):
        _, corpus = build({"name": "mixed", "sources": [str(tmp_path / "d")], "reader": {"tags": tags},
                           "shard_mb": 0}, ArtifactStore(tmp_path / f"s{len(tags)}"))
        (q,) = [r for r in pl.read_parquet(Path(corpus.path) / "quarantine.parquet").to_dicts()
                if r["reason"] == "unsupported_format"]
        assert q["source"] == reason_of and q["locator"] == "file"
        assert ("set corpus.reader.tags (e.g. {upos: upos})" if not tags
                else "a tagged corpus (reader.tags) reads .conllu and CoNLL column files") in q["detail"]


def test_a_missing_tag_column_stops_the_build(tmp_path):
    write(tmp_path / "a.conllu", CONLLU)
    write(tmp_path / "b.conll", CONLL)
    with pytest.raises(TaggedError, match="a.conllu: CoNLL-U has no tag column 'ner'"):
        build({"name": "x", "sources": [str(tmp_path / "a.conllu")], "reader": {"tags": {"ner": "ner"}}},
              ArtifactStore(tmp_path / "s1"))
    with pytest.raises(TaggedError, match=r"b.conll: column 4 \(ner\) does not exist: its lines have 2 columns"):
        build({"name": "y", "sources": [str(tmp_path / "b.conll")], "reader": {"tags": {"ner": 4}}},
              ArtifactStore(tmp_path / "s2"))


def test_gx_quarantines_a_row_whose_tags_do_not_match_its_words(tmp_path):
    import pandas as pd

    from corpusforge.tasks.corpus.validate import COLUMNS, ValidationConfig, validate_frame

    at = COLUMNS.index("text")
    columns = (*COLUMNS[:at], "tokens", "upos", *COLUMNS[at + 1:])
    frame = pd.DataFrame({c: ["x", "y"] for c in columns}).astype(object)
    frame["doc_id"] = ["good", "bad"]
    frame["tokens"] = ["a b c", "a b c"]
    frame["upos"] = ["X X X", "X X"]
    frame["n_chars"], frame["n_words"] = [5, 5], [3, 3]
    outcome = validate_frame(frame, ValidationConfig(data_docs=False), None, columns=columns,
                             text_columns=("tokens",), label_columns=("upos",), tag_columns=("upos",))
    assert outcome.row_failures == {"bad": "expect_column_pair_values_to_be_equal"}
