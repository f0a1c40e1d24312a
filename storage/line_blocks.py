"""Line-oriented fast paths: whole chunks decoded and split at once instead of one Python step per line.

:func:`line_blocks` cuts a stream into blocks of decoded lines (8 MiB at a time) and hands every line it
cannot decode, and any line too long to hold, to the caller separately. The text reader (line mode,
:func:`fast_lines`) and the JSONL reader (``corpusforge.storage.fast_jsonl``) both build on it; each sends the lines
its vectorized code cannot prove it handles exactly like the per-record reader through that reader, so
the two paths give the same records, locators and reasons (tests/storage/test_fast_paths.py).

Record order is kept: a block's good records, whether the vectorized code or the per-record reader made
them, come out in line order (first-occurrence dedup depends on it).
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterator

from corpusforge.storage.compression import Chunked, CountingReader
from corpusforge.storage.records import RawRecord, RecordBatch

FAST_CHUNK = 8 << 20

# What line_blocks yields: (kind, lines before this piece, payload)
TEXT, BYTES, REST = "text", "bytes", "rest"


def line_blocks(stream: io.BufferedReader, limit: int) -> Iterator[tuple[str, int, object]]:
    """Split ``stream`` into pieces, in order:

    - ``("text", n, block)``: lines ``n+1 ...`` decoded, joined by LF (no final LF; CRs still there);
    - ``("bytes", n, data)``: line ``n+1`` alone, not valid UTF-8 (``data`` ends with LF);
    - ``("rest", n, stream)``: a line so long that no LF is in sight: the rest of the file, whose first
      line is ``n+1``, for a bounded per-record reader. Nothing comes after it.

    Memory is bounded by the chunk size plus the longest line (up to ``2 * limit + FAST_CHUNK``).
    """
    carry = b""
    lineno = 0
    chunks = Chunked(stream)
    while True:
        chunk = chunks.read(FAST_CHUNK)
        data = carry + chunk
        if not chunk:
            if data:  # the last line has no newline
                yield from _decoded_lines(data, lineno)
            return
        cut = data.rfind(b"\n")
        if cut < 0:
            if len(data) > 2 * limit + FAST_CHUNK:  # a huge line: the rest goes through the bounded path
                yield REST, lineno, io.BufferedReader(CountingReader(data, stream, "file"))
                return
            carry = data
            continue
        body, carry = data[:cut], data[cut + 1:]
        yield from _decoded_lines(body, lineno, final_newline=True)
        lineno += body.count(b"\n") + 1


def _decoded_lines(body: bytes, lineno: int, final_newline: bool = False) -> Iterator[tuple[str, int, object]]:
    """``body`` (lines joined by LF) as text blocks, with each line holding bad UTF-8 cut out alone."""
    while True:
        try:
            yield TEXT, lineno, body.decode("utf-8")
            return
        except UnicodeDecodeError as exc:
            # Only the line holding the bad bytes is set apart; the lines before it decode in one go.
            start = body.rfind(b"\n", 0, exc.start) + 1
            end = body.find(b"\n", exc.start)
            end = len(body) if end < 0 else end
            if start:
                yield TEXT, lineno, body[:start - 1].decode("utf-8")
                lineno += body.count(b"\n", 0, start)
            yield BYTES, lineno, body[start:end] + b"\n"
            lineno += 1
            if end >= len(body):
                return
            body = body[end + 1:]


def shift(rec: RawRecord, offset: int) -> RawRecord:
    """Renumber a 'line:N[#k]' locator produced on a slice that starts after ``offset`` lines."""
    if not rec.locator.startswith("line:") or not offset:
        return rec
    num, sep, part = rec.locator[5:].partition("#")
    return RawRecord(f"line:{int(num) + offset}{sep}{part}", rec.text, rec.meta, rec.reason, rec.detail, rec.raw)


def per_record(reader: Callable[[io.BufferedReader], Iterator[RawRecord]], data: bytes | io.BufferedReader,
               offset: int) -> Iterator[RawRecord]:
    """Run a per-record line reader on ``data`` (bytes of whole lines, or a stream) and renumber its locators."""
    stream = data if isinstance(data, io.BufferedReader) else io.BufferedReader(io.BytesIO(data))
    for rec in reader(stream):
        yield shift(rec, offset)


def fast_lines(stream: io.BufferedReader, text_records) -> Iterator[RecordBatch | RawRecord]:
    """Text in line mode: blocks of lines become RecordBatches; a line that is not valid UTF-8, and any
    line longer than the limit, goes through the per-line path (``text_records``, a TextRecords), so
    quarantine and split behave exactly as there."""
    slow = text_records._lines
    for kind, lineno, payload in line_blocks(stream, text_records.limit):
        if kind == TEXT:
            yield from _text_block(payload, lineno, text_records.limit, slow)
        else:
            yield from per_record(slow, payload, lineno)


def _text_block(text: str, lineno: int, limit: int, slow) -> Iterator[RecordBatch | RawRecord]:
    """Lines of a decoded block (numbered from ``lineno + 1``) as batches; oversize lines go through the
    per-line path, between the batches of the lines around them so that record order is kept. The lines
    are split, CR-stripped and numbered by polars: no Python object per line."""
    import polars as pl

    lines = pl.Series("text", [text], dtype=pl.String).str.split("\n").explode()
    if "\r" in text:
        lines = lines.str.strip_chars_end("\r")  # as the per-line path: CRs before LF are EOL
    big: list[int] = []
    if len(text) * 4 > limit:  # maybe oversize: check bytes exactly
        big = (lines.str.len_bytes() > limit).arg_true().to_list()
    start = 0
    for i in [*big, lines.len()]:
        if i > start:
            numbers = pl.int_range(lineno + start + 1, lineno + i + 1, dtype=pl.Int64, eager=True)
            yield RecordBatch(frame=pl.DataFrame({
                "locator": "line:" + numbers.cast(pl.String), "text": lines.slice(start, i - start),
                "meta": pl.repeat(None, i - start, dtype=pl.String, eager=True)}))
        if i < lines.len():
            yield from per_record(slow, lines[i].encode() + b"\n", lineno + i)
        start = i + 1
