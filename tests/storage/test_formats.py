"""Every format, compression, encoding mark and oversize policy the readers support, on real files."""

from __future__ import annotations

import bz2
import codecs
import gzip
import json
import lzma
import tracemalloc
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from corpusforge.storage.readers import ReaderConfig, SourceFile, discover_sources, read_records
from tests.conftest import write

LINES = ["first line", "zweite Zeile \u00e4\u00f6\u00fc", "third \U0001F44B line"]
PLAIN = ("\n".join(LINES) + "\n").encode()


def records(path: Path, **cfg):
    return list(read_records(SourceFile(path.name, path), ReaderConfig(**cfg)))


def texts(path: Path, **cfg):
    return [r.text for r in records(path, **cfg) if r.ok]


@pytest.mark.parametrize("suffix,compress", [
    (".gz", gzip.compress), (".bz2", bz2.compress), (".xz", lzma.compress),
    (".zst", lambda b: __import__("zstandard").ZstdCompressor().compress(b)),
])
def test_compressed_text_reads_like_plain(tmp_path, suffix, compress):
    path = write(tmp_path / f"doc.txt{suffix}", compress(PLAIN))
    assert texts(path) == LINES
    assert SourceFile(path.name, path).format == "txt"


def test_truncated_gzip_keeps_what_was_read_and_quarantines_the_rest(tmp_path):
    body = "".join(f"line number {i} with some padding text\n" for i in range(20000)).encode()
    blob = gzip.compress(body)
    path = write(tmp_path / "cut.txt.gz", blob[: len(blob) // 2])
    recs = records(path)
    good = [r for r in recs if r.ok]
    bad = [r for r in recs if not r.ok]
    assert len(bad) == 1 and bad[0].reason == "corrupt_compressed"
    assert 0 < len(good) < 20000
    # every good record is a complete original line, in order
    assert [r.text for r in good] == [f"line number {i} with some padding text" for i in range(len(good))]
    # the detail says how far decompression got: at least the bytes of the records kept
    reached = int(bad[0].detail.split("after ")[1].split(" bytes")[0])
    assert reached >= sum(len(r.text) + 1 for r in good)


def _both(path: Path, **cfg) -> list[tuple[str, str | None, str | None]]:
    """(locator, text, reason) of every record, from the per-record reader; the batched reader must agree."""
    from corpusforge.storage.readers import RawRecord, read_batches

    sf = SourceFile(path.name, path)
    slow = [(r.locator, r.text, r.reason) for r in read_records(sf, ReaderConfig(**cfg))]
    fast: list[tuple[str, str | None, str | None]] = []
    for item in read_batches(sf, ReaderConfig(**cfg)):
        if isinstance(item, RawRecord):
            fast.append((item.locator, item.text, item.reason))
        else:
            fast += [(loc, text, None) for loc, text in zip(item.locators, item.texts)]
    assert sorted(fast, key=str) == sorted(slow, key=str)
    return slow


@pytest.mark.parametrize("suffix", [".jsonl.gz", ".txt.gz", ".csv.gz", ".jsonl.xz"])  # bz2 yields nothing before a whole block
def test_small_truncated_compressed_file_keeps_the_records_before_the_break(tmp_path, suffix):
    """A cut inside the first 8 KiB of decompressed text (the sniffed head) lost every record: a truncated
    44-record .jsonl.gz was all "broken at the start". The complete records before the break are kept, and
    the rest is one corrupt_compressed record."""
    import zlib

    n = 60
    if suffix.startswith(".jsonl"):
        lines = [json.dumps({"text": f"record {i} " + "pad " * 20}) for i in range(n)]
    elif suffix == ".txt.gz":
        lines = [f"record {i} " + "pad " * 20 for i in range(n)]
    else:
        lines = ["text,n"] + [f"record {i} {'pad ' * 20},{i}" for i in range(n)]
    body = ("\n".join(lines) + "\n").encode()
    assert len(body) < 8192
    compress = {".gz": lambda b: gzip.compress(b, mtime=0), ".xz": lzma.compress}
    blob = compress[Path(suffix).suffix](body)
    cut = blob[: len(blob) * 2 // 3]
    if suffix.endswith(".gz"):  # what a decompressor can get out of the cut file
        reachable = zlib.decompressobj(31).decompress(cut)
        complete = reachable.count(b"\n") - (1 if suffix == ".csv.gz" else 0)
        assert complete > 10
    path = write(tmp_path / f"cut{suffix}", cut)
    recs = _both(path)
    good = [r for r in recs if r[2] is None]
    bad = [r for r in recs if r[2] is not None]
    assert len(bad) == 1 and bad[0][2] == "corrupt_compressed" and bad[0][0] == f"after-record:{len(good)}", bad
    assert "at the start" not in records(path)[-1].detail
    expected = [f"record {i} " + "pad " * 20 for i in range(n)]
    assert [r[1] for r in good] == expected[: len(good)]
    if suffix.endswith(".gz"):
        assert len(good) == complete
    else:
        assert len(good) > 0


@pytest.mark.parametrize("codec", ["utf-16-le", "utf-16-be"])
@pytest.mark.parametrize("compressed", [False, True])
def test_utf16_lone_surrogate_quarantines_only_its_line(tmp_path, codec, compressed):
    """A lone surrogate in a UTF-16 file was reported as corrupt_compressed ("broken at the start") and the
    good text around it was lost. Only the line holding the bad unit is quarantined, as an encoding problem."""
    bom = codecs.BOM_UTF16_LE if codec == "utf-16-le" else codecs.BOM_UTF16_BE
    before = [f"good line {i}" for i in range(3)]
    after = [f"after line {i}" for i in range(3)]
    text = "\n".join([*before, "bad \ud800 unit", *after]) + "\n"
    data = bom + text.encode(codec, "surrogatepass")
    path = write(tmp_path / ("wide.txt.gz" if compressed else "wide.txt"), gzip.compress(data) if compressed else data)
    recs = _both(path)
    assert [(loc, t) for loc, t, reason in recs if reason is None] == (
        [(f"line:{i + 1}", t) for i, t in enumerate(before)] + [(f"line:{i + 5}", t) for i, t in enumerate(after)])
    bad = [r for r in recs if r[2] is not None]
    assert [(loc, reason) for loc, _, reason in bad] == [("line:4", "invalid_utf16")]
    rec = next(r for r in records(path) if not r.ok)
    assert "utf-16" in rec.detail and rec.raw  # says what went wrong, keeps the bytes


def test_utf16_lone_surrogate_in_jsonl_and_a_cut_last_unit(tmp_path):
    """The same for JSONL (the bad record quarantined, the others kept), and an odd byte at the end of a
    UTF-16 file (a cut code unit) costs only the last line."""
    lines = [json.dumps({"text": "one"}), '{"text": "two \ud800"}', json.dumps({"text": "three"})]
    path = write(tmp_path / "w.jsonl", codecs.BOM_UTF16_LE + "\n".join(lines).encode("utf-16-le", "surrogatepass"))
    recs = _both(path)
    assert [(t, reason) for _, t, reason in recs] == [("one", None), (None, "invalid_utf16"), ("three", None)]
    odd = write(tmp_path / "odd.txt", codecs.BOM_UTF16_LE + "first\nsecond".encode("utf-16-le") + b"x")
    assert [(t, reason) for _, t, reason in _both(odd)] == [("first", None), (None, "invalid_utf16")]


def test_fake_compressed_file_is_quarantined(tmp_path):
    path = write(tmp_path / "fake.jsonl.gz", b'{"text": "not gzip at all"}\n')
    (rec,) = records(path)
    assert rec.reason == "corrupt_compressed"


@pytest.mark.parametrize("codec", ["utf-16-le", "utf-16-be", "utf-32-le", "utf-32-be"])
def test_utf16_and_utf32_are_recognised_by_bom(tmp_path, codec):
    bom = {"utf-16-le": codecs.BOM_UTF16_LE, "utf-16-be": codecs.BOM_UTF16_BE,
           "utf-32-le": codecs.BOM_UTF32_LE, "utf-32-be": codecs.BOM_UTF32_BE}[codec]
    path = write(tmp_path / "wide.txt", bom + PLAIN.decode().encode(codec))
    assert texts(path) == LINES


def test_utf8_bom_is_dropped(tmp_path):
    path = write(tmp_path / "bom.jsonl", codecs.BOM_UTF8 + b'{"text": "hello"}\n')
    assert texts(path) == ["hello"]


def test_charset_normalizer_fallback_records_the_encoding(tmp_path):
    cp1252 = "Caf\u00e9 cr\u00e8me br\u00fbl\u00e9e, na\u00efve fa\u00e7ade r\u00e9sum\u00e9".encode("cp1252")
    path = write(tmp_path / "legacy.txt", b"plain ascii\n" + cp1252 + b"\n")
    strict = records(path)
    assert [r.reason for r in strict] == [None, "invalid_utf8"]
    lenient = records(path, encoding_fallback="charset-normalizer")
    assert lenient[1].ok and "\u00e9" in lenient[1].text
    assert lenient[1].meta["_encoding"]  # the detected encoding is kept per record


def test_csv_with_quoted_newlines_and_meta(tmp_path):
    path = write(tmp_path / "t.csv", 'id,text,lang\n1,"two\nlines, with comma",en\n2,plain,de\n3\n')
    recs = records(path)
    assert [r.text for r in recs[:2]] == ["two\nlines, with comma", "plain"]
    assert recs[0].meta == {"id": "1", "lang": "en"} and recs[0].locator == "row:1"
    assert recs[2].reason == "ragged_row" and recs[2].detail == "1 fields, the header has 3 (a ',' inside a field?)"


def test_tsv_custom_column_and_invalid_bytes(tmp_path):
    path = write(tmp_path / "t.tsv", b"body\tsrc\nhello\tx\nbad \xff byte\ty\n")
    recs = records(path, text_field="body")
    assert recs[0].text == "hello" and recs[0].meta == {"src": "x"}
    assert recs[1].reason == "invalid_utf8" and b"\xff" in recs[1].raw


def test_csv_without_the_text_column(tmp_path):
    path = write(tmp_path / "t.csv", "a,b\n1,2\n")
    (rec,) = records(path)
    assert rec.reason == "missing_text_field" and "'a', 'b'" in rec.detail


def test_json_array_streamed_with_dotted_field(tmp_path):
    docs = [{"doc": {"body": f"text {i}"}, "n": i} for i in range(3)] + [{"doc": {}}, 5]
    path = write(tmp_path / "a.json", json.dumps(docs))
    recs = records(path, text_field="doc.body")
    assert [r.text for r in recs[:3]] == ["text 0", "text 1", "text 2"]
    assert recs[0].meta == {"doc": {}, "n": 0}
    assert [r.reason for r in recs[3:]] == ["missing_text_field", "not_an_object"]


def test_broken_json_array_keeps_items_before_the_break(tmp_path):
    path = write(tmp_path / "b.json", '[{"text": "a"}, {"text": "b"}, {"text": ')
    recs = records(path)
    assert [r.text for r in recs if r.ok] == ["a", "b"]
    assert recs[-1].reason == "invalid_json"


def test_json_single_object(tmp_path):
    path = write(tmp_path / "one.json", '{"text": "solo", "k": 1}')
    (rec,) = records(path)
    assert rec.text == "solo" and rec.meta == {"k": 1}


def test_jsonl_dotted_text_field(tmp_path):
    path = write(tmp_path / "n.jsonl", '{"a": {"b": "deep"}, "c": 1}\n')
    (rec,) = records(path, text_field="a.b")
    assert rec.text == "deep" and rec.meta == {"a": {}, "c": 1}


def test_parquet_text_column(tmp_path):
    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"text": ["x", None, "z"], "k": [1, 2, 3]}), path)
    recs = records(path)
    assert [r.text for r in recs] == ["x", None, "z"]
    assert recs[1].reason == "missing_text_field" and recs[2].meta == {"k": 3}
    pq.write_table(pa.table({"text": [1, 2]}), tmp_path / "ints.parquet")
    assert {r.reason for r in records(tmp_path / "ints.parquet")} == {"text_not_string"}
    write(tmp_path / "junk.parquet", b"PAR1 not really")
    (bad,) = records(tmp_path / "junk.parquet")
    assert bad.reason == "invalid_parquet"


