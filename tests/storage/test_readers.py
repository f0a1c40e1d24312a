"""Source discovery and raw record readers on hostile input (storage/readers.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from storage.readers import RAW_CAP, RawRecord, SourceError, SourceFile, discover_sources, read_records
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
        "from storage.readers import discover_sources\n"
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
