"""CSV/TSV without a Python step per row: runs of plain rows are parsed by polars' CSV reader.

The per-record reader (``corpusforge.storage.formats.csv_records``: Python's ``csv`` module over the text decoded
with ``surrogateescape``) is the definition. The file is read as the same text, and from the current
row on, the longest run of rows that are *plain* is handed to ``polars.read_csv``:

- exactly as many fields as the header, each unquoted without any ``"``, CR, LF or NUL, or quoted
  (``"..."`` with ``""`` for a quote; anything but NUL inside, newlines included), the closing quote
  followed by the delimiter or the end of the row; rows end with LF or CRLF. On such rows Python's
  ``csv`` and polars split identically (a regular grammar checks the run, ``PLAIN_ROWS``, and the row
  count polars returns is checked against it);
- no undecodable bytes, no field over ``csv.field_size_limit``.

Anything else (ragged rows, blank lines, stray quotes, a lone CR, bad UTF-8, a last row without a
newline) goes through Python's ``csv`` reader, which reads the same text, row by row, for a window of
``SLOW_WINDOW`` characters; then the plain path tries again. The fast rows' ``meta`` is built as
``json.dumps({header: value}, sort_keys=True, ensure_ascii=False)`` writes it (tests compare the two
paths on a hostile file: tests/storage/test_fast_paths.py).
"""

from __future__ import annotations

import codecs
import csv
import io
import json
import re
from collections.abc import Iterator

from corpusforge.storage.compression import Chunked
from corpusforge.storage.fast_jsonl import JSON_ESCAPES
from corpusforge.storage.records import BATCH_COLUMNS, RawRecord, RecordBatch

FAST_CHUNK = 8 << 20  # characters of text tried at once
SLOW_WINDOW = 64 << 10  # characters read row by row before trying the fast path again
_LINE_END = re.compile(r"[\r\n]")
_UNDECODED = re.compile("[\udc80-\udcff]")  # what errors="surrogateescape" leaves for undecodable bytes


class TextSource:
    """The decoded text of a stream, as ``TextIOWrapper(encoding='utf-8', errors='surrogateescape',
    newline='')`` would give it, with a cursor: iterating yields lines split the same way (at LF, CRLF
    or a lone CR, ends kept), which is what the ``csv`` module reads."""

    def __init__(self, stream: io.BufferedReader, max_line: int | None = None):
        self._stream = Chunked(stream)
        self._decoder = codecs.getincrementaldecoder("utf-8")("surrogateescape")
        self.buf, self.pos, self.eof = "", 0, False
        self.max_line = max_line  # a longer line is skipped and raises LineTooLong: memory stays bounded

    def fill(self, want: int) -> None:
        """Have at least ``want`` characters after the cursor, unless the stream ends first."""
        while not self.eof and len(self.buf) - self.pos < want:
            data = self._stream.read(FAST_CHUNK)
            self.eof = not data
            self.buf = self.buf[self.pos:] + self._decoder.decode(data, final=self.eof)
            self.pos = 0
            if self._stream.error is not None:  # the stream broke after these bytes: use them first
                break

    def __iter__(self) -> TextSource:
        return self

    def __next__(self) -> str:
        while True:
            m = _LINE_END.search(self.buf, self.pos)
            if m is not None:
                end = m.start() + 1
                if m.group() == "\r":
                    if end == len(self.buf) and not self.eof:  # CRLF may straddle the read
                        self.fill(len(self.buf) - self.pos + 1)
                        continue
                    if self.buf.startswith("\n", end):
                        end += 1
                line, self.pos = self.buf[self.pos:end], end
                return line
            if self.eof:
                if self.pos < len(self.buf):
                    line, self.pos = self.buf[self.pos:], len(self.buf)
                    return line
                raise StopIteration
            if self.max_line is not None and len(self.buf) - self.pos > self.max_line:
                self._skip_line()
            self.fill(len(self.buf) - self.pos + FAST_CHUNK)

    def _skip_line(self) -> None:
        """Drop the line at the cursor (no line end in sight, longer than ``max_line``) through its end,
        reading in bounded chunks, and raise LineTooLong with its length and first characters."""
        head, length = self.buf[self.pos:self.pos + 4096], 0
        while True:
            m = _LINE_END.search(self.buf, self.pos)
            if m is not None or self.eof:
                end = m.end() if m is not None else len(self.buf)
                length += end - self.pos
                self.pos = end
                if m is not None and m.group() == "\r":  # its LF may come with the next read
                    self.fill(1)
                    if self.buf.startswith("\n", self.pos):
                        self.pos += 1
                raise LineTooLong(length, head)
            length += len(self.buf) - self.pos
            self.buf, self.pos = "", 0
            self.fill(FAST_CHUNK)


