"""Records with named fields at the reader (issue 31, item 3): several text fields and labels from one row of a
CSV/TSV, JSON(L) or Parquet file, or from line ``i`` of each of several line-aligned files; a record with any bad
field is one quarantine record whose detail names the field. Expected records are written out by hand from the
bytes each test writes."""

from __future__ import annotations

import gzip
import json

import polars as pl
import pytest

from corpusforge.storage.hashing import sha256_file
from corpusforge.storage.aligned import aligned_file, read_aligned
from corpusforge.storage.readers import LabelSpec, ReaderConfig, SourceChanged, SourceFile, read_batches, read_records
from corpusforge.storage.records import FieldSpec, parse_label
from tests.conftest import write


def _pairs(tmp_path, de: bytes, en: bytes, cfg: ReaderConfig | None = None):
    a, b = write(tmp_path / "train.de", de), write(tmp_path / "train.en", en)
    files = {"de": aligned_file(a, a.name), "en": aligned_file(b, b.name)}
    cfg = cfg or ReaderConfig()
    return files, cfg, cfg.field_spec(("de", "en"))


def _summary(records) -> list[tuple]:
    return [(r.locator, r.fields) if r.ok else (r.locator, r.reason, r.detail) for r in records]


def test_line_aligned_files_are_one_record_per_line_and_bad_lines_quarantine_the_pair(tmp_path):
    de = b"Ein Hund.\r\nZwei\x07 Katzen.\n\xff kaputt\nleer\n" + b"x" * 2000 + b"\nfuenf\nsechs\nsieben\n"
    en = b"A dog.\nTwo cats.\nbroken\n\nshort\nfive\n"
    files, cfg, spec = _pairs(tmp_path, de, en, ReaderConfig(max_document_bytes=1024))
    got = _summary(read_aligned("train.de+train.en", files, cfg, spec=spec, batches=False))
    assert got == [
        ("line:1", {"de": "Ein Hund.", "en": "A dog."}),  # CRLF in one file only
        ("line:2", {"de": "Zwei\x07 Katzen.", "en": "Two cats."}),  # control characters are the shard's to remove
        ("line:3", "invalid_utf8", "field 'de' (train.de): invalid UTF-8 at byte 0: b'\\xff ka'"),
        ("line:4", {"de": "leer", "en": ""}),  # an empty side is text; the empty filter drops it, naming the field
        ("line:5", "too_large", "field 'de' (train.de): 2000 bytes > max_document_bytes 1024"),
        ("line:6", {"de": "fuenf", "en": "five"}),
        ("line:7", "missing_pair_line", "field 'de' (train.de) has line 7, field 'en' (train.en) ended at line 6"),
        ("line:8", "missing_pair_line", "field 'de' (train.de) has line 8, field 'en' (train.en) ended at line 6"),
    ]
    # batched: the same good records in one frame, a column per field
    items = list(read_aligned("train.de+train.en", files, cfg, spec=spec))
    frames = [i.frame() for i in items if not hasattr(i, "reason")]
    assert len(frames) == 1 and frames[0].columns == ["locator", "de", "en", "meta"]
    assert frames[0]["de"].to_list() == ["Ein Hund.", "Zwei\x07 Katzen.", "leer", "fuenf"]
    assert [i.reason for i in items if hasattr(i, "reason")] == ["invalid_utf8", "too_large"] + ["missing_pair_line"] * 2


def test_reader_fields_name_the_aligned_keys_and_the_detail_says_which_field(tmp_path):
    cfg = ReaderConfig(fields={"src": "de", "tgt": "en"})
    files, cfg, spec = _pairs(tmp_path, b"eins\nzwei\n", b"one\n\xc3\n", cfg)
    got = _summary(read_aligned("p", files, cfg, spec=spec, batches=False))
    assert got == [("line:1", {"src": "eins", "tgt": "one"}),
                   ("line:2", "invalid_utf8", "field 'tgt' (train.en): invalid UTF-8 at byte 0: b'\\xc3'")]


