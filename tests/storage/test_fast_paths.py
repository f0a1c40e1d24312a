"""The vectorized readers (JSONL, CSV/TSV, text lines) against the per-record readers, on hostile files.

``read_records`` is the per-record definition; ``read_batches`` takes the fast paths. For every input
both must give the same good records (locator, text, meta JSON) in the same order, and the same bad
records (locator, reason, detail, raw bytes) in the same order. The chunk sizes are shrunk in some
cases so that rows and lines straddle chunk boundaries and the fallback windows are crossed.
"""

from __future__ import annotations

import codecs
import json
import random

import pytest

import corpusforge.storage.fast_csv as fast_csv
import corpusforge.storage.line_blocks as line_blocks
from corpusforge.storage.readers import ReaderConfig, RecordBatch, SourceFile, read_batches, read_records
from corpusforge.storage.records import meta_json
from tests.conftest import write


def both_paths(path, **cfg):
    sf, config = SourceFile(path.name, path), ReaderConfig(**cfg)
    slow = list(read_records(sf, config))
    fast_good, fast_bad, batches = [], [], 0
    for item in read_batches(sf, config):
        if isinstance(item, RecordBatch):
            batches += 1
            fast_good += zip(item.locators, item.texts, item.metas or [None] * len(item))
        else:
            fast_bad.append((item.locator, item.reason, item.detail, item.raw))
    slow_good = [(r.locator, r.text, meta_json(r.meta)) for r in slow if r.ok]
    slow_bad = [(r.locator, r.reason, r.detail, r.raw) for r in slow if not r.ok]
    return (slow_good, slow_bad), (fast_good, fast_bad)


def assert_same(path, **cfg):
    (slow_good, slow_bad), (fast_good, fast_bad) = both_paths(path, **cfg)
    assert fast_bad == slow_bad
    assert fast_good == slow_good
    return slow_good, slow_bad


JSONL_LINES = [
    b'{"text": "plain", "id": 1, "src": "a"}',
    b'{"src":"b","text":"keys out of order, no spaces","id":2}',
    b'  {  "text" : "spaces around"  ,  "z" : true , "a" : null }  ',
    b'{"text": "escapes \\" \\\\ \\/ \\b \\f \\n \\r \\t \\u00e9 \\u001f \\u0000 end", "k": "v\\u00e9\\/\\"\\u0007"}',
    '{"text": "raw non-ASCII \u00e9\u4e2d\U0001F600 \u2028 \x7f", "autor": "Ann \u00c9"}'.encode(),
    b'{"text": "numbers", "i": -0, "f": 1.50, "e": 1e5, "E": 2E-7, "big": 123456789012345678901234567890, "inf": 1e400}',
    b'{"text": "only text"}',
    b'{"text": ""}',
    b'{}',
    b'{"text": "dup key", "text": "second wins"}',
    b'{"text": "dup meta", "a": 1, "a": 2}',
    b'{"body": "missing text"}',
    b'{"text": null}', b'{"text": 5}', b'{"text": ["list"]}', b'{"text": {"nested": 1}}',
    b'{"text": "nested meta", "m": {"b": 1, "a": [1, 2.50, "x"]}}',
    b'{"text": "nan", "x": NaN}', b'{"text": "inf", "x": -Infinity}',
    b'{"text": "unterminated',
    b'["an", "array"]', b'"a string"', b'42', b'null',
    b'', b'   ', b'\t \x0b\x0c', b'\r',
    b'{"text": "crlf line"}\r', b'{"text": "two CRs"}\r\r',
    b'{"text": "bad \xff utf8"}',
    b'{"text": "lone \\ud800 surrogate"}',
    b'{"text": "paired \\ud83d\\ude00 surrogates"}',
    b'{"text": "escaped backslash then u: \\\\ud800"}',
    b'{"text": "lone surrogate in meta", "m": "\\uDFFF"}',
    b'{"text": "around the surrogates: \\ud7ff \\uE000 \\uffff", "m": "\\uD7FF"}',
    b'{"te\\u0078t": "escaped key", "id": 3}',
    '{"text": "bom line"}'.encode("utf-8-sig"),
    b'{"text": "x", "long int": ' + b"9" * 5000 + b"}",
    b'{"text": "control \x01 raw in string"}',
    b'{"text": "trailing comma",}',
    b'{"text": "huge ' + b"word " * 400 + b'"}',  # over max_document_bytes=1024 below
    b'{"text": "last line without newline", "n": 7}',
]


@pytest.mark.parametrize("small_chunks", [False, True])
def test_jsonl_fast_path_matches_per_record_reader(tmp_path, monkeypatch, small_chunks):
    if small_chunks:
        monkeypatch.setattr(line_blocks, "FAST_CHUNK", 64)
    path = write(tmp_path / "hostile.jsonl", codecs.BOM_UTF8 + b"\n".join(JSONL_LINES))
    good, bad = assert_same(path, max_document_bytes=1024)
    assert len(good) + len(bad) == len(JSONL_LINES)
    reasons = {reason for _, reason, _, _ in bad}
    assert reasons == {"invalid_json", "not_an_object", "missing_text_field", "text_not_string", "invalid_utf8",
                       "too_large"}
    meta = {loc: m for loc, _, m in good}
    assert meta["line:6"] == ('{"E": 2e-07, "big": 123456789012345678901234567890, "e": 100000.0, '
                              '"f": 1.5, "i": 0, "inf": Infinity}')


