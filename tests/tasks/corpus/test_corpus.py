"""corpusforge.tasks.corpus.merge + corpusforge.tasks.corpus.shard on real files: accounting on hostile input, reuse and incrementality.

The hostile corpus is built once per module (GX validation costs ~0.5 s per shard) and every test
reads the published artifacts. Expected numbers are computed from the bytes the test wrote, never
from the code under test.
"""

from __future__ import annotations

import json
import os
import random
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path

import polars as pl
import pytest
from corpusforge.storage.store import ArtifactStore, read_manifest
from corpusforge.tasks.config import ConfigError
from corpusforge.tasks.corpus.config import corpus_config_from_dict
from corpusforge.tasks.corpus.merge import (
    build_corpus,
    resolve_packs,
    resolve_sources,
)
from corpusforge.tasks.corpus.shard import SourceRef, build_corpus_shard, pack_sources
from corpusforge.tasks.corpus.split import SPLITS, SplitConfig
from corpusforge.tasks.corpus.validate import COLUMNS
from corpusforge.tasks.step import StepResult

from tests.conftest import write

BUCKETS = ("quarantined", "filtered", "deduplicated")


def n_lines(data: bytes) -> int:
    """Records a line-mode reader must see: lines split on LF, a final LF does not open a new line."""
    return data.count(b"\n") + (0 if data.endswith(b"\n") or not data else 1)


def accounted(counts: dict) -> int:
    return counts["kept"] + sum(sum(counts[b].values()) for b in BUCKETS)


@dataclass
class Run:
    refs: list[SourceRef]
    shards: list[StepResult]
    corpus: StepResult


def run_pipeline(cfg, store: ArtifactStore) -> Run:
    refs = resolve_sources(cfg)
    shards = [build_corpus_shard(r, cfg, store) for r in refs]
    return Run(refs, shards, build_corpus(shards, cfg, store))


def read_kept(path: str | Path) -> pl.DataFrame:
    return pl.concat([pl.read_parquet(Path(path) / f"{s}.parquet") for s in SPLITS], how="vertical")


# --- the hostile corpus -----------------------------------------------------------------------------

SHARED = "shared line across files"
JSONL_GOOD_1 = {"text": "First JSON record", "id": 1, "tags": ["a", "b"]}
JSONL_GOOD_2 = {"text": "Second  JSON\trecord", "id": 2, "author": "Ann \u00c9"}
JSONL_LINES = [
    json.dumps(JSONL_GOOD_1),  # 1 kept
    '{"text": "unterminated',  # 2 invalid_json
    '["an", "array"]',  # 3 not_an_object
    json.dumps({"body": "no text field"}),  # 4 missing_text_field
    json.dumps({"text": 42}),  # 5 text_not_string
    "",  # 6 blank line -> empty record -> filtered 'empty'
    json.dumps({"text": "First JSON record", "id": 99}),  # 7 duplicate of line 1 (within file)
    json.dumps(JSONL_GOOD_2),  # 8 kept (cleaned)
    json.dumps({"text": SHARED, "id": 3}),  # 9 duplicate of a line in a_good.txt (across files)
]
GOOD_LINES = [
    "The quick brown fox",  # 1 kept
    "  jumps\tover   the\u00a0lazy dog  ",  # 2 kept as 'jumps over the lazy dog'
    "",  # 3 filtered empty
    "The quick brown fox",  # 4 dedup (within file) of line 1
    SHARED,  # 5 kept (first in source order)
    "caf\u0065\u0301 cr\u00e8me",  # 6 kept, NFC-folded
]


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    base = tmp_path_factory.mktemp("hostile")
    root = base / "raw"
    outside = base / "outside"
    expected_read: dict[str, int] = {}

    def add(rel: str, data: bytes | str) -> None:
        write(root / rel, data)
        raw = data.encode() if isinstance(data, str) else data
        # empty or binary files yield exactly one (quarantined) record; others one record per line
        expected_read[f"raw/{rel}"] = 1 if not raw or b"\x00" in raw else n_lines(raw)

    add("a_good.txt", "\n".join(GOOD_LINES) + "\n")
    add("b_bad_utf8.txt", b"valid first line\n\xff\xfe broken bytes \xc3\n valid third line\n")
    add("c_binary.txt", b"MZ\x90\x00\x03\x00\x00\x00\x04\x00binary payload\nmore\n")
    add("d_empty.txt", b"")
    add("e_blank.txt", "   \n\t\t\n\u00a0\n")
    add("f_records.jsonl", "\n".join(JSONL_LINES) + "\n")
    add("sub/nested.txt", "nested line without final newline")
    write(root / "g_blob.bin", b"\x01\x02 not a supported suffix")
    expected_read["raw/g_blob.bin"] = 1
    write(outside / "secret.txt", "secret line that must never be read\n")
    os.symlink(outside / "secret.txt", root / "h_escape.txt")
    expected_read["raw/h_escape.txt"] = 1
    os.symlink("..", root / "sub" / "loop")  # a directory loop back to the root
    expected_read["raw/sub/loop"] = 1
    write(root / ".hidden.txt", "hidden files are skipped\n")

    cfg = corpus_config_from_dict({"name": "hostile", "sources": [str(root)]})
    store = ArtifactStore(base / "store")
    run = run_pipeline(cfg, store)
    path = Path(run.corpus.path)
    return {
        "cfg": cfg, "store": store, "run": run, "expected_read": expected_read, "root": root,
        "manifest": read_manifest(path), "kept": read_kept(path),
        "quarantine": pl.read_parquet(path / "quarantine.parquet"),
        "dropped": pl.read_parquet(path / "dropped.parquet"),
        "shard_manifests": {r.name: read_manifest(Path(s.path)) for r, s in zip(run.refs, run.shards)},
    }


