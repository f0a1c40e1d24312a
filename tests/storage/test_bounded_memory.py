"""Decompression bombs in every format: an oversize document is quarantined as ``too_large`` without ever
being held whole. Each reader runs in its own process and its peak RSS (VmHWM) is checked."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
import zlib
from pathlib import Path

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.memory

BOMB_MB = 600  # decompressed size of the oversize document; the files themselves are ~600 KB
PEAK_BOUND_MB = 300  # every reader, fast paths included (the CSV fast path alone works on ~8 MiB chunks)
LIMIT = 1 << 20


def _member(data: bytes) -> bytes:
    """One gzip member (a gzip file may hold several, read as one stream)."""
    return gzip.compress(data, 9, mtime=0)


def _bomb(path: Path, head: bytes, fill: bytes, tail: bytes, mb: int = BOMB_MB) -> Path:
    """``head`` + ``mb`` MiB of ``fill`` + ``tail``, gzip'd as concatenated members (instant to build)."""
    block = _member(fill * ((1 << 20) // len(fill)))
    path.write_bytes(_member(head) + block * mb + _member(tail))
    return path


FORMATS = {
    "txt": (b"ok\n", b"a", b"\nafter\n"),
    "jsonl": (b'{"text": "ok"}\n{"text": "', b"a", b'"}\n{"text": "after"}\n'),
    "json": (b'[{"text": "ok"}, {"text": "', b"a", b'"}, {"text": "after"}]'),
    "csv": (b'text,id\nok,1\n"', b"a", b'",2\nafter,3\n'),
}

READ = """
import json, sys
from pathlib import Path
from corpusforge.storage.readers import ReaderConfig, SourceFile, read_batches, read_records

path, how = Path(sys.argv[1]), sys.argv[2]
cfg = ReaderConfig(txt_mode=sys.argv[3], max_document_bytes=int(sys.argv[4]))
reader = read_batches if how == "batches" else read_records
out = []
for item in reader(SourceFile(path.name, path), cfg):
    if hasattr(item, "reason"):
        out.append([item.locator, item.text if item.ok else item.reason])
    else:
        out += [[loc, text] for loc, text in zip(item.locators, item.texts)]
# VmHWM: this process image's own peak (ru_maxrss keeps the forking parent's peak across exec, so a large
# pytest process would make every reader look large)
hwm = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM:"))
print(json.dumps({"records": out, "peak_mb": hwm / 1024}))
"""


def _read_in_subprocess(path: Path, how: str, txt_mode: str = "line", limit: int = LIMIT, timeout: int = 300) -> dict:
    proc = subprocess.run([sys.executable, "-c", READ, str(path), how, txt_mode, str(limit)], cwd=REPO,
                          capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


def _texts(result: dict) -> list[str]:
    """Texts (or reasons) in locator order (read_batches yields a bad record before the batch around it)."""
    def key(locator: str) -> tuple[str, int]:
        kind, _, num = locator.partition(":")  # line:7, line:7#2, item:3, row:4, lines:3-9
        return kind, int(num.partition("#")[0].partition("-")[0])
    return [text for _, text in sorted(result["records"], key=lambda r: key(r[0]))]


@pytest.mark.parametrize("how", ["batches", "records"])
@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_decompression_bomb_is_quarantined_in_bounded_memory(tmp_path, fmt, how):
    path = _bomb(tmp_path / f"bomb.{fmt}.gz", *FORMATS[fmt])
    assert path.stat().st_size < 2 << 20  # a small file that decompresses to BOMB_MB
    result = _read_in_subprocess(path, how)
    assert _texts(result) == ["ok", "too_large", "after"]
    assert result["peak_mb"] < PEAK_BOUND_MB, f"{fmt} ({how}): peak RSS {result['peak_mb']:.0f} MB"


def test_json_object_bomb_reads_in_little_memory(tmp_path):
    """The issue's reproduction: one top-level object holding one huge string (was read whole)."""
    path = _bomb(tmp_path / "one.json.gz", b'{"text": "', b"a", b'", "k": 1}')
    result = _read_in_subprocess(path, "batches", limit=8 << 20)  # the default limit
    assert result["records"] == [["item:1", "too_large"]]
    assert result["peak_mb"] < 100, f"peak RSS {result['peak_mb']:.0f} MB for a {BOMB_MB} MB string"


def test_utf16_bomb_is_transcoded_in_bounded_memory(tmp_path):
    """UTF-16 files are transcoded chunk by chunk (they were read whole, up to 256 MiB, before)."""
    head = "\ufeffok\n".encode("utf-16-le")
    path = _bomb(tmp_path / "wide.txt.gz", head, "a".encode("utf-16-le"), "\nafter\n".encode("utf-16-le"))
    result = _read_in_subprocess(path, "batches")
    assert _texts(result) == ["ok", "too_large", "after"]
    assert result["peak_mb"] < PEAK_BOUND_MB, f"peak RSS {result['peak_mb']:.0f} MB"


def test_paragraph_of_many_short_lines_is_linear_and_bounded(tmp_path):
    """A huge paragraph of 2-byte lines: quarantined in linear time (the per-line size sum was quadratic,
    and one bytes object per line took ~40x the text's size)."""
    path = _bomb(tmp_path / "para.txt.gz", b"ok\n\n", b"a\n", b"\nafter\n", mb=4)  # 2M lines
    result = _read_in_subprocess(path, "records", txt_mode="paragraph", timeout=60)
    assert _texts(result) == ["ok", "too_large", "after"]
    assert result["peak_mb"] < 100, f"peak RSS {result['peak_mb']:.0f} MB"


def test_parquet_text_over_the_limit_is_quarantined(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "big.parquet"
    pq.write_table(pa.table({"text": ["ok", "word " * (LIMIT // 4), "after"], "k": [1, 2, 3]}), path)
    result = _read_in_subprocess(path, "batches")
    assert _texts(result) == ["ok", "too_large", "after"]


def test_csv_text_field_over_the_limit_is_too_large(tmp_path):
    """max_document_bytes below the csv module's 1 MiB field floor still applies to the text column."""
    path = tmp_path / "t.csv"
    path.write_text("text,id\nok,1\n" + "x" * 5000 + ",2\nafter,3\n")
    for how in ("batches", "records"):
        result = _read_in_subprocess(path, how, limit=4096)
        assert _texts(result) == ["ok", "too_large", "after"], how


def test_deeply_nested_json_is_invalid_not_a_crash(tmp_path):
    nested = "[" * 100_000 + "]" * 100_000
    jsonl = tmp_path / "deep.jsonl"
    jsonl.write_text('{"text": "ok"}\n' + nested + '\n{"text": "after"}\n')
    array = tmp_path / "deep.json"
    array.write_text('[{"text": "ok"}, ' + nested + ', {"text": "after"}]')
    for path in (jsonl, array):
        result = _read_in_subprocess(path, "records")
        texts = [text for _, text in result["records"]]  # read_records yields in file order
        assert texts[0] == "ok" and "invalid_json" in texts, (path.name, texts)
