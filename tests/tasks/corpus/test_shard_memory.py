"""A shard's memory is bounded by what it holds, not by how many files it packs (issue 30, item 12).

20,000 tiny files (0.5 MB of text) peaked at 2.06-2.29 GB RSS: each file's records were a frame of their own,
and the shard's chunk was their concatenation without a rechunk, so every later step (cleaning, filters, the
DuckDB identity query, which scanned one Arrow batch per file) worked on thousands of one-row pieces, at
~170 KB a file. The shard is built in a fresh process for two pack sizes and the peaks compared: what one more
file costs must stay small, whatever the fixed cost of a shard (imports, GX, DuckDB)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.memory

BUILD = """
import json, sys
from corpusforge.storage.store import ArtifactStore
from corpusforge.tasks.corpus.config import corpus_config_from_dict
from corpusforge.tasks.corpus.merge import discover
from corpusforge.tasks.corpus.shard import build_corpus_shard

source, store, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
cfg = corpus_config_from_dict({"name": "tiny", "sources": [source]})
refs, _ = discover(cfg)
result = build_corpus_shard(refs[:n], cfg, ArtifactStore(store))
# VmHWM: this process image's own peak (ru_maxrss would carry the forking pytest process's)
hwm = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM:"))
print(json.dumps({"peak_kb": hwm, "reused": result.reused}))
"""

SMALL, LARGE = 1100, 2200  # both over identity.SMALL_FRAME rows, so both take the DuckDB path
MAX_KB_PER_FILE = 40  # measured: ~5 KB a file now, ~170 KB before


def _peak_kb(source: Path, store: Path, n: int) -> int:
    out = subprocess.run([sys.executable, "-c", BUILD, str(source), str(store), str(n)], cwd=REPO,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["reused"] is False
    return result["peak_kb"]


def test_a_packed_shards_memory_grows_little_per_file(tmp_path):
    source = tmp_path / "tiny"
    for i in range(LARGE):
        folder = source / f"d{i // 500}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"f{i:05d}.txt").write_text(f"tiny file number {i} says hello\n", encoding="utf-8")
    small = _peak_kb(source, tmp_path / "store-small", SMALL)
    large = _peak_kb(source, tmp_path / "store-large", LARGE)
    per_file = (large - small) / (LARGE - SMALL)
    assert per_file < MAX_KB_PER_FILE, f"{per_file:.0f} KB per file ({small / 1024:.0f} MB at {SMALL} files, " \
                                       f"{large / 1024:.0f} MB at {LARGE})"