def test_discovery_finds_every_source_including_refused_ones(hostile):
    refs = {r.name: r for r in hostile["run"].refs}
    assert set(refs) == set(hostile["expected_read"])
    assert [r.name for r in hostile["run"].refs] == sorted(refs)  # sorted, so source order is stable
    assert "raw/.hidden.txt" not in refs
    assert refs["raw/g_blob.bin"].refused == "unsupported_format"
    assert refs["raw/h_escape.txt"].refused == "symlink_escape"
    assert refs["raw/sub/loop"].refused == "symlink_loop"
    assert refs["raw/a_good.txt"].refused is None
    assert not any(r.name.startswith("raw/sub/loop/") for r in refs.values())  # the loop was not walked


def test_accounting_sums_overall_and_per_source(hostile):
    acc = hostile["manifest"]["accounting"]
    assert accounted(acc) == acc["records_read"]
    assert set(acc["per_source"]) == set(hostile["expected_read"])
    for source, counts in acc["per_source"].items():
        assert accounted(counts) == counts["records_read"], source
    assert acc["records_read"] == sum(c["records_read"] for c in acc["per_source"].values())
    assert acc["kept"] == sum(c["kept"] for c in acc["per_source"].values())
    for bucket in BUCKETS:
        merged = Counter()
        for counts in acc["per_source"].values():
            merged.update(counts[bucket])
        assert acc[bucket] == dict(merged), bucket


def test_records_read_matches_independent_count(hostile):
    acc = hostile["manifest"]["accounting"]
    got = {s: c["records_read"] for s, c in acc["per_source"].items()}
    assert got == hostile["expected_read"]
    assert acc["records_read"] == sum(hostile["expected_read"].values())


def test_each_shard_manifest_accounting_sums(hostile):
    for source, manifest in hostile["shard_manifests"].items():
        acc = manifest["accounting"]
        assert list(acc["per_source"]) == [source]
        assert acc["records_read"] == hostile["expected_read"][source]
        assert accounted(acc) == acc["records_read"], source


def test_sources_without_records_are_quarantined_with_their_reason(hostile):
    per_source = hostile["manifest"]["accounting"]["per_source"]
    expected = {
        "raw/c_binary.txt": "binary_file",
        "raw/d_empty.txt": "empty_file",
        "raw/g_blob.bin": "unsupported_format",
        "raw/h_escape.txt": "symlink_escape",
        "raw/sub/loop": "symlink_loop",
    }
    for source, reason in expected.items():
        counts = per_source[source]
        assert counts == {"records_read": 1, "kept": 0, "quarantined": {reason: 1}, "filtered": {},
                          "deduplicated": {}}, source


def test_per_source_buckets_match_what_was_written(hostile):
    per_source = hostile["manifest"]["accounting"]["per_source"]
    assert per_source["raw/a_good.txt"] == {
        "records_read": 6, "kept": 4, "quarantined": {}, "filtered": {"empty": 1}, "deduplicated": {"exact": 1}}
    assert per_source["raw/b_bad_utf8.txt"] == {
        "records_read": 3, "kept": 2, "quarantined": {"invalid_utf8": 1}, "filtered": {}, "deduplicated": {}}
    # whitespace-only lines (spaces, tabs, NBSP) are read, then filtered as empty after cleaning
    assert per_source["raw/e_blank.txt"] == {
        "records_read": 3, "kept": 0, "quarantined": {}, "filtered": {"empty": 3}, "deduplicated": {}}
    assert per_source["raw/f_records.jsonl"] == {
        "records_read": 9, "kept": 2,
        "quarantined": {"invalid_json": 1, "not_an_object": 1, "missing_text_field": 1, "text_not_string": 1},
        "filtered": {"empty": 1}, "deduplicated": {"exact": 2}}
    assert per_source["raw/sub/nested.txt"]["kept"] == 1


def test_specific_reasons_appear(hostile):
    acc = hostile["manifest"]["accounting"]
    for reason in ("invalid_utf8", "binary_file", "empty_file", "invalid_json", "not_an_object",
                   "missing_text_field", "text_not_string", "symlink_escape", "symlink_loop",
                   "unsupported_format"):
        assert acc["quarantined"].get(reason, 0) >= 1, reason
    assert acc["filtered"] == {"empty": 1 + 3 + 1}
    assert acc["deduplicated"] == {"exact": 1 + 2}