def test_jsonl_dotted_text_field_and_oversize_split(tmp_path):
    lines = [json.dumps({"doc": {"body": f"text {i}", "x": i}, "n": i}) for i in range(50)]
    lines += ['{"doc": {}}', '{"doc": "flat"}', '{"doc.body": "a flat key with a dot"}']
    path = write(tmp_path / "dotted.jsonl", "\n".join(lines) + "\n")
    good, bad = assert_same(path, text_field="doc.body")
    assert len(good) == 50 and len(bad) == 3


def test_jsonl_many_plain_lines_with_scattered_bad_ones_keep_order(tmp_path, monkeypatch):
    monkeypatch.setattr(line_blocks, "FAST_CHUNK", 4096)
    rng = random.Random(7)
    lines = []
    for i in range(3000):
        r = rng.random()
        if r < 0.03:
            lines.append(json.dumps({"text": f"doc {i % 50}", "nested": {"i": i}}))  # good, per record
        elif r < 0.05:
            lines.append("not json")
        else:
            lines.append(json.dumps({"text": f"doc {i % 50}", "i": i, "s": "\u00e9" * (i % 3)}, ensure_ascii=i % 2 == 0))
    path = write(tmp_path / "mixed.jsonl", "\n".join(lines) + "\n")
    good, bad = assert_same(path)
    assert len(good) + len(bad) == 3000


CSV_ROWS = (
    'id,text,lang,id\r\n'  # a repeated column name: the last value wins in meta
    '1,plain text,en,9\r\n'
    '2,"quoted, with comma",de,8\n'
    '3,"quoted ""quotes"" and\nnewline\r\nand crlf",fr,7\n'
    '4,"",xx,6\n'
    ',,,\n'
    '5,json specials " \\ \x01 \t tab,en,5\n'
    '6,fewer fields\n'
    '7\n'
    '\n'
    '8,more,fields,than,header\n'
    '9,stray"quote,en,4\n'
    '10,"after quote"x,en,3\n'
    '11,lone\rcr,en,2\n'
    '\ufeff12,bom at row start,en,1\n'
    '13,nul \x00 char,en,0\n'
    '14,non-ASCII \u00e9\u4e2d\U0001F600,ja,1\n'
    '15,last row without newline,en,2'
)


@pytest.mark.parametrize("chunk,window", [(None, None), (16, 8), (4096, 64)])
def test_csv_fast_path_matches_per_record_reader(tmp_path, monkeypatch, chunk, window):
    if chunk:
        monkeypatch.setattr(fast_csv, "FAST_CHUNK", chunk)
        monkeypatch.setattr(fast_csv, "SLOW_WINDOW", window)
    # undecodable bytes after the first 8 KiB (in the head, with the NUL, they would make a binary file)
    padding = b"".join(b"%d,padding row %d,en,0\n" % (100 + i, i) for i in range(400))
    data = CSV_ROWS.encode().replace(b"15,last", padding + b"16,bad \xff bytes,en,3\n15,last")
    path = write(tmp_path / "hostile.csv", codecs.BOM_UTF8 + data)
    good, bad = assert_same(path)
    assert {reason for _, reason, _, _ in bad} == {"missing_text_field", "ragged_row", "invalid_utf8"}
    ragged = {loc: detail for loc, reason, detail, _ in bad if reason == "ragged_row"}
    assert ragged["row:7"] == "2 fields, the header has 4 (a ',' inside a field?)"
    # fewer fields, one field, more fields than the header, and the two halves of the row a lone CR cut
    assert set(ragged) == {"row:7", "row:8", "row:10", "row:13", "row:14"}
    meta = {loc: m for loc, _, m in good}
    assert meta["row:1"] == '{"id": "9", "lang": "en"}'


def test_tsv_and_one_column_csv(tmp_path):
    tsv = write(tmp_path / "t.tsv", "body\tsrc\nhello\tx\n\"quoted\ttab\"\ty\nragged\n\nbad \xff\tz\n".encode("utf-8", "surrogateescape"))
    good, bad = assert_same(tsv, text_field="body")  # no quoting in a .tsv: the quoted tab splits the row
    assert [t for _, t, _ in good] == ["hello", "bad \xff"]
    assert [(loc, reason) for loc, reason, _, _ in bad] == [("row:2", "ragged_row"), ("row:3", "ragged_row"),
                                                            ("row:4", "missing_text_field")]
    assert bad[0][2] == "line 3: 3 fields, the header has 2 (a tab inside a field?)"
    good, bad = assert_same(tsv, text_field="body", tsv_quoting=True)  # quoting asked for: as CSV reads it
    assert [t for _, t, _ in good] == ["hello", "quoted\ttab", "bad \xff"]
    one = write(tmp_path / "one.csv", 'text\nfirst\n\n"quoted\nnewline"\n""\nwith,comma\nlast\n')
    good, bad = assert_same(one)
    assert [t for _, t, _ in good][:2] == ["first", "quoted\nnewline"]