class LineTooLong(Exception):
    """A physical line over TextSource.max_line characters, already skipped."""

    def __init__(self, length: int, head: str):
        super().__init__(f"a line of {length} characters")
        self.length, self.head = length, head


def plain_rows_pattern(n_fields: int, delimiter: str, quoting: bool = True) -> str:
    d = re.escape(delimiter)
    if quoting:
        quoted = r'"(?:[^"\x00]|"")*"'
        field = rf'(?:{quoted}|[^"{d}\r\n\x00]*)' if n_fields > 1 else rf'(?:{quoted}|[^"{d}\r\n\x00]+)'
    else:  # a quote is text; a field ends at the delimiter or the line end
        field = rf'[^{d}\r\n\x00]*' if n_fields > 1 else rf'[^{d}\r\n\x00]+'
    return rf"{field}(?:{d}{field}){{{n_fields - 1}}}\r?\n"  # one field alone may not be empty: a blank line


def csv_reader(text, delimiter: str, quoting: bool):
    """Python's csv reader for CSV (``quoting``) or for TSV as GLUE, SST-2 and CoNLL write it: no quoting, a
    double quote is text, each line one row."""
    return csv.reader(text, delimiter=delimiter, quoting=csv.QUOTE_MINIMAL if quoting else csv.QUOTE_NONE)


def ragged_row(locator: str, row: list[str], header: list[str], delimiter: str, quoting: bool, raw: bytes) -> RawRecord:
    """A row with another number of fields than the header: a tab inside a TSV text, a comma in an unquoted CSV
    field. Its fields cannot be trusted to be the header's columns (the label would be a piece of the text)."""
    from corpusforge.storage.records import RAW_CAP

    where = f"line {int(locator.split(':')[1]) + 1}: " if not quoting and locator.startswith("row:") else ""
    sep = "tab" if delimiter == "\t" else repr(delimiter)
    return RawRecord(locator, reason="ragged_row", detail=f"{where}{len(row)} fields, the header has {len(header)} "
                     f"(a {sep} inside a field?)", raw=raw[:RAW_CAP])


def fast_csv(stream: io.BufferedReader, text_field: str, delimiter: str, limit: int,
             quoting: bool = True) -> Iterator[RecordBatch | RawRecord]:
    field_limit = max(limit, 1 << 20)
    csv.field_size_limit(field_limit)
    source = TextSource(stream, max_line_chars(limit))
    reader = csv_reader(source, delimiter, quoting)
    try:
        header = next(reader)
    except StopIteration:
        return
    except csv.Error as exc:
        yield RawRecord("row:0", reason="invalid_csv", detail=f"header: {exc}")
        return
    if text_field not in header:
        yield RawRecord("header", reason="missing_text_field",
                        detail=f"no column {text_field!r}; columns are {header[:20]}")
        return
    idx = header.index(text_field)
    row_pattern = plain_rows_pattern(len(header), delimiter, quoting)
    rowno = 0
    while True:
        if source._stream.error is None:  # else: the stream broke; the rows buffered before the break first
            source.fill(FAST_CHUNK)
        if source.pos >= len(source.buf) and source.eof:
            return
        used, batch = _plain_run(source.buf[source.pos:], row_pattern, header, idx, delimiter, field_limit, rowno,
                                 limit, quoting)
        if used:
            source.pos += used
            rowno += len(batch)
            yield batch
            continue
        # The row here is not plain (or is the last one without a newline): Python's csv for a while.
        stop = source.pos + SLOW_WINDOW
        while source.pos < stop:
            rowno += 1
            try:
                row = next(reader)
            except StopIteration:
                return
            except LineTooLong as exc:
                yield too_long_row(f"row:{rowno}", exc, limit)
                reader = csv_reader(source, delimiter, quoting)  # a fresh parser: the row was cut off
                continue
            except csv.Error as exc:
                yield csv_error(f"row:{rowno}", exc, limit)
                continue
            yield row_record(f"row:{rowno}", row, header, idx, delimiter, limit, quoting)


def max_line_chars(limit: int) -> int:
    """The longest physical line read whole: two field-size limits (a longer one is quarantined unread)."""
    return 2 * max(limit, 1 << 20)


def too_long_row(locator: str, exc: LineTooLong, limit: int) -> RawRecord:
    return RawRecord(locator, reason="too_large", detail=f"a line of {exc.length} characters (over "
                     f"{max_line_chars(limit)}; max_document_bytes {limit})",
                     raw=exc.head.encode("utf-8", "surrogateescape")[:4096])