def test_tables_add_up_to_records_read(hostile):
    q, d, kept = hostile["quarantine"], hostile["dropped"], hostile["kept"]
    acc = hostile["manifest"]["accounting"]
    assert q.height + d.height + kept.height == acc["records_read"] == sum(hostile["expected_read"].values())
    assert kept.height == acc["kept"]
    rows = Counter(q["source"].to_list()) + Counter(d["source"].to_list()) + Counter(kept["source"].to_list())
    assert dict(rows) == hostile["expected_read"]


def test_quarantine_rows_are_complete(hostile):
    q = hostile["quarantine"]
    for column in ("source", "locator", "stage", "reason"):
        assert q[column].null_count() == 0, column
        assert (q[column].str.len_chars() > 0).all(), column
    assert set(q["stage"]) == {"read"}
    bad = q.filter(pl.col("reason") == "invalid_utf8").row(0, named=True)
    assert bad["source"] == "raw/b_bad_utf8.txt" and bad["locator"] == "line:2"
    assert bad["raw"] == b"\xff\xfe broken bytes \xc3"  # the original bytes, not a lossy decode
    jsonl = dict(q.filter(pl.col("source") == "raw/f_records.jsonl").select("locator", "reason").iter_rows())
    assert jsonl == {"line:2": "invalid_json", "line:3": "not_an_object", "line:4": "missing_text_field",
                     "line:5": "text_not_string"}
    assert q.filter(pl.col("source") == "raw/h_escape.txt")["raw"].to_list() == [None]  # never read


def test_secret_behind_escaping_symlink_is_never_read(hostile):
    everything = " ".join(hostile["kept"]["text"].to_list())
    raws = b"".join(r for r in hostile["quarantine"]["raw"].to_list() if r)
    assert "secret" not in everything and b"secret" not in raws


def test_no_replacement_characters_in_kept_text(hostile):
    assert not hostile["kept"]["text"].str.contains("\ufffd", literal=True).any()
    assert not any("\ufffd" in t for t in hostile["kept"]["text"].to_list())


def test_dropped_rows(hostile):
    d = hostile["dropped"]
    assert d.columns == ["source", "locator", "stage", "reason", "detail"]
    assert set(zip(d["stage"], d["reason"])) == {("filter", "empty"), ("dedup", "exact")}
    empties = sorted(d.filter(pl.col("reason") == "empty").select("source", "locator").iter_rows())
    assert empties == [("raw/a_good.txt", "line:3"), ("raw/e_blank.txt", "line:1"), ("raw/e_blank.txt", "line:2"),
                       ("raw/e_blank.txt", "line:3"), ("raw/f_records.jsonl", "line:6")]


def test_kept_rows_schema_and_values(hostile):
    kept = hostile["kept"]
    assert kept.columns == list(COLUMNS)
    assert kept["doc_id"].n_unique() == kept.height
    assert kept["content_hash"].n_unique() == kept.height
    texts = {(s, loc): t for s, loc, t in kept.select("source", "locator", "text").iter_rows()}
    assert texts == {
        ("raw/a_good.txt", "line:1"): "The quick brown fox",
        ("raw/a_good.txt", "line:2"): "jumps over the lazy dog",
        ("raw/a_good.txt", "line:5"): SHARED,
        ("raw/a_good.txt", "line:6"): "caf\u00e9 cr\u00e8me",
        ("raw/b_bad_utf8.txt", "line:1"): "valid first line",
        ("raw/b_bad_utf8.txt", "line:3"): "valid third line",
        ("raw/f_records.jsonl", "line:1"): "First JSON record",
        ("raw/f_records.jsonl", "line:8"): "Second JSON record",
        ("raw/sub/nested.txt", "line:1"): "nested line without final newline",
    }
    for row in kept.iter_rows(named=True):
        assert row["n_chars"] == len(row["text"])
        assert row["n_words"] == len(row["text"].split())
        assert row["split"] in SPLITS
    for split in SPLITS:  # each split file only holds its own split
        part = pl.read_parquet(Path(hostile["run"].corpus.path) / f"{split}.parquet")
        assert set(part["split"]) <= {split}


def test_jsonl_extra_fields_are_meta_json(hostile):
    kept = hostile["kept"]
    meta = dict(kept.filter(pl.col("source") == "raw/f_records.jsonl").select("locator", "meta").iter_rows())
    assert set(meta) == {"line:1", "line:8"}
    assert json.loads(meta["line:1"]) == {k: v for k, v in JSONL_GOOD_1.items() if k != "text"}
    assert json.loads(meta["line:8"]) == {k: v for k, v in JSONL_GOOD_2.items() if k != "text"}
    txt_meta = kept.filter(pl.col("source") == "raw/a_good.txt")["meta"]
    assert txt_meta.null_count() == txt_meta.len()


def test_within_file_duplicate_points_at_the_first(hostile):
    kept, d = hostile["kept"], hostile["dropped"]
    first_id = kept.filter((pl.col("source") == "raw/a_good.txt") & (pl.col("locator") == "line:1"))["doc_id"][0]
    dup = d.filter((pl.col("source") == "raw/a_good.txt") & (pl.col("stage") == "dedup")).row(0, named=True)
    assert dup["locator"] == "line:4"
    assert f"duplicate_of={first_id}" in dup["detail"]