def test_aligned_files_compressed_utf16_and_broken(tmp_path):
    de_text = "Grüße\nzwei\n"
    en_utf16 = "\ufeffgreetings\ntwo\n".encode("utf-16-le")
    a = write(tmp_path / "c.de.gz", gzip.compress(de_text.encode(), mtime=0))
    b = write(tmp_path / "c.en", en_utf16)
    files, cfg = {"de": aligned_file(a, a.name), "en": aligned_file(b, b.name)}, ReaderConfig()
    spec = cfg.field_spec(("de", "en"))
    got = _summary(read_aligned("p", files, cfg, spec=spec, batches=False))
    assert got == [("line:1", {"de": "Grüße", "en": "greetings"}), ("line:2", {"de": "zwei", "en": "two"})]
    # a binary side, or an empty one, makes the whole source one record naming the field
    for en, reason in ((b"\x89PNG\x00\x00\x00\x00\xff", "binary_file"), (b"", "empty_file")):
        files, cfg, spec = _pairs(tmp_path, b"eins\n", en)
        (rec,) = list(read_aligned("p", files, cfg, spec=spec, batches=False))
        assert (rec.locator, rec.reason) == ("file", reason) and rec.detail.startswith("field 'en' (train.en): ")
    # a truncated .gz side: its lines so far, then one corrupt_compressed record naming the file
    body = "".join(f"line {i}\n" for i in range(5000)).encode()
    a = write(tmp_path / "a.de.gz", gzip.compress(body, mtime=0)[:-4000])
    b = write(tmp_path / "b.en", body)
    files = {"de": aligned_file(a, a.name), "en": aligned_file(b, b.name)}
    recs = list(read_aligned("p", files, cfg, spec=spec, batches=False))
    assert recs[-1].reason == "corrupt_compressed" and recs[-1].detail.startswith("a.de.gz: ")
    assert all(r.ok for r in recs[:-1]) and 0 < len(recs) - 1 < 5000


def test_aligned_files_are_checked_against_their_digests(tmp_path):
    files, cfg, spec = _pairs(tmp_path, b"eins\nzwei\n", b"one\ntwo\n")
    digests = {k: sha256_file(f.path) for k, f in files.items()}
    assert len(list(read_aligned("p", files, cfg, spec=spec, expect_sha256=digests, batches=False))) == 2
    write(files["en"].path, b"one\nthree\n")
    with pytest.raises(SourceChanged, match=r"^p: train.en: its bytes changed after it was hashed"):
        list(read_aligned("p", files, cfg, spec=spec, expect_sha256=digests))


def test_tsv_rows_with_named_fields_and_labels(tmp_path):
    cfg = ReaderConfig(fields={"src": "de", "tgt": "en"}, labels={"label": "y"})
    tsv = write(tmp_path / "t.tsv", b"de\ten\ty\tnote\n"
                b"hallo\thello\t1\tok\n"  # 1 good; note goes to meta
                b"nur deutsch\n"  # 2 ragged: no en column, quarantined whole
                b"gut\t\xff\t0\tx\n"  # 3 undecodable en
                b"a\tb\tpos\tx\n"  # 4 a text label where an int is declared
                b"a\tb\t\tx\n"  # 5 no label
                b"a\tb\t-7\tx\n")  # 6 good, a negative label
    got = _summary(read_records(SourceFile("t.tsv", tsv), cfg, spec=cfg.field_spec()))
    assert got == [
        ("row:1", {"src": "hallo", "tgt": "hello", "label": 1}),
        ("row:2", "ragged_row", "line 3: 1 fields, the header has 4 (a tab inside a field?)"),
        ("row:3", "invalid_utf8", "field 'tgt' ('en'): undecodable bytes"),
        ("row:4", "bad_label", "label 'label' ('y'): 'pos' is not an integer; a text label needs type: str"),
        ("row:5", "missing_label", "label 'label' ('y'): empty"),
        ("row:6", {"src": "a", "tgt": "b", "label": -7}),
    ]
    first = next(read_records(SourceFile("t.tsv", tsv), cfg, spec=cfg.field_spec()))
    assert first.meta == {"note": "ok"}
    # a header without a named column: the file is one record naming it
    bad = write(tmp_path / "u.csv", b"de,fr\nhallo,salut\n")
    (rec,) = list(read_records(SourceFile("u.csv", bad), cfg, spec=cfg.field_spec()))
    assert (rec.locator, rec.reason) == ("header", "missing_text_field") and "no column 'en'" in rec.detail
    # the batched reader gives the same good records, the label an Int64 column
    (frame,) = [b.frame() for b in read_batches(SourceFile("t.tsv", tsv), cfg, spec=cfg.field_spec())
                if not hasattr(b, "reason")]
    assert frame.schema["label"] == pl.Int64 and frame["label"].to_list() == [1, -7]
    assert frame.columns == ["locator", "src", "tgt", "label", "meta"]


