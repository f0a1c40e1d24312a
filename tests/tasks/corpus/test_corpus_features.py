"""Corpus-stage features beyond the basics: near-dedup, explicit splits, user expectations, incremental
first-occurrence order, control characters."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from corpusforge.storage.store import ArtifactStore, read_manifest
from corpusforge.tasks.corpus.config import corpus_config_from_dict
from corpusforge.tasks.corpus.merge import (
    build_corpus,
    order_like_previous,
    resolve_packs,
    resolve_sources,
)
from corpusforge.tasks.corpus.near_dedup import (
    NearDedupConfig,
    lsh_params,
    near_duplicate_of,
)
from corpusforge.tasks.corpus.shard import build_corpus_shard

from tests.conftest import write

# this module's own generator: the texts do not depend on which other test modules drew from the global one
RNG = random.Random(1234)
VOCAB = [f"w{i}" for i in range(3000)]


def sentence(n: int = 120) -> str:
    return " ".join(RNG.choices(VOCAB, k=n))


def build(tmp_path: Path, cfg: dict, store: ArtifactStore | None = None):
    store = store or ArtifactStore(tmp_path / "store")
    corpus_cfg = corpus_config_from_dict({"validate": {"data_docs": False}, **cfg})
    shards = [build_corpus_shard(r, corpus_cfg, store) for r in resolve_sources(corpus_cfg)]
    merged = build_corpus(shards, corpus_cfg, store)
    return merged, read_manifest(Path(merged.path)), store


def kept(path: str) -> pl.DataFrame:
    return pl.concat([pl.read_parquet(Path(path) / f"{s}.parquet") for s in ("train", "valid", "test")])


def test_lsh_params_fit_the_signature():
    for threshold in (0.5, 0.8, 0.9):
        bands, rows = lsh_params(threshold, 128)
        assert bands * rows <= 128
        # the S-curve's steepest point (1/b)^(1/r) lies near the threshold
        assert abs((1 / bands) ** (1 / rows) - threshold) < 0.15


def test_near_duplicate_of_keeps_the_earliest():
    a, b = sentence(), sentence()
    words = a.split()
    words[60] = "CHANGED"  # one word of 120 changed: Jaccard of 5-shingles = 115/125 = 0.92
    near_a = " ".join(words)
    result = near_duplicate_of([a, b, near_a, a], NearDedupConfig(enabled=True))
    assert result.tolist() == [-1, -1, 0, 0]


def test_unrelated_documents_are_never_near_duplicates():
    texts = [sentence() for _ in range(300)]
    assert (near_duplicate_of(texts, NearDedupConfig(enabled=True)) == -1).all()


def test_merge_drops_near_duplicates_across_files(tmp_path):
    a = sentence()
    words = a.split()
    words[10] = "edited"
    write(tmp_path / "d" / "1.txt", a + "\n" + sentence() + "\n")
    write(tmp_path / "d" / "2.txt", " ".join(words) + "\n")
    merged, manifest, _ = build(tmp_path, {"sources": [str(tmp_path / "d")], "dedup": {"near": {"enabled": True}}})
    acc = manifest["accounting"]
    assert acc["deduplicated"] == {"near": 1} and acc["kept"] == 2
    assert acc["per_source"]["d/2.txt"]["deduplicated"] == {"near": 1}
    dropped = pl.read_parquet(Path(merged.path) / "dropped.parquet")
    first_id = kept(merged.path).filter(pl.col("locator") == "line:1")["doc_id"][0]
    assert dropped["detail"][0].startswith(f"duplicate_of={first_id}")
    without, _, _ = build(tmp_path, {"sources": [str(tmp_path / "d")]})
    assert without.id != merged.id  # the near-dedup config is part of the merge's identity


def test_explicit_split_by_source(tmp_path):
    write(tmp_path / "d" / "train.txt", "\n".join(sentence(5) for _ in range(50)) + "\n")
    write(tmp_path / "d" / "heldout.txt", "\n".join(sentence(5) for _ in range(20)) + "\n")
    merged, manifest, _ = build(tmp_path, {"sources": [str(tmp_path / "d")],
                                            "split": {"valid": 0.0, "test": 0.0, "by_source": {"*heldout*": "valid"}}})
    docs = kept(merged.path)
    assert set(docs.filter(pl.col("source") == "d/heldout.txt")["split"]) == {"valid"}
    assert set(docs.filter(pl.col("source") == "d/train.txt")["split"]) == {"train"}
    assert manifest["metrics"]["docs_valid"] == 20


def test_user_row_expectation_quarantines_with_its_name(tmp_path):
    write(tmp_path / "d" / "a.txt", "one\ntwo words\nthree more words\n")
    expectation = {"type": "expect_column_values_to_be_between", "kwargs": {"column": "n_words", "min_value": 2}}
    _, manifest, _ = build(tmp_path, {"sources": [str(tmp_path / "d")], "validate": {"expectations": [expectation]}})
    assert manifest["accounting"]["quarantined"] == {"expect_column_values_to_be_between": 1}
    assert manifest["accounting"]["kept"] == 2


def test_user_dataset_expectation_stops_the_publish(tmp_path):
    from corpusforge.tasks.corpus.validate import DatasetValidationError

    write(tmp_path / "d" / "a.txt", "one\n")
    expectation = {"type": "expect_table_row_count_to_be_between", "kwargs": {"min_value": 5}, "level": "dataset"}
    with pytest.raises(DatasetValidationError, match="expect_table_row_count_to_be_between"):
        build(tmp_path, {"sources": [str(tmp_path / "d")], "validate": {"expectations": [expectation]}})
    assert not list((tmp_path / "store").glob("corpus*/*/manifest.json"))  # nothing published


def test_bad_user_expectation_is_a_clear_config_error():
    from corpusforge.tasks.config import ConfigError

    with pytest.raises(ConfigError, match=r"corpus.validate.expectations\[0\].level"):
        corpus_config_from_dict({"validate": {"expectations": [{"type": "expect_x", "level": "rows"}]}})


def test_new_file_sorting_first_does_not_evict_published_documents(tmp_path):
    store = ArtifactStore(tmp_path / "store")
    shared_line = sentence(8)
    write(tmp_path / "d" / "b.txt", shared_line + "\n" + sentence(8) + "\n")
    first, _, _ = build(tmp_path, {"name": "c", "sources": [str(tmp_path / "d")]}, store)
    write(tmp_path / "d" / "a.txt", shared_line + "\n")  # a newly arrived copy, alphabetically first
    cfg = corpus_config_from_dict({"name": "c", "sources": [str(tmp_path / "d")], "validate": {"data_docs": False}})
    ordered = order_like_previous(resolve_sources(cfg), store, "c")
    assert [r.name for r in ordered] == ["d/b.txt", "d/a.txt"]
    packs = resolve_packs(cfg, store=store)  # the two small files share a shard, the published one first
    assert [[r.name for r in p] for p in packs] == [["d/b.txt", "d/a.txt"]]
    second = build_corpus([build_corpus_shard(p, cfg, store) for p in packs], cfg, store)
    acc = read_manifest(Path(second.path))["accounting"]
    assert acc["per_source"]["d/a.txt"]["deduplicated"] == {"exact": 1}  # the newcomer is the duplicate
    assert acc["per_source"]["d/b.txt"]["kept"] == 2
    assert kept(first.path)["doc_id"].sort().to_list() == kept(second.path)["doc_id"].sort().to_list()


def test_control_characters_are_removed_and_counted(tmp_path):
    write(tmp_path / "d" / "a.txt", "bell\x07 here\nnul\x00 and esc\x1b\nclean\n")
    merged, _, store = build(tmp_path, {"sources": [str(tmp_path / "d")], "reader": {"txt_mode": "line"}})
    texts = kept(merged.path)["text"].to_list()
    assert sorted(texts) == ["bell here", "clean", "nul and esc"]
    shard_manifest = read_manifest(next((store.root / "corpus_shard").iterdir()))
    assert shard_manifest["metrics"]["control_chars_removed"] == 3


def test_signatures_are_deterministic_for_a_seed():
    from corpusforge.tasks.corpus.near_dedup import signatures

    texts = [sentence(30) for _ in range(5)]
    cfg = NearDedupConfig(enabled=True, seed=3)
    assert np.array_equal(signatures(texts, cfg), signatures(texts, cfg))
    assert not np.array_equal(signatures(texts, cfg), signatures(texts, NearDedupConfig(enabled=True, seed=4)))


def test_filters_and_cleaning_presets_run_in_the_shard_step(tmp_path):
    write(tmp_path / "d" / "a.txt", "ok\nthis line is long enough to keep\nHello, World!! Visit https://x.org now\n")
    merged, manifest, _ = build(tmp_path, {"sources": [str(tmp_path / "d")], "clean": {"preset": "classic"},
                                            "filters": {"min_chars": 5}})
    acc = manifest["accounting"]
    assert acc["filtered"] == {"too_short": 1}  # "ok"
    texts = sorted(kept(merged.path)["text"])
    # classic: lowercase, URL and punctuation removed, stop words dropped
    assert texts == ["hello world visit", "line long"]  # "keep" is on the Glasgow stop list too
    dropped = pl.read_parquet(Path(merged.path) / "dropped.parquet")
    assert dropped.filter(pl.col("reason") == "too_short")["locator"].to_list() == ["line:1"]


def test_streamed_two_pass_dedup_gives_the_same_duplicates_as_all_signatures_at_once(monkeypatch):
    """The merge's two passes (band keys batch by batch, then the signatures of the documents with a
    candidate, recomputed) must give exactly the duplicate_of of all signatures held at once, whatever
    the batches (lists or polars Series, cut at any size)."""
    from corpusforge.tasks.corpus import near_dedup

    base = [sentence(80) for _ in range(40)]
    texts = []
    for i in range(200):
        words = RNG.choice(base).split()
        for _ in range(RNG.randrange(0, 5)):  # 0..4 of 80 words changed: some pass 0.8, some do not
            words[RNG.randrange(len(words))] = f"edit{RNG.randrange(10**6)}"
        texts.append(" ".join(words))
    cfg = NearDedupConfig(enabled=True)
    at_once = near_dedup.near_duplicates(near_dedup.signatures(texts, cfg), cfg)
    monkeypatch.setattr(near_dedup, "SIGNATURE_BATCH", 7)
    chunks = [texts[i:i + 23] for i in range(0, len(texts), 23)]
    streamed = near_dedup.near_duplicates_streamed(lambda: iter(chunks), len(texts), cfg)
    as_series = near_dedup.near_duplicates_streamed(lambda: (pl.Series(c) for c in chunks), len(texts), cfg)
    assert streamed.tolist() == as_series.tolist() == at_once.tolist()
    assert 20 < (at_once >= 0).sum() < 190  # the corpus really has near duplicates, and non-duplicates
    with pytest.raises(ValueError, match="expected 201 documents"):
        near_dedup.near_duplicates_streamed(lambda: iter(chunks), len(texts) + 1, cfg)


def test_second_pass_signs_only_documents_with_a_candidate(monkeypatch):
    """Memory: only documents sharing an LSH band with an earlier one get their full signature kept."""
    from corpusforge.tasks.corpus import near_dedup

    signed = []
    real = near_dedup.signatures
    monkeypatch.setattr(near_dedup, "signatures", lambda texts, cfg: signed.append(len(texts)) or real(texts, cfg))
    texts = [sentence() for _ in range(300)]
    a = texts[10].split()
    a[50] = "CHANGED"
    texts.append(" ".join(a))  # document 300 near-duplicates document 10
    result = near_dedup.near_duplicates_streamed(lambda: [texts], len(texts), NearDedupConfig(enabled=True))
    assert result[300] == 10 and (np.delete(result, 300) == -1).all()
    assert signed == [301, 2]  # first pass: everyone; second pass: the pair


def test_shingle_tokens_follow_their_definition():
    """Each document's tokens: the hash of every window of k words (a shorter document: all its words; an
    empty one: a fixed token), computed here one document at a time in plain Python."""
    from corpusforge.tasks.corpus.near_dedup import (
        EMPTY_TOKEN,
        SHINGLE_BASE,
        WORD_SEED,
        _mix64,
        shingle_tokens,
    )

    k = 3
    texts = ["", "one", "one two", "one two three", "a b c d e", "  tabs\tand\nnew  lines here ", "é ü ñ é ü",
             None, "x y z x y z"]

    def reference(text):
        words = (text or "").split()
        if not words:
            return [EMPTY_TOKEN]
        hashes = [int(h) for h in pl.Series(words, dtype=pl.Utf8).hash(seed=WORD_SEED)]
        windows = [hashes[i:i + k] for i in range(len(words) - k + 1)] if len(words) >= k else [hashes]
        return [sum(h * pow(SHINGLE_BASE, k - 1 - j, 1 << 64) for j, h in enumerate(w)) % (1 << 64)
                for w in windows]

    tokens, offsets = shingle_tokens(pl.Series(texts, dtype=pl.Utf8), k)
    assert offsets[0] == 0 and offsets[-1] == len(tokens) and len(offsets) == len(texts) + 1
    for i, text in enumerate(texts):
        raw = np.array(reference(text), dtype=np.uint64)
        assert tokens[offsets[i]:offsets[i + 1]].tolist() == _mix64(raw).tolist(), repr(text)
    # word order matters inside a shingle, and equal shingles give equal tokens in any document
    assert tokens[offsets[8]] == tokens[offsets[8] + 3] and tokens[offsets[8]] != tokens[offsets[8] + 1]


def test_band_key_collisions_are_only_candidates():
    """Two documents whose band keys collide (forged here) are dropped only if their signatures agree."""
    from corpusforge.tasks.corpus.near_dedup import _verify

    sig = np.array([[1] * 128, [2] * 128, [1] * 127 + [9]], dtype=np.uint32)
    cand = np.array([[3, 3], [0, 3], [0, 1]], dtype=np.int32)  # 1 and 2 both "share a band" with 0
    assert _verify(cand, np.arange(3), sig, 0.8).tolist() == [-1, -1, 0]


def test_near_dedup_corpus_id_names_the_hash_library_version(tmp_path):
    from importlib.metadata import version

    write(tmp_path / "d" / "1.txt", sentence() + "\n")
    merged, manifest, _ = build(tmp_path, {"sources": [str(tmp_path / "d")], "dedup": {"near": {"enabled": True}}})
    assert version("polars") in manifest["config"]["near_dedup_hash"]
    exact, exact_manifest, _ = build(tmp_path, {"sources": [str(tmp_path / "d")]})
    assert "near_dedup_hash" not in exact_manifest["config"] and exact.id != merged.id


def test_merge_near_dedup_across_many_shards_matches_the_whole_corpus_at_once(tmp_path):
    base = [sentence(60) for _ in range(10)]
    lines = []
    for i in range(120):
        words = RNG.choice(base).split()
        words[RNG.randrange(len(words))] = f"edit{i}"
        lines.append(" ".join(words))
    for part in range(4):  # four shards, in name order
        write(tmp_path / "d" / f"{part}.txt", "\n".join(lines[part * 30:(part + 1) * 30]) + "\n")
    merged, manifest, _ = build(tmp_path, {"sources": [str(tmp_path / "d")], "dedup": {"near": {"enabled": True}},
                                            "split": {"valid": 0.0, "test": 0.0}})
    target = near_duplicate_of(lines, NearDedupConfig(enabled=True))  # lines are distinct: no exact dups
    expected = {f"d/{i // 30}.txt:line:{i % 30 + 1}": f"d/{t // 30}.txt:line:{t % 30 + 1}"
                for i, t in enumerate(target.tolist()) if t >= 0}
    docs = kept(merged.path)
    dropped = pl.read_parquet(Path(merged.path) / "dropped.parquet").filter(pl.col("reason") == "near")
    assert docs.height + dropped.height == 120 and dropped.height == len(expected) > 0
    ids = {}  # doc_id -> source:locator, over every document (kept and dropped) of every shard
    for shard in (tmp_path / "store" / "corpus_shard").iterdir():
        for row in pl.read_parquet(shard / "data.parquet").iter_rows(named=True):
            ids[row["doc_id"]] = f"{row['source']}:{row['locator']}"
    got = {f"{r['source']}:{r['locator']}": ids[r["detail"].split("=")[1].split()[0]] for r in dropped.iter_rows(named=True)}
    assert got == expected


def test_words_split_on_single_spaces_equal_the_regex_words():
    """shingle_tokens' words: on text with one space between words (cleaned text) a split on " ", else the
    regex ``\\S+``; both give the same words and counts, checked on random strings of every kind of space."""
    from corpusforge.tasks.corpus.near_dedup import _words

    rng = random.Random(3)
    pieces = ["a", "bb", "é", "x1", " ", " ", " ", "  ", "\t", "\n", "\u00a0", "\u2003", "\x1c", "\x85"]
    regular = [" ".join("".join(rng.choice("abcé") for _ in range(rng.randint(1, 4)))
                        for _ in range(rng.randint(1, 9))) for _ in range(300)] + [""] * 5
    mixed = ["".join(rng.choice(pieces) for _ in range(rng.randint(0, 12))) for _ in range(300)]
    for texts in (regular, mixed, regular + mixed):
        series = pl.Series(texts, dtype=pl.Utf8)
        flat, lens = _words(series)
        expected = series.str.extract_all(r"\S+")
        assert lens.tolist() == expected.list.len().to_list()
        assert flat.to_list() == expected.explode().drop_nulls().to_list()


@pytest.mark.parametrize("near", [False, True])
def test_merge_equals_its_definition_on_the_shards_rows(tmp_path, near):
    """The merge (dedup on 16 bytes a document, splits written shard by shard while the kept rows are counted and
    the drop rows' locators and doc ids picked) against its definition computed on every shard row at once: the
    first occurrence of each content hash in corpus order is kept, every later one is dropped naming the first
    one's doc id; near-duplicates are those near_duplicate_of finds among the rows left; metrics and per-source
    counts are sums over the kept rows."""
    rng = random.Random(5)
    pool = [sentence(12) for _ in range(60)]
    for f in range(5):
        lines = []
        for _ in range(rng.randrange(20, 60)):
            line = rng.choice(pool)
            if rng.random() < 0.2:  # a near-duplicate: one word changed
                words = line.split()
                words[rng.randrange(len(words))] = "edited"
                line = " ".join(words)
            lines.append(line)
        write(tmp_path / "d" / f"{f}.txt", "\n".join(lines) + "\n")
    cfg = {"sources": [str(tmp_path / "d")], "shard_mb": 0, "split": {"valid": 0.2, "test": 0.1, "seed": 3},
           "dedup": {"near": {"enabled": near, "threshold": 0.7}}}
    merged, manifest, _ = build(tmp_path, cfg)
    from corpusforge.tasks.corpus.merge import shard_dirs

    shard_paths = shard_dirs(merged.path, manifest)  # store-relative in the manifest (issue 35, item 6)
    rows = pl.concat([pl.read_parquet(p / "data.parquet") for p in shard_paths])
    assert len(shard_paths) == 5
    first_of: dict[str, str] = {}
    keep, want_drops = [], []
    for r in rows.iter_rows(named=True):
        if r["content_hash"] in first_of:
            keep.append(False)
            want_drops.append((r["source"], r["locator"], f"duplicate_of={first_of[r['content_hash']]} (across files)"))
        else:
            keep.append(True)
            first_of[r["content_hash"]] = r["doc_id"]
    left = rows.filter(pl.Series(keep))
    if near:
        target = near_duplicate_of(left["text"].to_list(), NearDedupConfig(enabled=True, threshold=0.7))
        assert (target >= 0).sum() > 0
        want_drops += [(left["source"][i], left["locator"][i], f"duplicate_of={left['doc_id'][int(t)]} (MinHash)")
                       for i, t in enumerate(target) if t >= 0]
        left = left.filter(pl.Series(target < 0))
    dropped = pl.read_parquet(Path(merged.path) / "dropped.parquet").filter(
        pl.col("stage") == "dedup", pl.col("detail").str.ends_with(")"))
    assert list(dropped.select("source", "locator", "detail").iter_rows()) == want_drops
    got = kept(merged.path)
    for split in ("train", "valid", "test"):
        assert (got.filter(pl.col("split") == split)["doc_id"].to_list()
                == left.filter(pl.col("split") == split)["doc_id"].to_list())
        assert manifest["metrics"][f"docs_{split}"] == left.filter(pl.col("split") == split).height
    assert manifest["metrics"]["docs"] == left.height and len(want_drops) > 0
    assert manifest["metrics"]["chars"] == left["n_chars"].sum() and manifest["metrics"]["words"] == left["n_words"].sum()
    for source, n in left.group_by("source").len().iter_rows():
        assert manifest["accounting"]["per_source"][source]["kept"] == n


def test_the_data_docs_page_counts_what_the_corpus_publishes(tmp_path):
    """Issue 35, item 9f: data_docs.html said "kept 7151" where the corpus kept 7,150 (the demo): it gave each
    shard's own count, before the deduplication across files. It now gives the corpus's count per shard, and the
    total, after validation's quarantine and every deduplication."""
    import re

    src = tmp_path / "src"
    write(src / "a.txt", "alpha one\nbeta two\ngamma three\n")
    write(src / "b.txt", "alpha one\ndelta four\n" + "x" * 40 + "\n")  # a copy of a.txt's line; one too long
    cfg = corpus_config_from_dict({"name": "c", "sources": [str(src)], "reader": {"txt_mode": "line"},
                                   "dedup": {"exact": True}, "validate": {"data_docs": False, "max_chars": 20},
                                   "split": {"valid": 0.0, "test": 0.0}})
    store = ArtifactStore(tmp_path / "store")
    shards = [build_corpus_shard(r, cfg, store) for r in resolve_packs(cfg)]
    merged = build_corpus(shards, cfg, store)
    acc = read_manifest(Path(merged.path))["accounting"]
    assert (acc["records_read"], acc["kept"], acc["deduplicated"]) == (6, 4, {"exact": 1})
    assert sum(acc["quarantined"].values()) == 1
    shard_kept = sum(read_manifest(Path(s.path))["accounting"]["kept"] for s in shards)
    assert shard_kept == 5  # before the deduplication across files: what the page used to say
    page = (Path(merged.path) / "data_docs.html").read_text(encoding="utf-8")
    cells = [[re.sub(r"<[^>]+>", "", c) for c in re.findall(r"<t[dh]>(.*?)</t[dh]>", row)]
             for row in re.findall(r"<tr>(.*?)</tr>", page)]
    rows, total = cells[1:-1], cells[-1]
    assert total[:3] == ["TOTAL", "6", "4"]
    assert sum(int(r[2]) for r in rows) == 4 and sum(int(r[1]) for r in rows) == 6