def test_cross_file_duplicate_kept_once_first_in_source_order(hostile):
    kept, d = hostile["kept"], hostile["dropped"]
    shared = kept.filter(pl.col("text") == SHARED)
    assert shared.height == 1
    assert shared.row(0, named=True)["source"] == "raw/a_good.txt"  # a_good.txt sorts before f_records.jsonl
    dup = d.filter((pl.col("source") == "raw/f_records.jsonl") & (pl.col("locator") == "line:9")).row(0, named=True)
    assert (dup["stage"], dup["reason"]) == ("dedup", "exact")
    assert f"duplicate_of={shared['doc_id'][0]}" in dup["detail"]
    # The shard itself still kept it: the cross-file duplicate is only removed by the merge.
    shard = next(s for r, s in zip(hostile["run"].refs, hostile["run"].shards) if r.name == "raw/f_records.jsonl")
    assert SHARED in pl.read_parquet(Path(shard.path) / "data.parquet")["text"].to_list()


def test_merged_artifact_files_and_metrics(hostile):
    m = hostile["manifest"]
    path = Path(hostile["run"].corpus.path)
    for f in ("train.parquet", "valid.parquet", "test.parquet", "quarantine.parquet", "dropped.parquet",
              "doc_lengths.png", "data_docs.html"):
        assert (path / f).is_file(), f
        assert f in m["files"], f
    assert m["metrics"]["docs"] == hostile["kept"].height
    assert m["metrics"]["chars"] == sum(len(t) for t in hostile["kept"]["text"])
    assert sum(m["metrics"][f"docs_{s}"] for s in SPLITS) == hostile["kept"].height
    assert [s["id"] for s in m["shards"]] == [s.id for s in hostile["run"].shards]
    assert m["config"]["name"] == "hostile"


def test_shards_with_rows_have_data_docs(hostile):
    for ref, shard in zip(hostile["run"].refs, hostile["run"].shards):
        manifest = hostile["shard_manifests"][ref.name]
        if manifest["metrics"]["docs"]:
            assert (Path(shard.path) / manifest["data_docs"]).is_file(), ref.name
        else:
            assert manifest["data_docs"] is None, ref.name


def test_rerun_reuses_everything(hostile):
    first = hostile["run"]
    again = run_pipeline(hostile["cfg"], hostile["store"])
    assert [r.digest for r in again.refs] == [r.digest for r in first.refs]
    assert all(s.reused for s in again.shards)
    assert [s.id for s in again.shards] == [s.id for s in first.shards]
    assert [s.path for s in again.shards] == [s.path for s in first.shards]
    assert again.corpus.reused
    assert again.corpus.id == first.corpus.id
    assert again.corpus.seconds == 0.0
    assert not first.corpus.reused and not any(s.reused for s in first.shards)


# --- incremental runs --------------------------------------------------------------------------------


def three_files(root: Path) -> None:
    write(root / "x.txt", "x one\nx two\n")
    write(root / "y.txt", "y one\ny two\n")
    write(root / "z.txt", "z one\nz two\n")


def test_changing_one_file_recomputes_only_its_shard(tmp_path: Path):
    root = tmp_path / "src"
    three_files(root)
    # GX still validates every shard; only the Data Docs site (~0.5 s per shard) is skipped here.
    cfg = corpus_config_from_dict({"name": "inc", "sources": [str(root)], "validate": {"data_docs": False}})
    store = ArtifactStore(tmp_path / "store")
    before = run_pipeline(cfg, store)

    write(root / "y.txt", "y one\ny changed\n")
    after = run_pipeline(cfg, store)

    names = [r.name for r in after.refs]
    assert names == ["src/x.txt", "src/y.txt", "src/z.txt"]
    changed = [n for n, b, a in zip(names, before.shards, after.shards) if a.id != b.id]
    assert changed == ["src/y.txt"]
    assert [s.reused for s in after.shards] == [True, False, True]
    assert after.corpus.id != before.corpus.id and not after.corpus.reused
    texts = set(read_kept(after.corpus.path)["text"])
    assert texts == {"x one", "x two", "y one", "y changed", "z one", "z two"}
    # the old corpus is still in the store, untouched
    assert set(read_kept(before.corpus.path)["text"]) == {"x one", "x two", "y one", "y two", "z one", "z two"}

    # Appending a file leaves every existing shard, and every existing document's split, alone.
    kept_before = read_kept(after.corpus.path).select("doc_id", "split")
    write(root / "w_new.txt", "brand new\n")
    grown = run_pipeline(cfg, store)
    assert [r.name for r in grown.refs][0] == "src/w_new.txt"
    assert [s.reused for s in grown.shards] == [False, True, True, True]
    assert [s.id for s in grown.shards[1:]] == [s.id for s in after.shards]
    kept_after = read_kept(grown.corpus.path).select("doc_id", "split")
    assert set(kept_before["doc_id"]) <= set(kept_after["doc_id"])
    assert kept_before.join(kept_after, on="doc_id", how="left", suffix="_new").filter(
        pl.col("split") != pl.col("split_new")).height == 0
    assert kept_after.height == kept_before.height + 1


