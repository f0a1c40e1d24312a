"""The store grows with the data, not with the number of files (issue 14, item 4): each shard carried ~4.2 MB
of GX Data Docs static assets (fonts, CSS, JS), so 100 files of 33 bytes made a 424 MB store. Now a shard holds
its data, its accounting and one Data Docs page; this test bounds the bytes per tiny shard."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.conftest import write

pytestmark = pytest.mark.slow

FILES = 30
PER_SHARD_BOUND = 100_000  # bytes; measured ~43 KB (parquet files, manifest, validation.json, a 28 KB page)


def tree_bytes(root: Path) -> int:
    return sum(os.path.getsize(Path(d) / f) for d, _, files in os.walk(root) for f in files)


def test_tiny_files_do_not_blow_up_the_store(prefect_harness, tmp_path):
    from corpusforge.pipeline import run_pipeline

    src = tmp_path / "src"
    for i in range(FILES):
        write(src / f"f{i:03d}.txt", f"tiny file number {i} has one line\n")
    store = tmp_path / "store"
    summary = run_pipeline({"name": "growth", "tracking": {"enabled": False}, "runner": {"kind": "threads"},
                            "corpus": {"name": "tiny", "sources": [str(src)]}}, store=store)
    shards = [s for s in summary["steps"] if s["step"] == "corpus_shard"]
    assert len(shards) == FILES
    pages = list((store / "corpus_shard").glob("*/gx/uncommitted/data_docs/local_site/index.html"))
    assert len(pages) == FILES, "every shard still has its Data Docs page"
    static = [p for p in (store / "corpus_shard").rglob("*")
              if p.suffix in {".css", ".js", ".woff", ".woff2", ".ttf", ".eot", ".svg", ".png"}]
    assert static == [], f"static assets copied into shards: {static[:5]}"
    per_shard = tree_bytes(store / "corpus_shard") / FILES
    assert per_shard < PER_SHARD_BOUND, f"{per_shard:.0f} bytes per 35-byte shard"