def test_jsonl_and_json_with_fields_labels_and_meta(tmp_path):
    cfg = ReaderConfig(fields={"prompt": "prompt", "chosen": "pair.chosen", "rejected": "pair.rejected"},
                       labels={"topic": LabelSpec("topic", "str")})
    rows = [
        {"prompt": "2+2?", "pair": {"chosen": "4", "rejected": "5", "score": 1}, "topic": "math", "id": 7},
        {"prompt": "hi", "pair": {"chosen": "hello"}, "topic": "chat"},  # no rejected
        {"prompt": "hi", "pair": {"chosen": "hello", "rejected": 3}, "topic": "chat"},  # rejected not text
        {"prompt": "x", "pair": {"chosen": "y", "rejected": "z"}, "topic": 12},  # an int label as str: "12"
        {"prompt": "x", "pair": {"chosen": "y", "rejected": "z"}, "topic": 1.5},  # not a string label
    ]
    lines = [json.dumps(r) for r in rows]
    jsonl = write(tmp_path / "p.jsonl", "\n".join(lines[:2]) + "\n\n" + "\n".join(lines[2:]) + "\n")
    got = _summary(read_records(SourceFile("p.jsonl", jsonl), cfg, spec=cfg.field_spec()))
    assert got == [
        ("line:1", {"prompt": "2+2?", "chosen": "4", "rejected": "5", "topic": "math"}),
        ("line:2", "missing_text_field", "field 'rejected' ('pair.rejected'): absent"),
        ("line:3", {"prompt": "", "chosen": "", "rejected": "", "topic": None}),  # blank: the empty filter's
        ("line:4", "text_not_string", "field 'rejected' ('pair.rejected'): int"),
        ("line:5", {"prompt": "x", "chosen": "y", "rejected": "z", "topic": "12"}),
        ("line:6", "bad_label", "label 'topic': 1.5 is not a string (float)"),
    ]
    first = next(read_records(SourceFile("p.jsonl", jsonl), cfg, spec=cfg.field_spec()))
    assert first.meta == {"pair": {"score": 1}, "id": 7}  # what the fields do not read stays as meta
    array = write(tmp_path / "p.json", "[" + ",".join(lines) + "]")
    from_array = _summary(read_records(SourceFile("p.json", array), cfg, spec=cfg.field_spec()))
    assert [g[1:] for g in from_array] == [g[1:] for i, g in enumerate(got) if i != 2]


def test_parquet_with_fields_keeps_integer_labels(tmp_path):
    path = tmp_path / "s.parquet"
    pl.DataFrame({"sentence": ["good", "bad", None, "x" * 3000], "label": [1, 0, 1, 1], "idx": [0, 1, 2, 3]},
                 schema={"sentence": pl.String, "label": pl.Int8, "idx": pl.Int64}).write_parquet(path)
    cfg = ReaderConfig(fields={"text": "sentence"}, labels={"label": "label"}, max_document_bytes=1024)
    got = _summary(read_records(SourceFile("s.parquet", path), cfg, spec=cfg.field_spec()))
    assert got == [("row:1", {"text": "good", "label": 1}), ("row:2", {"text": "bad", "label": 0}),
                   ("row:3", "missing_text_field", "field 'text' ('sentence'): null"),
                   ("row:4", "too_large", "field 'text': 3000 bytes > max_document_bytes 1024")]
    assert all(isinstance(r.fields["label"], int) for r in read_records(SourceFile("s.parquet", path), cfg,
                                                                       spec=cfg.field_spec()) if r.ok)


def test_plain_text_files_have_no_named_fields(tmp_path):
    cfg = ReaderConfig(fields={"src": "de", "tgt": "en"})
    path = write(tmp_path / "a.txt", "one\ntwo\n")
    (rec,) = list(read_records(SourceFile("a.txt", path), cfg, spec=cfg.field_spec()))
    assert (rec.locator, rec.reason) == ("file", "unsupported_format") and "line-aligned" in rec.detail


def test_labels_alone_read_the_text_field_and_their_two_forms_are_one_config():
    from corpusforge.tasks.config import from_dict, identity

    short = from_dict(ReaderConfig, {"labels": {"label": "y"}})
    long = from_dict(ReaderConfig, {"labels": {"label": {"column": "y", "type": "int"}}})
    assert short == long and identity(short) == identity(long)
    assert short.field_spec() == FieldSpec((("text", "text"),), (("label", "y", "int"),))
    assert from_dict(ReaderConfig, {"labels": {"label": {"column": "y", "type": "str"}}}).labels["label"].type == "str"
    assert "fields" not in identity(ReaderConfig()) and "labels" not in identity(ReaderConfig())  # ids as before
    assert ReaderConfig().field_spec() is None  # no fields: one text per record, as before
    for bad, match in (({"fields": {"doc_id": "x"}}, "every corpus has"), ({"fields": {"1x": "x"}}, "not a field name"),
                       ({"fields": {"_key": "x"}}, "not a field name"),
                       ({"fields": {"a": "x"}, "labels": {"a": "y"}}, "text or a label"),
                       ({"fields": {"src": "x"}, "labels": {"src_ids": "y"}}, "token ids column")):
        with pytest.raises(ValueError, match=match):
            ReaderConfig(**bad)


@pytest.mark.parametrize(("value", "kind", "want"), [
    (3, "int", (True, 3)), (" 12 ", "int", (True, 12)), ("+4", "int", (True, 4)), (True, "int", (False, None)),
    (1.0, "int", (False, None)), ("1e3", "int", (False, None)), ("+-5", "int", (False, None)),
    (2**63, "int", (False, None)), ("pos", "str", (True, "pos")), (5, "str", (True, "5")), (None, "str", (False, None)),
])
def test_parse_label(value, kind, want):
    ok, got = parse_label(value, kind)
    assert ok is want[0] and (not ok or got == want[1])