def test_shard_config_change_changes_every_shard_but_name_only_the_merge(tmp_path: Path):
    root = tmp_path / "src"
    three_files(root)
    # Validation off keeps this id-focused test fast; it is part of the shard config all the same.
    cfg = corpus_config_from_dict({"name": "ids", "sources": [str(root)], "validate": {"enabled": False}})
    store = ArtifactStore(tmp_path / "store")
    base = run_pipeline(cfg, store)

    reseeded = run_pipeline(replace(cfg, split=SplitConfig(valid=cfg.split.valid, test=cfg.split.test, seed=1)),
                            store)
    assert all(a.id != b.id for a, b in zip(base.shards, reseeded.shards))
    assert not any(s.reused for s in reseeded.shards)
    assert reseeded.corpus.id != base.corpus.id

    renamed = run_pipeline(replace(cfg, name="ids2"), store)
    assert [s.id for s in renamed.shards] == [s.id for s in base.shards]
    assert all(s.reused for s in renamed.shards)
    assert renamed.corpus.id != base.corpus.id and not renamed.corpus.reused
    assert renamed.corpus.name == "ids2"
    assert set(read_kept(renamed.corpus.path)["doc_id"]) == set(read_kept(base.corpus.path)["doc_id"])


# --- resolve_sources -----------------------------------------------------------------------------------


def test_relative_sources_resolve_against_base_dir(tmp_path: Path):
    write(tmp_path / "cfgdir" / "data" / "a.txt", "hello\n")
    cfg = corpus_config_from_dict({"sources": ["data"]})
    refs = resolve_sources(cfg, tmp_path / "cfgdir")
    assert [r.name for r in refs] == ["data/a.txt"]
    assert refs[0].size == len(b"hello\n")


def test_no_sources_is_a_config_error(tmp_path: Path):
    with pytest.raises(ConfigError, match="corpus.sources"):
        resolve_sources(corpus_config_from_dict({}), tmp_path)


def test_only_hidden_files_is_a_config_error_naming_them(tmp_path: Path):
    write(tmp_path / "d" / ".secret.txt", "x\n")
    with pytest.raises(ConfigError, match=r"no files found.*d/\.secret\.txt"):
        resolve_sources(corpus_config_from_dict({"sources": [str(tmp_path / "d")]}))


# --- regressions: bugs found while writing these tests, since fixed -----------------------------------


def test_symlink_cycle_between_files_is_refused_as_a_loop(tmp_path: Path):
    """A symlink cycle (x -> y -> x, or s -> s) is a loop, not a 'dangling symlink'.

    Regression (storage/readers.py, _walk): non-strict os.path.realpath() in non-strict mode returns a path
    for a cycle instead of failing, os.path.exists() is then False, and the link is refused as
    'unreadable' with detail 'dangling symlink'.
    """
    root = tmp_path / "src"
    write(root / "a.txt", "real\n")
    os.symlink("y.txt", root / "x.txt")
    os.symlink("x.txt", root / "y.txt")
    os.symlink("s.txt", root / "s.txt")
    refs = {r.name: r for r in resolve_sources(corpus_config_from_dict({"sources": [str(root)]}))}
    assert refs["src/a.txt"].refused is None
    got = {name: (refs[name].refused, refs[name].detail) for name in ("src/x.txt", "src/y.txt", "src/s.txt")}
    assert {name: reason for name, (reason, _) in got.items()} == dict.fromkeys(got, "symlink_loop"), got


def test_identical_files_get_distinct_doc_ids_without_exact_dedup(tmp_path: Path):
    """doc_id must identify one document in the merged corpus.

    Regression (tasks/corpus/shard.py, doc_id_for): the id used to hash only the file's
    content digest and the locator, so two byte-identical files (a copied file) give every pair of
    rows the same doc_id. Exact dedup happens to hide it; with dedup.exact=false the merged corpus
    holds duplicate doc_ids (GX checks uniqueness per shard only, never after the merge).
    """
    root = tmp_path / "src"
    write(root / "a.txt", "same line\nother line\n")
    write(root / "copy_of_a.txt", "same line\nother line\n")
    cfg = corpus_config_from_dict({"sources": [str(root)], "dedup": {"exact": False},
                                   "validate": {"data_docs": False}})
    run = run_pipeline(cfg, ArtifactStore(tmp_path / "store"))
    kept = read_kept(run.corpus.path)
    assert kept.height == 4
    assert kept["doc_id"].n_unique() == kept.height, kept.select("doc_id", "source", "locator")


def test_hidden_entries_are_listed_in_the_corpus_manifest(tmp_path: Path):
    from corpusforge.tasks.corpus.merge import discover

    write(tmp_path / "d" / "a.txt", "visible\n")
    write(tmp_path / "d" / ".secret.txt", "hidden\n")
    store = ArtifactStore(tmp_path / "store")
    cfg = corpus_config_from_dict({"sources": [str(tmp_path / "d")], "validate": {"enabled": False}})
    refs, hidden = discover(cfg)
    assert [r.name for r in refs] == ["d/a.txt"] and hidden == ["d/.secret.txt"]
    shards = [build_corpus_shard(r, cfg, store) for r in refs]
    with_hidden = build_corpus(shards, cfg, store, hidden)
    manifest = read_manifest(Path(with_hidden.path))
    assert manifest["config"]["skipped"] == ["d/.secret.txt"]
    assert build_corpus(shards, cfg, store).id != with_hidden.id  # the skipped set is part of identity


