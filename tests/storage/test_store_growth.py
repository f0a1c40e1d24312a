"""The store grows with the data, not with the number of files (issue 14, item 4): each shard carried ~4.2 MB
of GX Data Docs static assets (fonts, CSS, JS), so 100 files of 33 bytes made a 424 MB store. Now a shard holds
its data, its accounting and one Data Docs page; this test bounds the bytes per tiny shard. And small files are
packed into shared shards by default (corpus.shard_mb), so tiny files cost a fraction of a shard each."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.conftest import write

pytestmark = pytest.mark.e2e

FILES = 30
PER_SHARD_BOUND = 100_000  # bytes; measured ~43 KB (parquet files, manifest, validation.json, a 28 KB page)


def tree_bytes(root: Path) -> int:
    return sum(os.path.getsize(Path(d) / f) for d, _, files in os.walk(root) for f in files)


@pytest.mark.parametrize("shard_mb", [0, 8])
def test_tiny_files_do_not_blow_up_the_store(prefect_harness, tmp_path, shard_mb):
    from corpusforge.pipeline import run_pipeline

    src = tmp_path / "src"
    for i in range(FILES):
        write(src / f"f{i:03d}.txt", f"tiny file number {i} has one line\n")
    store = tmp_path / "store"
    summary = run_pipeline({"name": "growth", "tracking": {"enabled": False}, "runner": {"kind": "threads"},
                            "corpus": {"name": "tiny", "sources": [str(src)], "shard_mb": shard_mb}}, store=store)
    shards = [s for s in summary["steps"] if s["step"] == "corpus_shard"]
    if shard_mb == 0:
        assert len(shards) == FILES  # one shard per file
    else:
        assert 1 <= len(shards) <= 3  # packed: a pack ends after a tiny file with probability 1/2048
    pages = list((store / "corpus_shard").glob("*/gx/uncommitted/data_docs/local_site/index.html"))
    assert len(pages) == len(shards), "every shard still has its Data Docs page"
    static = [p for p in (store / "corpus_shard").rglob("*")
              if p.suffix in {".css", ".js", ".woff", ".woff2", ".ttf", ".eot", ".svg", ".png"}]
    assert static == [], f"static assets copied into shards: {static[:5]}"
    per_shard = tree_bytes(store / "corpus_shard") / len(shards)
    assert per_shard < PER_SHARD_BOUND, f"{per_shard:.0f} bytes per shard of 35-byte files"
    assert summary["corpus"]["accounting"]["kept"] == FILES
