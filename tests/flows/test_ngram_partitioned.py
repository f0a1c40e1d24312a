"""Distributed n-gram counting (``ngram.partitions``): workers count slices of the documents into hash partitions,
partitions merge by summing, the estimate reads the merged counts. The ARPA file (and every other deterministic
file, and the artifact id) is byte for byte the single-node one: inline, and on a real local Dask cluster.
Also: the merge sums overlapping slices to the single-pass counts, and the step reports its progress."""

from __future__ import annotations

import hashlib
import json
import random
from pathlib import Path

import numpy as np
import pytest

from corpusforge.storage.ngram_counts import (count_ngram_tables, count_slice_partitions, document_slices, merge_partition,
                                  tables_from_partitions)
from corpusforge.storage.store import ArtifactStore
from corpusforge.tasks.config import ConfigError
from corpusforge.tasks.ngram.build import build_ngram
from corpusforge.tasks.ngram.config import ngram_config_from_dict
from tests.conftest import write
from tests.flows.test_runners import dask_address  # noqa: F401 - the module's local Dask cluster

WORDS = "the cat dog bird sat ran on under a mat log tree red big old and then it was not <unk> there".split()


def make_text(seed: int = 16, lines: int = 400) -> str:
    rng = random.Random(seed)
    return "\n".join(" ".join(rng.choices(WORDS, k=rng.randint(1, 14))) for _ in range(lines)) + "\n"


def sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def digests(result) -> dict[str, str]:
    manifest = json.loads((Path(result["path"] if isinstance(result, dict) else result.path)
                           / "manifest.json").read_text())
    skip = set(manifest.get("nondeterministic") or {})
    return {f: d["sha256"] for f, d in manifest["files"].items() if f not in skip}


def assert_same_tables(got, want) -> None:
    assert got.words == want.words and got.summary == want.summary
    for (gi, gc), (wi, wc) in zip(got.tables, want.tables, strict=True):
        assert np.array_equal(gi, wi) and np.array_equal(gc, wc)
    for g, w in zip(got.contexts, want.contexts, strict=True):
        assert np.array_equal(g, w)


def test_merge_of_overlapping_slices_sums_to_single_pass(tmp_path):
    """Two workers whose documents overlap (each also holds some of the other's lines): per partition, the
    concatenated counts summed equal one pass over all the documents, in every order."""
    import polars as pl

    text = make_text(lines=60).splitlines()
    docs = ["\n".join(text[i:i + 5]) for i in range(0, 60, 5)]
    docs = docs + docs[3:7]  # the second slice repeats four documents of the first: their n-grams must add up
    pl.DataFrame({"text": docs}).write_parquet(tmp_path / "train.parquet")
    single = count_ngram_tables([tmp_path / "train.parquet"], tmp_path / "single.duckdb", 3)
    slices = document_slices(tmp_path / "train.parquet", 2)
    assert slices == [(0, 8), (8, 16)]
    parts = [count_slice_partitions(tmp_path / "train.parquet", rows, tmp_path / f"w{i}", 3, 2)
             for i, rows in enumerate(slices)]
    assert sum(p["sentences"] for p in parts) == single.summary["sentences"]
    merged = [tmp_path / f"merged-{p}.parquet" for p in range(2)]
    rows = [merge_partition([parts[0]["files"][p], parts[1]["files"][p]], merged[p], 3) for p in range(2)]
    both = pl.concat([pl.read_parquet(f) for f in merged])
    assert sum(rows) == len(both) == len(both.unique(subset=["w1", "w2", "w3"]))  # one row per window
    first_words = [set(pl.read_parquet(f)["w1"].to_list()) for f in merged]
    assert not first_words[0] & first_words[1]  # a first word (so every n-gram prefix) lives in one partition
    got = tables_from_partitions(merged, tmp_path / "parts.duckdb", 3, "line",
                                 sum(p["sentences"] for p in parts), sum(p["tokens"] for p in parts))
    assert_same_tables(got, single)
    # and the counts of a repeated bigram are the sum of both workers' counts
    ids = {w: i for i, w in enumerate(got.words)}
    pair = docs[3].split("\n")[0].split()[:2]
    if len(pair) == 2:
        bigrams, counts = got.tables[1]
        row = np.flatnonzero((bigrams[:, 0] == ids[pair[0]]) & (bigrams[:, 1] == ids[pair[1]]))
        one = [count_slice_partitions(tmp_path / "train.parquet", r, tmp_path / f"c{i}", 2, 1) for i, r in
               enumerate(slices)]
        per_worker = [pl.read_parquet(o["files"][0]).filter((pl.col("w1") == pair[0]) & (pl.col("w2") == pair[1]))
                      ["count"].sum() for o in one]
        assert counts[row[0]] == sum(per_worker) and min(per_worker) > 0


def test_partitions_is_validated_and_not_in_the_id():
    with pytest.raises(ConfigError, match=r"ngram.partitions: must be >= 0") as err:
        ngram_config_from_dict({"partitions": -1})
    assert "\n" not in str(err.value)
    from corpusforge.tasks.ngram.config import NgramConfig, identity_config

    assert identity_config(NgramConfig(partitions=4)) == identity_config(NgramConfig())


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    from corpusforge.tasks.corpus.config import corpus_config_from_dict
    from corpusforge.tasks.corpus.merge import build_corpus, resolve_sources
    from corpusforge.tasks.corpus.shard import build_corpus_shard

    root = tmp_path_factory.mktemp("partitioned")
    src = write(root / "train.txt", make_text())
    cfg = corpus_config_from_dict({"name": "train", "sources": [str(src)], "reader": {"txt_mode": "line"},
                                   "clean": {"preset": "raw"}, "dedup": {"exact": False},
                                   "split": {"valid": 0, "test": 0}, "validate": {"max_chars": 1_000_000}})
    store = ArtifactStore(root / "store")
    return build_corpus([build_corpus_shard(r, cfg, store) for r in resolve_sources(cfg)], cfg, store), root