def test_the_corpus_steps_take_their_ids_from_the_fields_that_declare_them():
    """House issue item 3: one mechanism (field metadata "steps" read by tasks.config.identity) for the shard and
    the merge ids. Near-dedup changes the merge only; cleaning changes the shards only; the sources and
    allow_empty are in no id (the sources are the shards' inputs)."""
    from corpusforge.tasks.config import identity
    from corpusforge.tasks.corpus.config import corpus_config_from_dict
    from corpusforge.tasks.corpus.shard import shard_config

    base = corpus_config_from_dict({"sources": ["a"]})
    near = corpus_config_from_dict({"sources": ["b"], "dedup": {"near": {"enabled": True}}, "allow_empty": True})
    raw = corpus_config_from_dict({"sources": ["a"], "clean": {"preset": "raw"}})
    assert shard_config(base, "s") == shard_config(near, "s") and identity(base, "corpus") != identity(near, "corpus")
    assert shard_config(base, "s") != shard_config(raw, "s") and identity(base, "corpus") == identity(raw, "corpus")
    assert set(identity(base, "corpus")) == {"name", "dedup", "split"}
    assert set(shard_config(base, "s")) == {"source", "reader", "clean", "filters", "dedup", "split", "validate",
                                            "shard_compression"}
    assert shard_config(base, "s")["dedup"] == {"exact": True}
    # zstd shards (the only kind before shard_compression existed) keep their ids: the key is left out for zstd
    zstd = corpus_config_from_dict({"sources": ["a"], "shard_compression": "zstd"})
    assert "shard_compression" not in shard_config(zstd, "s") and shard_config(zstd, "s") != shard_config(base, "s")
    assert identity(zstd, "corpus") == identity(base, "corpus")


def test_shard_compression_changes_only_the_shards_intermediate_file(tmp_path):
    """corpus.shard_compression: a shard's kept rows (data.parquet, read only by the merge) uncompressed by default
    or zstd; the quarantine and drop tables and the corpus's own files are zstd either way, and the corpus's
    files are the same bytes whichever the shards used."""
    import pyarrow.parquet as pq

    rng = random.Random(7)
    for i in range(3):
        write(tmp_path / "d" / f"{i}.txt", "".join(" ".join(rng.choice("ab cd ef gh ij kl".split()) for _ in range(12))
                                                 + "\n" for _ in range(300)) + "dup\n" + "\x00\n")
    with open(tmp_path / "d" / "0.txt", "ab") as fh:
        fh.write(b"caf\xe9\n")  # not UTF-8: quarantined, so the quarantine tables have rows too

    def codecs(path: Path) -> set[str]:
        meta = pq.ParquetFile(path).metadata
        return {meta.row_group(g).column(c).compression for g in range(meta.num_row_groups)
                for c in range(meta.num_columns)}

    runs = {}
    for kind in ("none", "zstd"):
        cfg = corpus_config_from_dict({"sources": [str(tmp_path / "d")], "shard_mb": 0, "shard_compression": kind,
                                       "split": {"valid": 0.2, "test": 0.1}})
        runs[kind] = run = run_pipeline(cfg, ArtifactStore(tmp_path / f"store-{kind}"))
        for shard in run.shards:
            assert codecs(Path(shard.path) / "data.parquet") == ({"UNCOMPRESSED"} if kind == "none" else {"ZSTD"})
            assert codecs(Path(shard.path) / "dropped.parquet") == {"ZSTD"}
        for file in ("train.parquet", "valid.parquet", "test.parquet", "dropped.parquet", "quarantine.parquet"):
            assert codecs(Path(run.corpus.path) / file) == {"ZSTD"}
    assert {s.id for s in runs["none"].shards}.isdisjoint(s.id for s in runs["zstd"].shards)
    for file in ("train.parquet", "valid.parquet", "test.parquet", "dropped.parquet", "quarantine.parquet"):
        assert (Path(runs["none"].corpus.path) / file).read_bytes() == (Path(runs["zstd"].corpus.path) / file).read_bytes()
    assert read_kept(runs["none"].corpus.path).height == 3 * 300 + 1  # "dup" kept once; the NUL lines clean to empty
    with pytest.raises(ConfigError, match="shard_compression"):
        corpus_config_from_dict({"sources": ["a"], "shard_compression": "lz4"})


# --- shards that pack several small files --------------------------------------------------------------


def _sorted(frame: pl.DataFrame, *by: str) -> pl.DataFrame:
    return frame.sort(list(by), maintain_order=True)