def csv_error(locator: str, exc: csv.Error, limit: int) -> RawRecord:
    """A csv.Error as a record: a field over the field-size limit is too_large, anything else invalid_csv."""
    if "field larger than field limit" in str(exc):
        return RawRecord(locator, reason="too_large", detail=f"{exc}; max_document_bytes {limit}")
    return RawRecord(locator, reason="invalid_csv", detail=str(exc)[:200])


def row_record(locator: str, row: list[str], header: list[str], idx: int, delimiter: str,
               limit: int | None = None, quoting: bool = True) -> RawRecord:
    """One parsed row as the per-record reader makes it (shared with corpusforge.storage.formats.csv_records)."""
    from corpusforge.storage.records import RAW_CAP

    joined = delimiter.join(row)
    raw = joined.encode("utf-8", "surrogateescape")
    if row and len(row) != len(header):
        return ragged_row(locator, row, header, delimiter, quoting, raw)
    if _UNDECODED.search(joined):
        return RawRecord(locator, reason="invalid_utf8", detail="undecodable bytes in the row", raw=raw[:RAW_CAP])
    if len(row) <= idx:
        return RawRecord(locator, reason="missing_text_field", detail=f"row has {len(row)} fields", raw=raw[:RAW_CAP])
    if limit is not None and len(row[idx]) * 4 > limit and len(row[idx].encode("utf-8", "surrogateescape")) > limit:
        size = len(row[idx].encode("utf-8", "surrogateescape"))
        return RawRecord(locator, reason="too_large", detail=f"{size} bytes > max_document_bytes {limit}",
                         raw=raw[:RAW_CAP])
    meta = {h: v for i, (h, v) in enumerate(zip(header, row)) if i != idx}
    return RawRecord(locator, text=row[idx], meta=meta or None)


def _plain_run(text: str, row_pattern: str, header: list[str], idx: int, delimiter: str, field_limit: int,
               rowno: int, limit: int, quoting: bool = True) -> tuple[int, RecordBatch | None]:
    """(characters used, their rows as a batch) for the longest run of plain rows at the start of ``text``."""
    import polars as pl

    try:
        data = text.encode("utf-8")
    except UnicodeEncodeError as exc:  # undecodable bytes: only the rows before them can be plain
        text = text[:exc.start]
        data = text.encode("utf-8")
    try:
        rest = pl.Series([text]).str.replace(f"^(?:{row_pattern})*", "")
        run = pl.Series([text[:len(text) - rest.str.len_chars()[0]]])
        n_rows = run.str.count_matches(row_pattern)[0]
    except pl.exceptions.ComputeError:  # a header so wide that the pattern is too large to compile
        return 0, None
    if not n_rows:
        return 0, None
    used_bytes = len(data) - rest.str.len_bytes()[0]
    names = [f"c{i}" for i in range(len(header))]
    rows = pl.read_csv(data[:used_bytes], has_header=False, new_columns=names, infer_schema=False,
                       separator=delimiter, quote_char='"' if quoting else None, empty_string_is_null=False, raise_if_empty=False)
    too_long = rows.select((pl.max_horizontal(pl.all().str.len_chars().max()) > field_limit)
                           | (pl.col(names[idx]).str.len_bytes().max() > limit)).item()
    if rows.height != n_rows or too_long:  # not what Python's csv would give: the per-record path decides
        return 0, None
    return len(run[0]), RecordBatch(frame=rows.select(
        pl.format("row:{}", pl.int_range(rowno + 1, rowno + 1 + rows.height, dtype=pl.Int64)).alias("locator"),
        pl.col(names[idx]).alias("text"),
        _meta_expr(header, idx, names).alias("meta"),
    ).select(BATCH_COLUMNS))


def _meta_expr(header: list[str], idx: int, names: list[str]):
    """``json.dumps({h: v for the other columns}, sort_keys=True, ensure_ascii=False)`` as an expression; a
    repeated column name keeps its last value, as the dict comprehension does."""
    import polars as pl

    survivors = {h: names[i] for i, h in enumerate(header) if i != idx}
    if not survivors:
        return pl.lit(None, pl.String)
    parts: list = []
    for h in sorted(survivors):
        value = pl.col(survivors[h]).str.replace_many(list(JSON_ESCAPES), list(JSON_ESCAPES.values()))
        parts += [pl.lit((", " if parts else "{") + json.dumps(h, ensure_ascii=False) + ': "'), value, pl.lit('"')]
    return pl.concat_str([*parts, pl.lit("}")])
