"""The corpus stage with named fields (issue 31, item 3): translation pairs from line-aligned files or a TSV,
``{text, label}``, ``{prompt, chosen, rejected}``. Every text field is cleaned and filtered, exact dedup keys on
all of them together, a record with any bad field is quarantined (or filtered) as one record naming the field,
and the accounting counts records. Expected numbers are counted from the lines each test writes."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import polars as pl
import pytest

from corpusforge.storage.store import ArtifactStore, read_manifest
from corpusforge.tasks.config import ConfigError, to_dict
from corpusforge.tasks.corpus.config import aligned_files, corpus_config_from_dict
from corpusforge.tasks.corpus.merge import build_corpus, resolve_packs
from corpusforge.tasks.corpus.shard import build_corpus_shard
from corpusforge.tasks.corpus.split import SPLITS
from tests.conftest import write

BUCKETS = ("quarantined", "filtered", "deduplicated")


def build(config: dict, store: ArtifactStore):
    cfg = corpus_config_from_dict(config)
    shards = [build_corpus_shard(pack, cfg, store) for pack in resolve_packs(cfg)]
    return shards, build_corpus(shards, cfg, store)


def kept(corpus) -> pl.DataFrame:
    return pl.concat([pl.read_parquet(Path(corpus.path) / f"{s}.parquet") for s in SPLITS], how="vertical")


def table(corpus, name: str) -> list[dict]:
    return pl.read_parquet(Path(corpus.path) / f"{name}.parquet").drop("raw", strict=False).to_dicts()


def md5(*fields: str) -> str:
    return hashlib.md5("\x1f".join(fields).encode()).hexdigest()


def check_identity(acc: dict) -> None:
    for counts in [acc, *acc["per_source"].values()]:
        assert counts["kept"] + sum(sum(counts[b].values()) for b in BUCKETS) == counts["records_read"]


# --- hostile pairs: two line-aligned files ------------------------------------------------------------------

TRAIN_DE = [b"Ein Hund l\xc3\xa4uft.",  # 1 kept
            b"Zwei  Katzen\x07 schlafen.",  # 2 kept, cleaned (double space, control character)
            b"\xff kaputt",  # 3 invalid_utf8 in de: the pair is quarantined
            b"Nur Deutsch.",  # 4 en is empty: filtered 'empty', naming en
            b"Ein Hund l\xc3\xa4uft.",  # 5 the pair of line 1 again: deduplicated
            b"Ein Hund l\xc3\xa4uft.",  # 6 same de, other en: a pair of its own, kept
            b"   ",  # 7 both sides blank: filtered 'empty', naming de (the first field)
            b"Ein Vogel singt."]  # 8 kept
EXTRA_DE = [b"Nur eine Seite.", b"Noch eine."]  # lines 9 and 10 with no en: the pair files no longer line up
TRAIN_EN = [b"A dog runs.", b"Two cats sleep.", b"broken", b"", b"A dog runs.", b"A dog is running.", b"  ",
            b"A bird sings."]
VALID_DE, VALID_EN = [b"Ein Hund l\xc3\xa4uft.", b"Guten Tag."], [b"A dog runs.", b"Good day."]


@pytest.fixture(scope="module")
def pairs(tmp_path_factory):
    root = tmp_path_factory.mktemp("pairs")
    files = {}
    for name, lines in (("train.de", TRAIN_DE), ("train.en", TRAIN_EN), ("valid.de", VALID_DE),
                        ("valid.en", VALID_EN)):
        sep = b"\r\n" if name == "train.en" else b"\n"  # CRLF on one side only
        files[name] = write(root / "data" / name, sep.join(lines) + sep)
    config = {"name": "pairs", "sources": [{"fields": {"de": "data/train.de", "en": "data/train.en"}},
                                           {"fields": {"de": "data/valid.de", "en": "data/valid.en"}}],
              "split": {"valid": 0, "test": 0, "by_source": {"valid.*": "valid"}}, "shard_mb": 0}
    store = ArtifactStore(root / "store")
    cfg = corpus_config_from_dict(config)
    shards = [build_corpus_shard(pack, cfg, store) for pack in resolve_packs(cfg, root)]
    return root, files, config, store, shards, build_corpus(shards, cfg, store)


def test_hostile_pairs_are_counted_as_records(pairs):
    *_, shards, corpus = pairs
    acc = read_manifest(Path(corpus.path))["accounting"]
    train, valid = acc["per_source"]["train.de+train.en"], acc["per_source"]["valid.de+valid.en"]
    # one record per line pair: 8 + 2
    assert train == {"records_read": 8, "kept": 4, "quarantined": {"invalid_utf8": 1},
                     "filtered": {"empty": 2}, "deduplicated": {"exact": 1}}
    assert valid == {"records_read": 2, "kept": 1, "quarantined": {}, "filtered": {}, "deduplicated": {"exact": 1}}
    assert (acc["records_read"], acc["kept"]) == (10, 5)
    check_identity(acc)
    assert len(shards) == 2  # shard_mb 0: one shard per pair of files


def test_pairs_are_rows_with_a_column_per_field(pairs):
    *_, corpus = pairs
    rows = kept(corpus)
    assert rows.columns == ["doc_id", "source", "locator", "split", "de", "en", "n_chars", "n_words", "content_hash",
                            "lang", "meta"]  # no `text`: the encode step reads the fields by name
    got = [(r["locator"], r["split"], r["de"], r["en"]) for r in rows.iter_rows(named=True)]
    assert got == [("line:1", "train", "Ein Hund läuft.", "A dog runs."),
                   ("line:2", "train", "Zwei Katzen schlafen.", "Two cats sleep."),
                   ("line:6", "train", "Ein Hund läuft.", "A dog is running."),
                   ("line:8", "train", "Ein Vogel singt.", "A bird sings."),
                   ("line:2", "valid", "Guten Tag.", "Good day.")]
    assert rows["content_hash"].to_list() == [md5(de, en) for _, _, de, en in got]
    assert rows["n_chars"].to_list() == [len(de) + len(en) for _, _, de, en in got]
    assert rows["n_words"].to_list() == [len(de.split()) + len(en.split()) for _, _, de, en in got]
    assert rows["doc_id"].n_unique() == 5


def test_a_bad_side_names_its_field(pairs):
    *_, corpus = pairs
    quarantine = {(q["locator"], q["reason"]): q["detail"] for q in table(corpus, "quarantine")}
    assert quarantine == {
        ("line:3", "invalid_utf8"): "field 'de' (train.de): invalid UTF-8 at byte 0: b'\\xff ka'"}
    raw = pl.read_parquet(Path(corpus.path) / "quarantine.parquet")["raw"].to_list()
    assert raw == [b"\xff kaputt"]
    rows = kept(corpus)
    first = rows.filter(pl.col("locator") == "line:1")["doc_id"][0]
    dropped = {(d["source"], d["locator"]): (d["reason"], d["detail"]) for d in table(corpus, "dropped")}
    assert dropped == {
        ("train.de+train.en", "line:4"): ("empty", "en: no text after cleaning"),
        ("train.de+train.en", "line:7"): ("empty", "de: no text after cleaning"),
        ("train.de+train.en", "line:5"): ("exact", f"duplicate_of={first}"),
        ("valid.de+valid.en", "line:1"): ("exact", f"duplicate_of={first} (across files)"),
    }


def test_the_shard_names_both_files_as_inputs_and_validates_each_field(pairs):
    root, files, config, store, shards, corpus = pairs
    manifest = read_manifest(Path(shards[0].path))
    assert manifest["config"]["source"] == "train.de+train.en"
    assert manifest["config"]["aligned"] == {"train.de+train.en": {"de": "train.de", "en": "train.en"}}
    inputs = [(i["name"], i["field"], i["id"]) for i in manifest["inputs"]]
    assert inputs == [("train.de", "de", hashlib.sha256(files["train.de"].read_bytes()).hexdigest()),
                      ("train.en", "en", hashlib.sha256(files["train.en"].read_bytes()).hexdigest())]
    checked = {(e["expectation"], e["column"]) for e in manifest["validation"]["expectations"]}
    for column in ("de", "en"):
        assert ("expect_column_values_to_not_be_null", column) in checked
        assert ("expect_column_value_lengths_to_be_between", column) in checked
    assert manifest["validation"]["success"] is True
    merged = read_manifest(Path(corpus.path))
    assert merged["named_fields"] == {"text": ["de", "en"], "labels": []}
    report = (Path(corpus.path) / "report.md").read_text()
    assert "| quarantined | invalid_utf8 | 1 |" in report


def test_pair_ids_follow_each_file_and_the_python_helper_gives_the_same_source(pairs, tmp_path):
    root, files, config, store, shards, corpus = pairs
    again = build({**config, "sources": [aligned_files(files["train.de"], files["train.en"], fields=("de", "en")),
                                         aligned_files(files["valid.de"], files["valid.en"], fields=("de", "en"))]},
                  store)
    assert [s.id for s in again[0]] == [s.id for s in shards] and again[1].id == corpus.id
    assert all(s.reused for s in again[0])
    # the same files read under other keys is another corpus (the fields are its columns)
    swapped = {**config, "sources": [{"fields": {"en": str(files["train.de"]), "de": str(files["train.en"])}}]}
    assert build(swapped, store)[0][0].id != shards[0].id
    # the helper round-trips through the config's dict form (a YAML file, a Prefect task's argument)
    cfg = corpus_config_from_dict({"name": "x", "sources": [aligned_files("a.de", "b.en")]})
    assert corpus_config_from_dict(to_dict(cfg)) == cfg and cfg.field_spec.names == ("src", "tgt")
    # one file changed: only its shard is rebuilt
    write(tmp_path / "valid.de", files["valid.de"].read_bytes() + b"Noch ein Satz.\n")
    write(tmp_path / "valid.en", files["valid.en"].read_bytes() + b"One more sentence.\n")
    changed = {**config, "sources": [config["sources"][0] | {"fields": {k: str(root / v) for k, v in
                                                                      config["sources"][0]["fields"].items()}},
                                     {"fields": {"de": str(tmp_path / "valid.de"), "en": str(tmp_path / "valid.en")}}]}
    new_shards, new_corpus = build(changed, store)
    assert new_shards[0].id == shards[0].id and new_shards[1].id != shards[1].id and new_corpus.id != corpus.id


def test_a_pair_source_that_changes_while_read_is_refused(tmp_path):
    from corpusforge.tasks.corpus.shard import READ_ATTEMPTS

    de, en = write(tmp_path / "a.de", "eins\nzwei\n"), write(tmp_path / "a.en", "one\ntwo\n")
    cfg = corpus_config_from_dict({"name": "c", "sources": [aligned_files(de, en)]})
    (pack,) = resolve_packs(cfg)
    write(en, "one\nthree\n")  # after it was hashed: every read sees other bytes than the digest
    shard = build_corpus_shard(pack, cfg, ArtifactStore(tmp_path / "store"))
    manifest = read_manifest(Path(shard.path))
    assert manifest["accounting"]["quarantined"] == {"source_changed": 1} and manifest["accounting"]["kept"] == 0
    detail = pl.read_parquet(Path(shard.path) / "quarantine.parquet")["detail"][0]
    assert "a.en: its bytes changed" in detail and f"on each of {READ_ATTEMPTS} reads" in detail


# --- pairs in one table ---------------------------------------------------------------------------------------

def test_tsv_pairs_with_reader_fields(tmp_path):
    write(tmp_path / "data" / "pairs.tsv",
          b"id\tde\ten\n"
          b"1\tHallo Welt.\tHello world.\n"  # 1 kept
          b"2\tNur Deutsch\n"  # 2 missing en column: ragged_row, its line named
          b"3\tGut.\t\xffbad\n"  # 3 undecodable en
          b"4\t \tNothing.\n"  # 4 empty src: filtered
          b"5\tHallo Welt.\tHello world.\n"  # 5 duplicate pair
          b"6\tHallo Welt.\tHi world.\n")  # 6 another pair
    write(tmp_path / "data" / "wrong.tsv", "de\tfr\nHallo\tSalut\n")  # no en column at all: one record
    shards, corpus = build({"name": "tsv", "sources": [str(tmp_path / "data")],
                            "reader": {"fields": {"src": "de", "tgt": "en"}}, "split": {"valid": 0, "test": 0}},
                           ArtifactStore(tmp_path / "store"))
    acc = read_manifest(Path(corpus.path))["accounting"]
    assert acc["per_source"]["data/pairs.tsv"] == {
        "records_read": 6, "kept": 2, "quarantined": {"ragged_row": 1, "invalid_utf8": 1},
        "filtered": {"empty": 1}, "deduplicated": {"exact": 1}}
    assert acc["per_source"]["data/wrong.tsv"]["quarantined"] == {"missing_text_field": 1}
    check_identity(acc)
    rows = kept(corpus)
    assert rows.select("src", "tgt", "meta").rows() == [("Hallo Welt.", "Hello world.", '{"id": "1"}'),
                                                        ("Hallo Welt.", "Hi world.", '{"id": "6"}')]
    quarantine = {(q["source"], q["locator"]): (q["reason"], q["detail"]) for q in table(corpus, "quarantine")}
    assert quarantine[("data/pairs.tsv", "row:2")] == (
        "ragged_row", "line 3: 2 fields, the header has 3 (a tab inside a field?)")
    assert quarantine[("data/pairs.tsv", "row:3")] == ("invalid_utf8", "field 'tgt' ('en'): undecodable bytes")
    assert quarantine[("data/wrong.tsv", "header")][1].startswith("no column 'en'")
    dropped = {d["locator"]: (d["reason"], d["detail"]) for d in table(corpus, "dropped")}
    assert dropped["row:4"] == ("empty", "src: no text after cleaning")


def test_length_filters_apply_per_field_and_the_ratio_across_fields(tmp_path):
    de = ["ein kurzer satz", "eins zwei drei vier fuenf sechs sieben acht neun zehn", "ja", "a b c d e f g h"]
    en = ["a short sentence", "one two three four five six seven eight nine ten", "yes yes yes yes", "x"]
    write(tmp_path / "a.de", "\n".join(de) + "\n")
    write(tmp_path / "a.en", "\n".join(en) + "\n")
    _, corpus = build({"name": "r", "sources": [aligned_files(tmp_path / "a.de", tmp_path / "a.en")],
                       "filters": {"max_words": 8, "max_length_ratio": 3}}, ArtifactStore(tmp_path / "store"))
    dropped = {d["locator"]: (d["reason"], d["detail"]) for d in table(corpus, "dropped")}
    assert dropped == {"line:2": ("too_many_words", "src: n_words=10 > 8"),  # the first field to fail
                       "line:3": ("length_ratio", "words 4 / 1 = 4.0 > 3.0"),
                       "line:4": ("length_ratio", "words 8 / 1 = 8.0 > 3.0")}
    assert kept(corpus)["src"].to_list() == ["ein kurzer satz"]


def test_near_dedup_of_pairs_looks_at_both_sides(tmp_path):
    words = "the quick brown fox jumps over the lazy dog near the quiet river bank at dawn".split()
    de = [" ".join(words), " ".join(words), " ".join(reversed(words))]
    en = [" ".join(words) + " today", " ".join(words) + " today!", " ".join(words) + " today"]
    write(tmp_path / "a.de", "\n".join(de) + "\n")
    write(tmp_path / "a.en", "\n".join(en) + "\n")
    _, corpus = build({"name": "n", "sources": [aligned_files(tmp_path / "a.de", tmp_path / "a.en")],
                       "dedup": {"near": {"enabled": True, "threshold": 0.7}}}, ArtifactStore(tmp_path / "store"))
    acc = read_manifest(Path(corpus.path))["accounting"]
    # line 2 differs from line 1 by one character of en; line 3 has the same en as line 1 but de reversed
    assert acc["deduplicated"] == {"near": 1} and acc["kept"] == 2
    assert [d["locator"] for d in table(corpus, "dropped")] == ["line:2"]


# --- labelled records: {text, label} -----------------------------------------------------------------------

def test_text_and_int_label_jsonl(tmp_path):
    lines = [{"sentence": "a great movie", "label": 1},  # 1 kept
             {"sentence": "a terrible movie", "label": 0},  # 2 kept
             {"sentence": "a great  movie", "label": 1},  # 3 the same text once cleaned, same label: exact
             {"sentence": "a great movie", "label": 0},  # 4 the same text, another label: conflicting_label
             {"sentence": "fine", "label": "1"},  # 5 digits in a string: the int 1
             {"sentence": "meh", "label": "positive"},  # 6 bad_label
             {"sentence": "ok"},  # 7 missing_label
             {"sentence": "so so", "label": 2, "idx": 9}]  # 8 kept, idx to meta
    write(tmp_path / "sst.jsonl", "".join(json.dumps(x) + "\n" for x in lines))
    shards, corpus = build({"name": "sst", "sources": [str(tmp_path / "sst.jsonl")],
                            "reader": {"fields": {"text": "sentence"}, "labels": {"label": "label"}},
                            "split": {"valid": 0, "test": 0}}, ArtifactStore(tmp_path / "store"))
    manifest = read_manifest(Path(corpus.path))
    acc = manifest["accounting"]
    assert (acc["records_read"], acc["kept"]) == (8, 4)
    assert acc["quarantined"] == {"bad_label": 1, "missing_label": 1}
    assert acc["deduplicated"] == {"exact": 1, "conflicting_label": 1}
    check_identity(acc)
    rows = kept(corpus)
    assert rows.columns[:6] == ["doc_id", "source", "locator", "split", "text", "label"]
    assert rows.schema["label"] == pl.Int64
    assert rows.select("text", "label", "meta").rows() == [("a great movie", 1, None), ("a terrible movie", 0, None),
                                                           ("fine", 1, None), ("so so", 2, '{"idx": 9}')]
    assert rows["content_hash"].to_list() == [md5(t) for t in rows["text"]]  # one field: the md5 of its text
    first = rows["doc_id"][0]
    dropped = {d["locator"]: (d["reason"], d["detail"]) for d in table(corpus, "dropped")}
    assert dropped == {"line:3": ("exact", f"duplicate_of={first}"),
                       "line:4": ("conflicting_label", f"duplicate_of={first} label=0 (first: 1)")}
    assert manifest["label_counts"] == {"label": {"train": {"1": 2, "0": 1, "2": 1}, "valid": {}, "test": {}}}
    assert "## Labels" in (Path(corpus.path) / "report.md").read_text()
    checked = {(e["expectation"], e["column"]) for e in read_manifest(Path(shards[0].path))["validation"]["expectations"]}
    assert ("expect_column_values_to_not_be_null", "label") in checked


def test_a_label_conflict_across_files_and_string_labels(tmp_path):
    write(tmp_path / "d" / "a.csv", "text,label\nsame words,pos\nother words,neg\n")
    write(tmp_path / "d" / "b.csv", "text,label\nsame words,neg\nthird words,pos\n")
    _, corpus = build({"name": "csv", "sources": [str(tmp_path / "d")], "shard_mb": 0,
                       "reader": {"labels": {"label": {"column": "label", "type": "str"}}},
                       "split": {"valid": 0, "test": 0}}, ArtifactStore(tmp_path / "store"))
    rows = kept(corpus)
    assert rows.schema["label"] == pl.String and rows.select("text", "label").rows() == [
        ("same words", "pos"), ("other words", "neg"), ("third words", "pos")]
    (drop,) = table(corpus, "dropped")
    assert (drop["source"], drop["reason"]) == ("d/b.csv", "conflicting_label")
    assert drop["detail"] == f"duplicate_of={rows['doc_id'][0]} label=neg (first: pos) (across files)"


# --- preference triplets: {prompt, chosen, rejected} --------------------------------------------------------

def test_prompt_chosen_rejected_jsonl(tmp_path):
    lines = [{"prompt": "Capital of France?", "chosen": "Paris.", "rejected": "Lyon."},  # 1 kept
             {"prompt": "Capital of France?", "chosen": "Paris.", "rejected": "Nice."},  # 2 kept: another triplet
             {"prompt": "Capital of France?", "chosen": "Paris.", "rejected": "Lyon."},  # 3 exact duplicate
             {"prompt": "2+2?", "chosen": "   ", "rejected": "5"},  # 4 empty chosen: filtered
             {"prompt": "2+2?", "chosen": "4"},  # 5 no rejected
             {"prompt": "2+2?", "chosen": "4", "rejected": "5", "source": "gsm"}]  # 6 kept, meta
    write(tmp_path / "dpo.jsonl", "".join(json.dumps(x) + "\n" for x in lines))
    _, corpus = build({"name": "dpo", "sources": [str(tmp_path / "dpo.jsonl")],
                       "reader": {"fields": {"prompt": "prompt", "chosen": "chosen", "rejected": "rejected"}}},
                      ArtifactStore(tmp_path / "store"))
    acc = read_manifest(Path(corpus.path))["accounting"]
    assert acc["per_source"]["dpo.jsonl"] == {"records_read": 6, "kept": 3, "quarantined": {"missing_text_field": 1},
                                              "filtered": {"empty": 1}, "deduplicated": {"exact": 1}}
    rows = kept(corpus).sort("locator")
    assert rows.select("locator", "prompt", "chosen", "rejected", "meta").rows() == [
        ("line:1", "Capital of France?", "Paris.", "Lyon.", None),
        ("line:2", "Capital of France?", "Paris.", "Nice.", None),
        ("line:6", "2+2?", "4", "5", '{"source": "gsm"}')]
    dropped = {d["locator"]: (d["reason"], d["detail"]) for d in table(corpus, "dropped")}
    assert dropped["line:4"] == ("empty", "chosen: no text after cleaning")
    (q,) = table(corpus, "quarantine")
    assert (q["locator"], q["reason"], q["detail"]) == ("line:5", "missing_text_field", "field 'rejected': absent")


def test_gx_row_failures_quarantine_the_record_with_its_fields(tmp_path):
    write(tmp_path / "a.de", "kurz\nein viel zu langer deutscher satz\n")
    write(tmp_path / "a.en", "short\nok\n")
    _, corpus = build({"name": "gx", "sources": [aligned_files(tmp_path / "a.de", tmp_path / "a.en")],
                       "validate": {"max_chars": 20}}, ArtifactStore(tmp_path / "store"))
    frame = pl.read_parquet(Path(corpus.path) / "quarantine.parquet")
    (row,) = frame.to_dicts()
    assert (row["locator"], row["stage"], row["reason"]) == ("line:2", "validate",
                                                              "expect_column_value_lengths_to_be_between")
    assert json.loads(row["raw"]) == {"src": "ein viel zu langer deutscher satz", "tgt": "ok"}


# --- config -----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("config", "match"), [
    ({"sources": [{"fields": {"de": "a.de"}}]}, "two or more line-aligned files"),
    ({"sources": [{"fields": {"de": "a", "en": "b"}}, {"fields": {"de": "c", "fr": "d"}}]}, "same fields"),
    ({"sources": [{"fields": {"de": "a", "en": "b"}}], "reader": {"fields": {"src": "de", "tgt": "fr"}}},
     "same fields"),
    ({"sources": [{"fields": {"de": "a", "en": "b"}}], "reader": {"labels": {"label": "y"}}}, "text only"),
    ({"sources": [{"fields": {"doc_id": "a", "en": "b"}}]}, "cannot name a field"),
    ({"sources": ["x.tsv"], "reader": {"fields": {"src": "de"}}, "filters": {"lang_id": True}}, "lang_id"),
    ({"sources": ["x.txt"], "filters": {"max_length_ratio": 3}}, "needs named fields"),
    ({"sources": ["x.tsv"], "reader": {"fields": {"meta": "m"}}}, "every corpus has"),
])
def test_config_errors_name_the_key(config, match):
    with pytest.raises(ConfigError, match=match):
        corpus_config_from_dict({"name": "c", **config})


def test_missing_aligned_file_is_a_source_error(tmp_path):
    from corpusforge.storage.readers import SourceError

    write(tmp_path / "a.de", "x\n")
    cfg = corpus_config_from_dict({"name": "c", "sources": [aligned_files(tmp_path / "a.de", tmp_path / "nope.en")]})
    with pytest.raises(SourceError, match="nope.en"):
        resolve_packs(cfg)


# --- a corpus without named fields is the corpus it was ---------------------------------------------------------

# Computed by this test's build on commit c57ef84, before named fields existed: shard ids, corpus id, and a
# digest of the rows of every published table (the Parquet bytes were compared too, see the commit message).
PLAIN = {
    "shards": [
        "5e4d62fe2730be8aabdd40222a2642ac67610b3dbf9fe425ea88c631f98fc8f6",
        "4d845f96ed192d786f761fdafd967f91da29b6faaa16f4c360d4c9fdbe2e7335",
        # the TSV's shard moved on purpose (issue 44: its reading rules, ragged rows and no quoting, are in its id);
        # its rows, and the other files' shards, did not
        "9b7d4da1e1a5e3a30485df0b902590b5cd6b7fa31ee98d0fbb598eb644780b5a",
    ],
    "corpus": "75929c9a7c17b9c53b30af257aeba22b20b70d8d6e77b1ab8a30faac8096f7f4",
    "tables": {
        "corpus_shard/d__a.txt/data.parquet": "3b4fa36b09f83f9a",
        "corpus_shard/d__a.txt/dropped.parquet": "acaeba47c91da369",
        "corpus_shard/d__a.txt/quarantine.parquet": "4f53cda18c2baa0c",
        "corpus_shard/d__b.jsonl/data.parquet": "f1dd2b86cf518612",
        "corpus_shard/d__b.jsonl/dropped.parquet": "4f53cda18c2baa0c",
        "corpus_shard/d__b.jsonl/quarantine.parquet": "6b66e9fb60f735b2",
        "corpus_shard/d__c.tsv/data.parquet": "3fd99698e6fd319e",
        "corpus_shard/d__c.tsv/dropped.parquet": "61bd9d967b48da56",
        "corpus_shard/d__c.tsv/quarantine.parquet": "4f53cda18c2baa0c",
        "corpus/plain/dropped.parquet": "7bdc19cfe32a76ee",
        "corpus/plain/quarantine.parquet": "6b66e9fb60f735b2",
        "corpus/plain/test.parquet": "4f53cda18c2baa0c",
        "corpus/plain/train.parquet": "c77ca2d81e639dd0",
        "corpus/plain/valid.parquet": "503e47c5cfe46956",
    },
}


def plain_outputs(root: Path) -> dict:
    write(root / "d" / "a.txt", "the cat sat\n\nthe cat sat\nzwei  wörter\n")
    write(root / "d" / "b.jsonl", '{"text": "a bird", "id": 1}\n{"text": 3}\n{"text": "the cat sat"}\n')
    write(root / "d" / "c.tsv", "text\tlabel\nhello there\t1\nhello there\t0\n")
    store = ArtifactStore(root / "store")
    cfg = corpus_config_from_dict({"name": "plain", "sources": [str(root / "d")], "shard_mb": 0,
                                   "validate": {"data_docs": False}, "dedup": {"near": {"enabled": True}}})
    shards = [build_corpus_shard(pack, cfg, store) for pack in resolve_packs(cfg)]
    corpus = build_corpus(shards, cfg, store)
    tables = {}
    for result in [*shards, corpus]:
        for path in sorted(Path(result.path).glob("*.parquet")):
            rows = json.dumps(pl.read_parquet(path).to_dicts(), sort_keys=True, default=str)
            tables[f"{result.step}/{result.name}/{path.name}"] = hashlib.sha256(rows.encode()).hexdigest()[:16]
    return {"shards": [s.id for s in shards], "corpus": corpus.id, "tables": tables}


def test_a_plain_corpus_keeps_its_ids_and_rows(tmp_path):
    got = plain_outputs(tmp_path)
    assert got == PLAIN


def test_pair_files_that_do_not_line_up_are_refused_before_any_shard(tmp_path):
    """Issue 44, item 1: two more lines on one side shift nothing silently any more; the planner stops in one
    line naming both counts (the reader still quarantines ``missing_pair_line`` for files changed under it)."""
    from corpusforge.storage.aligned import AlignedCounts

    write(tmp_path / "train.de", b"\n".join(TRAIN_DE + EXTRA_DE) + b"\n")
    write(tmp_path / "train.en", b"\r\n".join(TRAIN_EN) + b"\r\n")
    cfg = corpus_config_from_dict({"name": "pairs", "sources": [{"fields": {"de": "train.de", "en": "train.en"}}]})
    with pytest.raises(AlignedCounts, match=r"train\.de \(de\) has 10 lines vs train\.en \(en\) has 8 lines"):
        resolve_packs(cfg, tmp_path)