def test_a_packed_shard_gives_the_corpus_one_shard_per_file_gives(hostile, tmp_path):
    """The hostile sources (every reader failure, duplicates within and across files, filtered records) packed
    into shards of several files: the same documents, ids, splits and order, the same accounting, and the same
    quarantine and drop rows (grouped by stage instead of by file) as with one shard per file."""
    cfg = hostile["cfg"]
    packs = resolve_packs(cfg)
    assert len(packs) < len(hostile["run"].refs)  # tiny files: packed
    assert [r.name for p in packs for r in p] == [r.name for r in hostile["run"].refs]
    store = ArtifactStore(tmp_path / "store")
    shards = [build_corpus_shard(p, cfg, store) for p in packs]
    corpus = build_corpus(shards, cfg, store)
    path, base = Path(corpus.path), Path(hostile["run"].corpus.path)
    for split in SPLITS:
        assert pl.read_parquet(path / f"{split}.parquet").equals(pl.read_parquet(base / f"{split}.parquet")), split
    for table, keys in (("quarantine", ("source", "locator", "stage")), ("dropped", ("source", "locator", "stage"))):
        assert _sorted(pl.read_parquet(path / f"{table}.parquet"), *keys).equals(
            _sorted(pl.read_parquet(base / f"{table}.parquet"), *keys)), table
    manifest = read_manifest(path)
    assert manifest["accounting"] == hostile["manifest"]["accounting"]
    assert manifest["metrics"] == hostile["manifest"]["metrics"]  # "sources" counts files, not shards
    assert [n for s in manifest["shards"] for n in s.get("sources", [s["source"]])] == [r.name for r in hostile["run"].refs]
    for shard, pack in zip(shards, packs):
        shard_manifest = read_manifest(Path(shard.path))
        assert [i["name"] for i in shard_manifest["inputs"]] == [r.name for r in pack]
        assert list(shard_manifest["accounting"]["per_source"]) == [r.name for r in pack]
        assert accounted(shard_manifest["accounting"]) == shard_manifest["accounting"]["records_read"]


@pytest.mark.parametrize("packed", [False, True])
def test_a_shard_read_in_chunks_gives_the_bytes_of_one_read_whole(tmp_path, monkeypatch, packed):
    """A shard is read, cleaned, filtered and hashed a chunk at a time (shard.CHUNK_BYTES of text): with chunks
    of one record batch each (and batches of a few lines), duplicates, filtered and undecodable lines on both
    sides of every chunk boundary, the shard's tables, accounting and metrics are the bytes of one chunk."""
    import corpusforge.tasks.corpus.shard as shard_mod
    from corpusforge.storage import line_blocks

    rng = random.Random(7)
    words = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota", "kappa"]
    for f in range(3 if packed else 1):
        lines: list[bytes] = []
        for i in range(400):
            r = rng.random()
            if r < 0.15 and lines:
                lines.append(rng.choice(lines))  # an exact duplicate, often in an earlier chunk
            elif r < 0.20:
                lines.append(b"   ")  # empty after cleaning: filtered
            elif r < 0.23:
                lines.append(b"bad \xff bytes %d" % i)  # quarantined by the reader, between batches
            else:
                lines.append(" ".join(rng.choice(words) for _ in range(rng.randint(1, 12))).encode() + b" \x07")
        write(tmp_path / "src" / f"f{f}.txt", b"\n".join(lines) + b"\n")
    cfg = corpus_config_from_dict({"sources": [str(tmp_path / "src")], "split": {"valid": 0.2, "test": 0.1},
                                   "validate": {"max_chars": 60}})  # some rows quarantined by GX
    (pack,) = resolve_packs(cfg)
    assert len(pack) == (3 if packed else 1)
    whole = build_corpus_shard(pack, cfg, ArtifactStore(tmp_path / "whole"))
    monkeypatch.setattr(line_blocks, "FAST_CHUNK", 256)  # a record batch every few lines
    monkeypatch.setattr(shard_mod, "CHUNK_BYTES", 1)  # each batch a chunk of its own
    chunks: list[int] = []
    prepare = shard_mod._prepare
    monkeypatch.setattr(shard_mod, "_prepare", lambda df, *a: (chunks.append(df.height), prepare(df, *a))[1])
    chunked = build_corpus_shard(pack, cfg, ArtifactStore(tmp_path / "chunked"))
    assert len(chunks) > 20 and whole.id == chunked.id and not chunked.reused
    a, b = read_manifest(Path(whole.path)), read_manifest(Path(chunked.path))
    assert a["accounting"] == b["accounting"] and a["metrics"] == b["metrics"]
    assert a["accounting"]["deduplicated"]["exact"] > 0 and a["accounting"]["filtered"]["empty"] > 0
    assert set(a["accounting"]["quarantined"]) == {"invalid_utf8", "expect_column_value_lengths_to_be_between"}
    for table in ("data", "quarantine", "dropped"):
        assert (Path(whole.path) / f"{table}.parquet").read_bytes() == (Path(chunked.path) / f"{table}.parquet").read_bytes(), table


def test_a_shard_of_one_file_keeps_its_id(tmp_path):
    write(tmp_path / "d" / "a.txt", "one\ntwo\n")
    cfg = corpus_config_from_dict({"sources": [str(tmp_path / "d")], "validate": {"enabled": False}})
    (ref,) = resolve_sources(cfg)
    store = ArtifactStore(tmp_path / "store")
    alone, packed = build_corpus_shard(ref, cfg, store), build_corpus_shard([ref], cfg, store)
    assert packed.id == alone.id and packed.reused
    assert read_manifest(Path(alone.path))["config"]["source"] == "d/a.txt"