def test_csv_long_file_with_rare_bad_rows_crosses_windows(tmp_path, monkeypatch):
    monkeypatch.setattr(fast_csv, "FAST_CHUNK", 2048)
    monkeypatch.setattr(fast_csv, "SLOW_WINDOW", 256)
    rng = random.Random(3)
    rows = ["text,n"]
    for i in range(4000):
        r = rng.random()
        rows.append(f"ragged {i}" if r < 0.01 else f'"multi\nline {i}",{i}' if r < 0.1 else f"row {i % 97},{i}")
    path = write(tmp_path / "long.csv", "\r\n".join(rows) + "\r\n")
    good, bad = assert_same(path)
    assert len(good) + len(bad) == 4000


@pytest.mark.parametrize("content", [b"", b"text\n", b"a,b\n1,2\n", b'"unterminated header\n'])
def test_csv_degenerate_files(tmp_path, content):
    assert_same(write(tmp_path / "d.csv", content))


def test_text_oversize_split_keeps_record_order(tmp_path):
    """An oversize line split into parts sits between its neighbours, as in the per-record reader (the
    fast path used to put the parts after the whole block, which changed which duplicate came first)."""
    long_line = " ".join(f"w{i}" for i in range(600))
    data = f"first\n{long_line}\nw0 w1\nlast\n".encode()
    path = write(tmp_path / "split.txt", data)
    good, _ = assert_same(path, max_document_bytes=1024, oversize="split")
    assert [loc for loc, _, _ in good][:3] == ["line:1", "line:2#1", "line:2#2"]


TEXT_LINES = [
    b"plain line", b"", b"   ", b"crlf line\r", b"two crs\r\r", b"a lone \r inside", b"\r",
    b"bad \xff utf8", b"caf\xe9 latin-1", "non-ASCII \u00e9\u4e2d\U0001F600 \u2028 \x7f".encode(),
    b"tab\tseparated", b"\x01soh and \x07bell", b"w " * 700, b"again plain line", b"plain line",
]


@pytest.mark.parametrize("small_chunks", [False, True])
@pytest.mark.parametrize("oversize", ["quarantine", "split"])
def test_text_lines_fast_path_matches_per_record_reader(tmp_path, monkeypatch, small_chunks, oversize):
    """Line mode: CRs, blank lines, undecodable lines, control characters, an oversize line (1,400 bytes
    > 1,024) and a last line without a newline give the per-line reader's records, locators and reasons,
    also when lines straddle the read chunks."""
    if small_chunks:
        monkeypatch.setattr(line_blocks, "FAST_CHUNK", 48)
    path = write(tmp_path / "hostile.txt", b"\n".join(TEXT_LINES * 3) + b"\nno final newline")
    good, bad = assert_same(path, txt_mode="line", max_document_bytes=1024, oversize=oversize)
    assert {reason for _, reason, _, _ in bad} == ({"invalid_utf8", "too_large"} if oversize == "quarantine"
                                                   else {"invalid_utf8"})
    assert good[0] == ("line:1", "plain line", None) and good[-1][1] == "no final newline"
    assert ("line:5", "two crs", None) in good


def test_tsv_quotes_are_text_so_no_line_folds_into_another(tmp_path):
    """Issue 44, item 3: 1,000 review sentences in SST-2's layout, 41 holding a double quote and one starting
    with one. Read as CSV quoting, the opening quote folded the next ~176 lines into one field; a .tsv is read
    without quoting, so every line is one record with its own label, on both paths."""
    rng = random.Random(44)
    rows = []
    for i in range(1000):
        words = " ".join(rng.choice(["a", "fine", "dull", "movie", "plot", "actors", "'s", ","]) for _ in range(8))
        if i == 0:
            words = '" ' + words  # one line starts with a quote, as SST-2's do
        elif i % 24 == 0:
            words = words + ' " quoted " bit'
        rows.append(f"{words} \t{i % 2}")
    assert sum('"' in r for r in rows) == 42
    path = write(tmp_path / "reviews.tsv", ("sentence\tlabel\n" + "\n".join(rows) + "\n").encode())
    good, bad = assert_same(path, text_field="sentence")
    assert bad == [] and len(good) == 1000
    assert [t for _, t, _ in good] == [r.split("\t")[0] for r in rows]
    assert [json.loads(m)["label"] for _, _, m in good] == [str(i % 2) for i in range(1000)]
    folded, _ = assert_same(path, text_field="sentence", tsv_quoting=True)  # what the old default did
    assert len(folded) < 1000