def test_oversize_line_quarantined_with_bounded_memory(tmp_path):
    big = ("word " * 2_200_000).encode()  # a single 11 MB line
    path = write(tmp_path / "big.txt", b"short\n" + big + b"\nafter\n")
    tracemalloc.start()
    recs = records(path, max_document_bytes=1 << 20)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert [r.text if r.ok else r.reason for r in recs] == ["short", "too_large", "after"]
    assert f"{len(big)} bytes" in recs[1].detail and len(recs[1].raw) == 4096
    # bounded by the limit, not by the line: well under the 11 MB the line would take in memory
    assert peak < 4 << 20, f"peak {peak} bytes for a 1 MiB limit"


def test_oversize_line_split_on_whitespace(tmp_path):
    words = [f"w{i}" for i in range(3000)]
    path = write(tmp_path / "big.txt", (" ".join(words) + "\nnext\n").encode())
    recs = records(path, max_document_bytes=4096, oversize="split")
    parts = [r for r in recs if r.locator.startswith("line:1#")]
    assert len(parts) > 1 and all(len(r.text.encode()) <= 4096 for r in parts)
    assert " ".join(r.text for r in parts).split() == words  # nothing lost, no word cut
    assert recs[-1].locator == "line:2" and recs[-1].text == "next"


