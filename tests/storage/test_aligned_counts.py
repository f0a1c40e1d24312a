"""Line-aligned pair files that do not line up are refused before any work (issue 44, item 1): dropping 10 lines
from the middle of one side of a 3,000-pair corpus, or one stray carriage return inside a line (equal counts by
``wc -l``), used to train with every later pair shifted. The count is by the readers' own line rule (LF, CRLF,
a lone CR), after decompression and transcoding, and the one-line error names both counts."""

from __future__ import annotations

import gzip

import pytest

from corpusforge.storage.aligned import AlignedCounts, aligned_file, check_aligned_counts, count_aligned_lines
from corpusforge.storage.formats import text_lines
from corpusforge.storage.readers import SourceError


def pairs(n: int) -> tuple[list[str], list[str]]:
    return [f"Satz {i} auf Deutsch." for i in range(n)], [f"Sentence {i} in English." for i in range(n)]


def files(tmp_path, de: bytes, en: bytes, de_name="train.de", en_name="train.en"):
    (tmp_path / de_name).write_bytes(de)
    (tmp_path / en_name).write_bytes(en)
    return {"de": aligned_file(tmp_path / de_name, de_name), "en": aligned_file(tmp_path / en_name, en_name)}


def test_ten_lines_dropped_from_the_middle_of_one_side_are_refused_naming_both_counts(tmp_path):
    de, en = pairs(3000)
    shifted = en[:1500] + en[1510:]
    with pytest.raises(AlignedCounts) as caught:
        check_aligned_counts(files(tmp_path, ("\n".join(de) + "\n").encode(), ("\n".join(shifted) + "\n").encode()))
    message = str(caught.value)
    assert "\n" not in message and "train.de (de) has 3,000 lines" in message and "train.en (en) has 2,990" in message
    assert "carriage return" not in message  # nothing to blame on line ends here
    assert isinstance(caught.value, SourceError)  # the commands' one-line error, exit 2


def test_a_stray_carriage_return_inside_a_line_is_counted_as_the_reader_splits_and_named(tmp_path):
    de, en = pairs(2842)
    en[700] = "Sentence 700\rin English."  # `wc -l` still says 2,842 on both sides
    raw_en = ("\n".join(en) + "\n").encode()
    assert raw_en.count(b"\n") == 2842
    with pytest.raises(AlignedCounts, match=r"train\.en \(en\) has 2,843 lines.*train\.en holds 1 \(remove them"):
        check_aligned_counts(files(tmp_path, ("\n".join(de) + "\n").encode(), raw_en))


def test_line_ends_compression_and_utf16_do_not_change_the_count(tmp_path):
    de, en = pairs(500)
    crlf = ("\r\n".join(de) + "\r\n").encode()
    cr_only = "\r".join(en).encode()  # old Mac line ends, no end on the last line
    gz = gzip.compress(("\n".join(en)).encode())
    utf16 = ("\ufeff" + "\n".join(de) + "\n").encode("utf-16-le")
    assert count_aligned_lines((tmp_path / "a").write_bytes(crlf) and tmp_path / "a") == (500, 0)
    assert count_aligned_lines((tmp_path / "b").write_bytes(cr_only) and tmp_path / "b") == (500, 499)
    assert check_aligned_counts(files(tmp_path, crlf, gz, en_name="train.en.gz")) == {"de": 500, "en": 500}
    assert check_aligned_counts(files(tmp_path, utf16, crlf, de_name="u16.de")) == {"de": 500, "en": 500}
    # a CRLF split across two 1 MiB reads is one line end, not a lone CR
    long_line = "x" * ((1 << 20) - 1)
    (tmp_path / "c").write_bytes(f"{long_line}\r\nnext\r\n".encode())
    assert count_aligned_lines(tmp_path / "c") == (2, 0)


def test_text_lines_split_only_where_the_readers_do():
    assert text_lines("a\x0cb\u2028c\x85d\r\ne\rf\ng\n") == ["a\x0cb\u2028c\x85d", "e", "f", "g"]
    assert "a\x0cb".splitlines() == ["a", "b"]  # why not str.splitlines: it would shift a pair at a form feed
    assert text_lines("one\n\nthree") == ["one", "", "three"] and text_lines("") == []