def test_partitioned_inline_gives_the_same_artifact_and_progress(corpus, tmp_path):
    corpus, _ = corpus
    base = {"order": 4, "threads": 1, "memory_limit": "512MB", "eval_splits": []}
    events: list[tuple[str, int, int]] = []
    single = build_ngram(corpus, ngram_config_from_dict(base), ArtifactStore(tmp_path / "a"),
                         progress=lambda *e: events.append(e))
    parted = build_ngram(corpus, ngram_config_from_dict({**base, "partitions": 3}), ArtifactStore(tmp_path / "b"))
    assert parted.id == single.id
    assert sha256(Path(parted.path) / "model.arpa.gz") == sha256(Path(single.path) / "model.arpa.gz")
    assert digests(parted) == digests(single)
    assert not (Path(parted.path) / ".partitions").exists()
    stages = {}
    for stage, done, total in events:
        stages.setdefault(stage, []).append((done, total))
    assert list(stages) == ["counting", "estimating", "writing ARPA"]
    assert stages["counting"] == [(0, 1), (1, 1)]
    assert stages["estimating"] == [(n, 4) for n in range(5)]
    assert stages["writing ARPA"] == [(n, 4) for n in range(5)]
    events.clear()
    build_ngram(corpus, ngram_config_from_dict({**base, "partitions": 2}), ArtifactStore(tmp_path / "c"),
                progress=lambda *e: events.append(e))
    assert [e for e in events if e[0] in ("counting", "merging")] == [
        ("counting", 0, 2), ("counting", 1, 2), ("counting", 2, 2), ("merging", 0, 2), ("merging", 1, 2),
        ("merging", 2, 2)]


def test_stage_progress_is_silent_off_a_terminal(capsys):
    from corpusforge.tasks.progress import stage_progress

    with stage_progress("ngram x") as update:
        update("counting", 1, 2)
    assert capsys.readouterr() == ("", "")


def ngram_tasks_finished(address: str) -> dict[str, int]:
    """How many ngram_count / ngram_merge tasks the Dask scheduler has seen finish on its workers so far."""
    from distributed import Client

    with Client(address, set_as_default=False) as client:
        counts = client.run_on_scheduler(lambda dask_scheduler: {
            name: dict(p.state_counts) for name, p in dask_scheduler.task_prefixes.items()})
    return {kind: sum(c.get("memory", 0) for name, c in counts.items() if kind in name)
            for kind in ("ngram_count", "ngram_merge")}


@pytest.fixture(scope="module")
def dask_runs(prefect_harness, corpus, dask_address):
    """Pipeline runs (corpus + ngram, orders 3 and 5): single-node counting (partitions 0) on threads, and 3
    partitions on a local Dask cluster of 2 worker processes (the one test_runners starts)."""
    from corpusforge.pipeline import run_pipeline

    _, root = corpus
    out = {}
    for runner, partitions in (({"kind": "threads", "workers": 2}, 0), ({"kind": "dask", "address": dask_address}, 3)):
        for order in (3, 5):
            config = {"name": "partitioned", "tracking": {"enabled": False}, "runner": runner,
                      "corpus": {"name": "train", "sources": [str(root / "train.txt")], "reader": {"txt_mode": "line"},
                                 "clean": {"preset": "raw"}, "dedup": {"exact": False},
                                 "split": {"valid": 0.1, "test": 0, "seed": 0}, "validate": {"max_chars": 100000}},
                      "ngram": {"order": order, "threads": 1, "memory_limit": "512MB", "partitions": partitions}}
            before = ngram_tasks_finished(dask_address)
            out[runner["kind"], order] = run_pipeline(config, store=root / f"store-{runner['kind']}")
            after = ngram_tasks_finished(dask_address)
            out["tasks", runner["kind"], order] = {k: v - before[k] for k, v in after.items()}
    return out


@pytest.mark.server
@pytest.mark.parametrize("order", [3, 5])
def test_partitioned_on_dask_gives_the_same_arpa(order, dask_runs):
    single, parted = dask_runs["threads", order], dask_runs["dask", order]
    s, p = single["stages"]["ngram"], parted["stages"]["ngram"]
    assert not p["reused"] and not s["reused"]
    assert p["id"] == s["id"]
    assert sha256(Path(p["path"]) / "model.arpa.gz") == sha256(Path(s["path"]) / "model.arpa.gz")
    assert digests(p) == digests(s)  # stats.json (perplexities), the model arrays, the Zipf plot
    # the counting and merging ran as tasks on the cluster's workers: 3 slices, 3 partitions
    assert dask_runs["tasks", "dask", order] == {"ngram_count": 3, "ngram_merge": 3}
    assert dask_runs["tasks", "threads", order] == {"ngram_count": 0, "ngram_merge": 0}
    with open(Path(p["path"]) / "stats.json") as f:
        assert json.load(f)["summary"]["distinct"][str(order)] > 0