def test_packed_identity_and_fixed_splits_per_file_on_the_duckdb_path(tmp_path):
    """More than SMALL_FRAME rows in a pack (DuckDB computes the ids with each row's own source prefix), held-out
    fractions, and a file whose split is fixed by name: every value is its Python definition's."""
    from corpusforge.tasks.corpus import identity as ident

    rng = random.Random(7)
    lines = {name: [f"{name} doc {i} " + " ".join(rng.choice("abcdefgh") for _ in range(6)) for i in range(700)]
             for name in ("a.txt", "b.txt", "held.txt")}
    lines["b.txt"][5] = lines["a.txt"][3]  # a duplicate across files: the merge drops it, naming the first
    lines["b.txt"][9] = lines["b.txt"][8]  # a duplicate within a file: the shard drops it
    for name, rows in lines.items():
        write(tmp_path / "d" / name, "\n".join(rows) + "\n")
    cfg = corpus_config_from_dict({"sources": [str(tmp_path / "d")], "validate": {"data_docs": False},
                                   "split": {"valid": 0.2, "test": 0.1, "by_source": {"*held.txt": "test"}}})
    refs = resolve_sources(cfg)
    (pack,) = resolve_packs(cfg)
    assert len(pack) == 3 and 3 * 700 > ident.SMALL_FRAME
    store = ArtifactStore(tmp_path / "store")
    shard = build_corpus_shard(pack, cfg, store)
    docs = pl.read_parquet(Path(shard.path) / "data.parquet")
    digests = {r.name: r.digest for r in refs}
    for row in docs.iter_rows(named=True):
        assert row["doc_id"] == ident.doc_id_for(row["source"], digests[row["source"]], row["locator"])
        assert row["content_hash"] == ident.content_hash_for(row["text"])
        expected = "test" if row["source"].endswith("held.txt") else ident.split_for(row["doc_id"], cfg.split)
        assert row["split"] == expected
    assert set(docs["split"].unique()) == {"train", "valid", "test"}
    dropped = pl.read_parquet(Path(shard.path) / "dropped.parquet")
    assert dropped.select("source", "locator", "reason").rows() == [("d/b.txt", "line:10", "exact")]
    corpus = build_corpus([shard], cfg, store)
    merged = pl.read_parquet(Path(corpus.path) / "dropped.parquet")
    across = merged.filter(pl.col("detail").str.contains("across files"))
    assert across.select("source", "locator").rows() == [("d/b.txt", "line:6")]
    alone = build_corpus([build_corpus_shard(r, cfg, store) for r in refs], cfg, store)
    for split in SPLITS:
        assert pl.read_parquet(Path(corpus.path) / f"{split}.parquet").equals(
            pl.read_parquet(Path(alone.path) / f"{split}.parquet"))


def _sizes_refs(sizes: list[int], prefix: str = "f") -> list[SourceRef]:
    return [SourceRef(f"{prefix}{i:05d}.txt", f"/x/{prefix}{i:05d}.txt", f"{i:064x}", s) for i, s in enumerate(sizes)]


def test_pack_sources_sizes_and_caps():
    from corpusforge.tasks.corpus.shard import MAX_PACK_FACTOR, MAX_PACK_FILES

    mb = 2**20
    refs = _sizes_refs([int(2.5 * mb)] * 40 + [20 * mb] + [1000] * 5000 + [9 * mb])
    packs = pack_sources(refs, 8)
    assert [r for p in packs for r in p] == refs  # every file once, in order
    for p in packs:
        big = [r for r in p if r.size >= 8 * mb]
        assert not big or p == big  # a file of shard_mb or more is a shard of its own
        assert sum(r.size for r in p) <= MAX_PACK_FACTOR * 8 * mb or len(p) == 1
        assert len(p) <= MAX_PACK_FILES
    mid = [p for p in packs if p[0].size == int(2.5 * mb) and len(p) > 0]
    assert 1 < len(mid) < 40  # 2.5 MB files share shards of ~8 MB
    tiny = [p for p in packs if p[0].size == 1000]
    assert sum(len(p) for p in tiny) == 5000 and len(tiny) < 20
    assert pack_sources(refs, 0) == [[r] for r in refs]
    assert pack_sources(refs, 8) == packs  # deterministic


def test_pack_boundaries_are_local():
    """Adding, removing or growing one file changes only the packs around it: the others keep their files
    (so their shard ids, and the work already done)."""
    rng = random.Random(11)
    refs = _sizes_refs([rng.choice([3_000, 40_000, 600_000, 2_500_000]) for _ in range(600)])

    def unchanged(before, after):
        a = {tuple(r.name for r in p) for p in before}
        return sum(1 for p in after if tuple(r.name for r in p) in a)

    packs = pack_sources(refs, 8)
    assert len(packs) > 20
    for i in (0, 137, 599):
        for changed in (refs[:i] + refs[i + 1:],  # removed
                        refs[:i] + [SourceRef("new.txt", "/x/new.txt", "0" * 64, 50_000)] + refs[i:],  # added
                        refs[:i] + [SourceRef(refs[i].name, refs[i].path, "f" * 64, 9 * 2**20)] + refs[i + 1:]):
            after = pack_sources(changed, 8)
            assert unchanged(packs, after) >= len(packs) - 3, i