def test_oversize_paragraph_split_and_quarantine(tmp_path):
    para = "\n".join(f"verse line {i}" for i in range(2000))
    path = write(tmp_path / "p.txt", f"short para\n\n{para}\n\nend\n")
    split = records(path, txt_mode="paragraph", max_document_bytes=4096, oversize="split")
    middle = [r for r in split if r.locator.startswith("lines:3-")]
    assert len(middle) > 1 and "\n".join(r.text for r in middle) == para
    assert [split[0].text, split[-1].text] == ["short para", "end"]
    quarantined = records(path, txt_mode="paragraph", max_document_bytes=4096)
    assert [r.reason for r in quarantined] == [None, "too_large", None]


def test_include_exclude_globs_are_listed(tmp_path):
    for rel in ["a.txt", "b.md", "sub/c.txt", "sub/skip.txt"]:
        write(tmp_path / "d" / rel, "x\n")
    found = discover_sources([tmp_path / "d"], include=("*.txt",), exclude=("sub/skip.txt",))
    assert [f.name for f in found.files] == ["d/a.txt", "d/sub/c.txt"]
    assert sorted(found.skipped_excluded) == ["d/b.md", "d/sub/skip.txt"]


def test_fast_line_path_isolates_bad_lines_and_keeps_numbering(tmp_path):
    from corpusforge.storage.readers import RecordBatch, read_batches

    body = b"".join(f"line {i}\n".encode() for i in range(1, 1001))
    data = body.replace(b"line 500\n", b"line \xff500\n").replace(b"line 1\n", b"\xfeline 1\n", 1)
    path = write(tmp_path / "mixed.txt", data + b"tail without newline")
    good, bad = {}, []
    for item in read_batches(SourceFile(path.name, path)):
        if isinstance(item, RecordBatch):
            good.update(zip(item.locators, item.texts))
        else:
            bad.append((item.locator, item.reason))
    assert bad == [("line:1", "invalid_utf8"), ("line:500", "invalid_utf8")]
    assert len(good) == 999 and good["line:2"] == "line 2" and good["line:1001"] == "tail without newline"
    assert good["line:499"] == "line 499" and good["line:501"] == "line 501"
    # the per-record reader agrees record for record
    slow = list(read_records(SourceFile(path.name, path)))
    assert {r.locator: r.text for r in slow if r.ok} == good


def test_fast_line_path_hands_a_huge_line_to_the_bounded_reader(tmp_path):
    from corpusforge.storage.readers import RecordBatch, read_batches

    huge = b"x" * (9 << 20)  # longer than a whole fast-path chunk: no newline in sight
    path = write(tmp_path / "huge.txt", b"first\n" + huge + b"\nlast\n")
    items = list(read_batches(SourceFile(path.name, path), ReaderConfig(max_document_bytes=4096)))
    good = {loc: text for b in items if isinstance(b, RecordBatch) for loc, text in zip(b.locators, b.texts)}
    bad = [(r.locator, r.reason) for r in items if not isinstance(r, RecordBatch)]
    assert good == {"line:1": "first", "line:3": "last"}
    assert bad == [("line:2", "too_large")]
