"""Source discovery and raw record readers on hostile input (storage/readers.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from corpusforge.storage.readers import RAW_CAP, RawRecord, SourceError, SourceFile, discover_sources, read_records
from tests.conftest import REPO, write


def _by_name(discovery):
    return {sf.name: sf for sf in discovery.files}


def _records(path: Path, **kwargs) -> list[RawRecord]:
    found = discover_sources([path])
    assert len(found.files) == 1
    return list(read_records(found.files[0], **kwargs))


def _no_replacement_chars(records):
    for rec in records:
        assert rec.text is None or "\ufffd" not in rec.text


# ----------------------------------------------------------------------------- discovery


def test_discover_sorted_names_nested_and_hidden(tmp_path):
    root = tmp_path / "corpus"
    for rel in ["b.txt", "a.jsonl", "sub/z.md", "sub/deeper/y.txt", "sub/a.ndjson", "A.text"]:
        write(root / rel, "x\n")
    write(root / ".hidden.txt", "secret\n")
    write(root / ".git" / "config.txt", "secret\n")
    write(root / "sub" / ".cache.txt", "secret\n")
    found = discover_sources([root])
    names = [sf.name for sf in found.files]
    assert names == [
        "corpus/A.text",
        "corpus/a.jsonl",
        "corpus/b.txt",
        "corpus/sub/a.ndjson",
        "corpus/sub/deeper/y.txt",
        "corpus/sub/z.md",
    ]
    assert all(sf.refused is None for sf in found.files)
    assert sorted(found.skipped_hidden) == ["corpus/.git", "corpus/.hidden.txt", "corpus/sub/.cache.txt"]
    by = _by_name(found)
    assert by["corpus/sub/deeper/y.txt"].path.resolve() == (root / "sub/deeper/y.txt").resolve()
    assert by["corpus/a.jsonl"].format == "jsonl" and by["corpus/sub/z.md"].format == "txt"


def test_discover_file_named_directly_uses_base_name(tmp_path):
    path = write(tmp_path / "deep" / "dir" / "one.txt", "x\n")
    found = discover_sources([path])
    assert [sf.name for sf in found.files] == ["one.txt"]


def test_unsupported_suffix_refused(tmp_path):
    root = tmp_path / "src"
    write(root / "doc.pdf", b"%PDF-1.4")
    write(root / "noext", b"x")
    write(root / "ok.txt", b"x")
    by = _by_name(discover_sources([root]))
    assert by["src/doc.pdf"].refused == "unsupported_format"
    assert by["src/noext"].refused == "unsupported_format"
    assert by["src/ok.txt"].refused is None


def test_symlink_escaping_the_root_is_refused(tmp_path):
    root = tmp_path / "data"
    write(root / "ok.txt", "x\n")
    outside = write(tmp_path / "secret.txt", "top secret\n")
    # A sibling whose name merely starts with the root's name is still outside it.
    sibling = write(tmp_path / "data_other" / "f.txt", "also secret\n")
    (root / "escape.txt").symlink_to(outside)
    (root / "escape2.txt").symlink_to(sibling)
    (root / "escape_dir").symlink_to(tmp_path / "data_other", target_is_directory=True)
    by = _by_name(discover_sources([root]))
    assert by["data/escape.txt"].refused == "symlink_escape"
    assert by["data/escape2.txt"].refused == "symlink_escape"
    assert by["data/escape_dir"].refused == "symlink_escape"
    assert by["data/ok.txt"].refused is None
    # Nothing from outside was walked into.
    assert not any(name.startswith("data/escape_dir/") for name in by)
    recs = list(read_records(by["data/escape.txt"]))
    assert len(recs) == 1 and recs[0].reason == "symlink_escape" and recs[0].text is None


def test_symlink_inside_the_root_is_accepted(tmp_path):
    root = tmp_path / "data"
    write(root / "real" / "doc.txt", "hello\n")
    (root / "alias.txt").symlink_to(root / "real" / "doc.txt")
    (root / "rel_alias.txt").symlink_to(Path("real") / "doc.txt")
    by = _by_name(discover_sources([root]))
    for name in ("data/alias.txt", "data/rel_alias.txt", "data/real/doc.txt"):
        assert by[name].refused is None, name
        assert [r.text for r in read_records(by[name])] == ["hello"]


def test_symlink_loop_is_refused_and_discovery_terminates(tmp_path):
    root = tmp_path / "dir"
    write(root / "sub" / "f.txt", "x\n")
    (root / "sub" / "loop").symlink_to(root, target_is_directory=True)
    (root / "sub" / "self").symlink_to(root / "sub", target_is_directory=True)
    # Run in a child with a deadline so that a regression fails the test instead of hanging the suite.
    script = (
        "import json, sys\n"
        "from corpusforge.storage.readers import discover_sources\n"
        "print(json.dumps({sf.name: sf.refused for sf in discover_sources([sys.argv[1]]).files}))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    try:
        proc = subprocess.run(
            [sys.executable, "-c", script, str(root)], capture_output=True, env=env, timeout=20, check=True
        )
    except subprocess.TimeoutExpired:
        pytest.fail("discover_sources did not terminate on a symlink loop")
    assert json.loads(proc.stdout) == {
        "dir/sub/f.txt": None,
        "dir/sub/loop": "symlink_loop",
        "dir/sub/self": "symlink_loop",
    }


def test_dangling_symlink_is_unreadable(tmp_path):
    root = tmp_path / "data"
    write(root / "ok.txt", "x\n")
    (root / "gone.txt").symlink_to(root / "was_here.txt")
    by = _by_name(discover_sources([root]))
    assert by["data/gone.txt"].refused == "unreadable"
    recs = list(read_records(by["data/gone.txt"]))
    assert [(r.locator, r.reason) for r in recs] == [("file", "unreadable")]


def test_missing_source_raises(tmp_path):
    with pytest.raises(SourceError):
        discover_sources([tmp_path / "nope"])


def test_duplicate_names_across_sources_raise(tmp_path):
    write(tmp_path / "one" / "data" / "a.txt", "x\n")
    write(tmp_path / "two" / "data" / "a.txt", "y\n")
    with pytest.raises(SourceError):
        discover_sources([tmp_path / "one" / "data", tmp_path / "two" / "data"])
    with pytest.raises(SourceError):
        discover_sources([tmp_path / "one" / "data" / "a.txt", tmp_path / "two" / "data" / "a.txt"])
    # Distinct names from distinct sources are fine.
    write(tmp_path / "two" / "data" / "b.txt", "z\n")
    found = discover_sources([tmp_path / "one" / "data" / "a.txt", tmp_path / "two" / "data" / "b.txt"])
    assert [sf.name for sf in found.files] == ["a.txt", "b.txt"]


# ----------------------------------------------------------------------------- text readers


def test_line_mode_locators_crlf_and_last_line(tmp_path):
    path = write(tmp_path / "t.txt", b"first\r\nsecond\n\nfourth\r\nlast without newline")
    recs = _records(path, txt_mode="line")
    assert [(r.locator, r.text) for r in recs] == [
        ("line:1", "first"),
        ("line:2", "second"),
        ("line:3", ""),
        ("line:4", "fourth"),
        ("line:5", "last without newline"),
    ]
    assert all(r.ok and "\r" not in r.text for r in recs)


def test_paragraph_mode_locators(tmp_path):
    data = b"p1 a\r\np1 b\r\n\r\n\r\np2\n   \np3 a\np3 b\np3 c"
    path = write(tmp_path / "t.txt", data)
    recs = _records(path, txt_mode="paragraph")
    assert [(r.locator, r.text) for r in recs] == [
        ("lines:1-2", "p1 a\np1 b"),
        ("lines:5-5", "p2"),
        ("lines:7-9", "p3 a\np3 b\np3 c"),
    ]
    assert all(r.ok for r in recs)


def _both_paths(path, **kw):
    """(locator, text or reason) from the per-record reader and from the batched fast path (must agree)."""
    from corpusforge.storage.readers import ReaderConfig, read_batches

    sf = discover_sources([path]).files[0]
    slow = [(r.locator, r.text if r.ok else r.reason) for r in read_records(sf, ReaderConfig(**kw))]
    fast = []
    for item in read_batches(sf, ReaderConfig(**kw)):
        if isinstance(item, RawRecord):
            fast.append((item.locator, item.text if item.ok else item.reason))
        else:
            fast += list(zip(item.locators, item.texts))
    assert sorted(fast) == sorted(slow)
    return slow


def test_cr_only_and_mixed_line_ends_split_lines(tmp_path):
    """Old Mac files end lines with a lone CR: each is a line, as LF and CRLF are (the whole file was one
    document). A CRLF cut across two reads of the stream is still one line end."""
    mac = write(tmp_path / "mac.txt", b"one\rtwo\r\rfour\r")
    assert _both_paths(mac, txt_mode="line") == [("line:1", "one"), ("line:2", "two"), ("line:3", ""),
                                                 ("line:4", "four")]
    assert _both_paths(mac, txt_mode="paragraph") == [("lines:1-2", "one\ntwo"), ("lines:4-4", "four")]
    mixed = write(tmp_path / "mixed.txt", b"a\r\nb\nc\rd")
    assert _both_paths(mixed, txt_mode="line") == [("line:1", "a"), ("line:2", "b"), ("line:3", "c"), ("line:4", "d")]
    big = write(tmp_path / "big.txt", b"".join(b"w%d\r\n" % i if i % 3 else b"w%d\r" % i for i in range(200_000)))
    recs = _both_paths(big, txt_mode="line")
    assert recs == [(f"line:{i + 1}", f"w{i}") for i in range(200_000)]


def test_cr_line_ends_in_compressed_and_wide_files(tmp_path):
    import gzip

    data = "α\rβ\r\nγ\r"
    gz = write(tmp_path / "m.txt.gz", gzip.compress(data.encode("utf-8")))
    wide = write(tmp_path / "w.txt", "\ufeff".encode("utf-16-le") + data.encode("utf-16-le"))
    for path in (gz, wide):
        assert _both_paths(path, txt_mode="line") == [("line:1", "α"), ("line:2", "β"), ("line:3", "γ")]


def _zstd_frames(lines: list[str], per_frame: int) -> bytes:
    zstd = pytest.importorskip("zstandard")
    cctx = zstd.ZstdCompressor(level=3, write_checksum=True)
    return b"".join(cctx.compress("".join(lines[i:i + per_frame]).encode()) for i in range(0, len(lines), per_frame))


@pytest.mark.parametrize("cut", ["mid_frame", "in_checksum", "in_header"])
def test_truncated_zstd_is_corrupt_compressed_not_a_silent_end(tmp_path, cut):
    """The first half of a .zst file was read as if it were the whole file (records lost without a word).
    Whatever frame the cut lands in, the reader keeps the lines of the complete frames and then reports
    corrupt_compressed, as for gzip, bz2 and xz."""
    lines = [f"line {i}\n" for i in range(20_000)]
    data = _zstd_frames(lines, 2_000)  # 10 frames
    whole = write(tmp_path / "whole.txt.zst", data)
    assert [r.text for r in _records(whole, txt_mode="line")] == [ln.rstrip("\n") for ln in lines]
    frame = len(_zstd_frames(lines[:2_000], 2_000))
    end = {"mid_frame": len(data) // 2, "in_checksum": len(data) - 2, "in_header": frame * 5 + 3}[cut]
    path = write(tmp_path / "cut.txt.zst", data[:end])
    for recs in (_both_paths(path, txt_mode="line"),):  # both readers keep the same records
        good = [r for r in recs if r[1] != "corrupt_compressed"]
        bad = [r for r in recs if r[1] == "corrupt_compressed"]
        assert len(bad) == 1 and bad[0][0] == f"after-record:{len(good)}", recs[-3:]
        assert good == [(f"line:{i + 1}", f"line {i}") for i in range(len(good))]
        # a cut inside the last checksum loses no line, but the file is still reported as broken
        assert len(good) == 20_000 if cut == "in_checksum" else 0 < len(good) < 20_000


def test_file_mode(tmp_path):
    data = "line one\nzwei – drei ✓\nlast"
    path = write(tmp_path / "t.md", data)
    recs = _records(path, txt_mode="file")
    assert [(r.locator, r.text, r.reason) for r in recs] == [("file", data, None)]


def test_unknown_txt_mode_rejected(tmp_path):
    sf = discover_sources([write(tmp_path / "t.txt", "x\n")]).files[0]
    with pytest.raises(ValueError):
        list(read_records(sf, txt_mode="sentence"))


def test_invalid_utf8_line_is_quarantined(tmp_path):
    bad = b"caf\xe9 latin-1 here"
    path = write(tmp_path / "t.txt", b"good one\n" + bad + b"\n\xc3\xa9t\xc3\xa9\n")
    recs = _records(path, txt_mode="line")
    assert [r.locator for r in recs] == ["line:1", "line:2", "line:3"]
    assert recs[0].text == "good one" and recs[0].ok
    assert recs[1].reason == "invalid_utf8" and recs[1].text is None and not recs[1].ok
    assert recs[1].raw == bad
    assert recs[2].text == "été"
    _no_replacement_chars(recs)


def test_invalid_utf8_in_every_mode_never_becomes_text(tmp_path):
    path = write(tmp_path / "t.txt", b"ok\n\xff\xfe bad\n\nok again\n")
    for mode in ("line", "paragraph", "file"):
        recs = _records(path, txt_mode=mode)
        _no_replacement_chars(recs)
        assert any(r.reason == "invalid_utf8" for r in recs), mode
        assert all(r.raw is not None and b"\xff\xfe" in r.raw for r in recs if r.reason == "invalid_utf8")


def test_raw_bytes_are_capped(tmp_path):
    bad = b"\xff" + b"x" * (RAW_CAP * 2)
    recs = _records(write(tmp_path / "t.txt", bad + b"\n"), txt_mode="line")
    assert recs[0].reason == "invalid_utf8"
    assert recs[0].raw == bad[:RAW_CAP]


def test_binary_file(tmp_path):
    data = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x01\x00" + bytes(range(256)) * 4
    recs = _records(write(tmp_path / "b.txt", data))
    assert len(recs) == 1
    assert (recs[0].locator, recs[0].reason, recs[0].text) == ("file", "binary_file", None)
    assert recs[0].raw == data


def test_stray_nul_in_text_is_not_binary(tmp_path):
    # one NUL in a page of UTF-8 text is a control character to strip (the shard step counts it),
    # not evidence of a binary file
    data = ("plain text line\n" * 40).encode() + b"with a stray \x00 nul\n"
    recs = _records(write(tmp_path / "t.txt", data), txt_mode="line")
    assert len(recs) == 41 and all(r.ok for r in recs)
    assert recs[-1].text == "with a stray \x00 nul"


def test_empty_file(tmp_path):
    for mode in ("line", "paragraph", "file"):
        recs = _records(write(tmp_path / "e.txt", b""), txt_mode=mode)
        assert [(r.locator, r.reason) for r in recs] == [("file", "empty_file")], mode


def test_whitespace_only_file(tmp_path):
    path = write(tmp_path / "w.txt", b"  \n\t\n\r\n \t ")
    para = _records(path, txt_mode="paragraph")
    assert [(r.locator, r.reason) for r in para] == [("file", "no_records")]
    whole = _records(path, txt_mode="file")
    assert [(r.locator, r.reason) for r in whole] == [("file", "no_records")]
    lines = _records(path, txt_mode="line")
    assert [(r.locator, r.text, r.reason) for r in lines] == [
        ("line:1", "  ", None),
        ("line:2", "\t", None),
        ("line:3", "", None),
        ("line:4", " \t ", None),
    ]


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0, reason="root can read files without read permission")
def test_unreadable_file(tmp_path):
    path = write(tmp_path / "locked.txt", "secret\n")
    sf = discover_sources([path]).files[0]
    path.chmod(0)
    try:
        recs = list(read_records(sf))
    finally:
        path.chmod(0o644)
    assert len(recs) == 1
    assert recs[0].reason == "unreadable" and recs[0].text is None


def test_file_that_vanished_or_changed_kind_after_discovery_is_unreadable(tmp_path):
    """Exercises the OSError path even when running as root: discovery and reading are separate steps."""
    gone = write(tmp_path / "src" / "gone.txt", "x\n")
    now_dir = write(tmp_path / "src" / "now_dir.txt", "x\n")
    by = _by_name(discover_sources([tmp_path / "src"]))
    gone.unlink()
    now_dir.unlink()
    now_dir.mkdir()
    for name in ("src/gone.txt", "src/now_dir.txt"):
        recs = list(read_records(by[name]))
        assert len(recs) == 1, name
        assert recs[0].reason == "unreadable" and recs[0].text is None, name


@pytest.mark.parametrize("reason", ["symlink_escape", "symlink_loop", "unsupported_format", "unreadable"])
def test_refused_source_yields_exactly_one_record(tmp_path, reason):
    path = write(tmp_path / "real.txt", "this content must not be read\n")
    sf = SourceFile("x/real.txt", path, refused=reason, detail="because")
    recs = list(read_records(sf, txt_mode="line"))
    assert len(recs) == 1
    assert recs[0].reason == reason and recs[0].detail == "because"
    assert recs[0].text is None and not recs[0].ok


# ----------------------------------------------------------------------------- JSONL


def test_jsonl_hostile_lines(tmp_path):
    lines = [
        b'{"text": "good", "id": 7, "tags": ["a"]}',  # 1 good, other fields -> meta
        b'{"text": "broken"',  # 2 invalid JSON
        b'["text", "in", "array"]',  # 3 not an object
        b'{"body": "no text field"}',  # 4 missing field
        b'{"text": 42}',  # 5 text not a string
        b"",  # 6 blank line
        b'{"text": null}',  # 7 text not a string
        b'"just a string"',  # 8 not an object
        b'{"text": "caf\xe9"}',  # 9 invalid UTF-8
        b'{"text": "second \\u00e9 good", "src": {"k": 1}}\r',  # 10 good, CRLF
        b'{"text": "no trailing newline"}',  # 11 good, last line
    ]
    path = write(tmp_path / "d.jsonl", b"\n".join(lines))
    recs = _records(path)
    assert len(recs) == len(lines)
    assert [r.locator for r in recs] == [f"line:{i}" for i in range(1, len(lines) + 1)]
    got = [(r.reason, r.text) for r in recs]
    assert got == [
        (None, "good"),
        ("invalid_json", None),
        ("not_an_object", None),
        ("missing_text_field", None),
        ("text_not_string", None),
        (None, ""),
        ("text_not_string", None),
        ("not_an_object", None),
        ("invalid_utf8", None),
        (None, "second é good"),
        (None, "no trailing newline"),
    ]
    assert recs[0].meta == {"id": 7, "tags": ["a"]}
    assert recs[9].meta == {"src": {"k": 1}}
    for i, rec in enumerate(recs):
        if not rec.ok:
            assert rec.raw == lines[i].rstrip(b"\r"), rec.locator
    _no_replacement_chars(recs)


def test_jsonl_custom_text_field(tmp_path):
    lines = [
        json.dumps({"content": "uses content", "text": "goes to meta"}),
        json.dumps({"text": "no content field"}),
    ]
    path = write(tmp_path / "d.ndjson", "\n".join(lines) + "\n")
    recs = _records(path, text_field="content")
    assert len(recs) == 2
    assert (recs[0].text, recs[0].meta) == ("uses content", {"text": "goes to meta"})
    assert recs[1].reason == "missing_text_field"


def test_jsonl_lone_surrogate_never_becomes_text(tmp_path):
    """A JSON escape for a lone surrogate decodes to a str that is not valid Unicode text.

    The module promises that nothing undecodable becomes text; such a string cannot be encoded as
    UTF-8 (Parquet writing fails on it), so it must be quarantined rather than yielded as text.
    """
    path = write(tmp_path / "s.jsonl", b'{"text": "ok"}\n{"text": "bad \\ud800 half pair"}\n')
    recs = _records(path)
    assert len(recs) == 2 and recs[0].text == "ok"
    assert not recs[1].ok, f"lone surrogate yielded as text: {recs[1].text!r}"
    assert recs[1].text is None and recs[1].raw is not None


@pytest.mark.parametrize("suffix", [".txt.gz", ".jsonl.gz", ".csv.gz"])
def test_fast_paths_keep_the_records_before_a_cut(tmp_path, suffix):
    """The batched readers read 8 MiB at a time; a cut in the stream must not drop the records decoded
    before it (they did: the whole read was lost with the error), so both readers keep the same ones."""
    import gzip

    if suffix == ".txt.gz":
        body = "".join(f"line {i}\n" for i in range(50_000))
    elif suffix == ".jsonl.gz":
        body = "".join(json.dumps({"text": f"line {i}"}) + "\n" for i in range(50_000))
    else:
        body = "text,n\n" + "".join(f"line {i},{i}\n" for i in range(50_000))
    data = gzip.compress(body.encode(), mtime=0)
    path = write(tmp_path / f"cut{suffix}", data[: len(data) * 3 // 4])
    recs = _both_paths(path, txt_mode="line")
    good = [r for r in recs if r[1] != "corrupt_compressed"]
    assert recs[-1] == (f"after-record:{len(good)}", "corrupt_compressed")
    assert len(good) > 30_000 and [t for _, t in good] == [f"line {i}" for i in range(len(good))]
