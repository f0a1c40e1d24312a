"""Record readers per format. Each takes a buffered binary stream of UTF-8 bytes and yields RawRecords.

Memory stays bounded by ``max_document_bytes``: lines are read with a size limit, and an oversize
document is either split on a whitespace boundary (``oversize: split``, locators ``line:7#2``) or
quarantined as ``too_large`` with its first bytes kept (``oversize: quarantine``). JSON arrays are
streamed with ijson; CSV/TSV rows with the csv module (quoted newlines are handled); Parquet in row
batches with pyarrow.
"""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Iterator
from typing import Any

from storage.fast_csv import row_record
from storage.records import RAW_CAP, RawRecord, decode_strict

_WS = b" \t\n\r\f\v"


def split_oversize(data: bytes, limit: int) -> list[bytes]:
    """Cut ``data`` into pieces of at most ``limit`` bytes, at the last whitespace when there is one in
    the second half of a piece, else at a UTF-8 character boundary (never inside a character)."""
    pieces = []
    while len(data) > limit:
        cut = max(data.rfind(b" ", 0, limit + 1), data.rfind(b"\n", 0, limit + 1))
        if cut < limit // 2:
            cut = limit
            while cut > 0 and (data[cut] & 0xC0) == 0x80:  # don't split a multi-byte character
                cut -= 1
        pieces.append(data[:cut])
        data = data[cut:].lstrip(_WS) if cut < len(data) else b""
    if data:
        pieces.append(data)
    return pieces


def _sized_lines(stream: io.BufferedReader, limit: int) -> Iterator[tuple[int, bytes, int]]:
    """(line number, the line's first limit+1 bytes without EOL, its full length) for every line;
    the rest of an oversize line is read and dropped in bounded chunks (callers quarantine it)."""
    lineno = 0
    while True:
        line = stream.readline(limit + 1)
        if not line:
            return
        lineno += 1
        total, last = len(line), line
        if len(line) > limit and not line.endswith(b"\n"):
            while True:
                more = stream.readline(1 << 16)
                total += len(more)
                last = more or last
                if not more or more.endswith(b"\n"):
                    break
        total -= len(last) - len(last.rstrip(b"\n").rstrip(b"\r"))  # the EOL is not document content
        yield lineno, line.rstrip(b"\n").rstrip(b"\r"), total


def _line_pieces(stream: io.BufferedReader, limit: int) -> Iterator[tuple[int, bytes, bool]]:
    """(line number, piece, last piece of its line) with every piece <= limit bytes; nothing is dropped
    but the EOL and the whitespace at a cut. Memory stays below 2 x limit whatever the line length."""
    lineno = 0
    while True:
        buf = stream.readline(limit + 1)
        if not buf:
            return
        lineno += 1
        while True:
            ended = buf.endswith(b"\n")
            if ended or len(buf) <= limit:
                data = buf.rstrip(b"\n").rstrip(b"\r") if ended else buf
                if len(data) <= limit:
                    more = b"" if ended else stream.readline(limit + 1)
                    if ended or not more:
                        yield lineno, data, True
                        break
                    buf = data + more
                    continue
                buf = data + (b"\n" if ended else b"")
            pieces = split_oversize(buf.rstrip(b"\n").rstrip(b"\r") if ended else buf, limit)
            carry = b"" if ended else pieces.pop()
            for piece in pieces[:-1] if ended else pieces:
                yield lineno, piece, False
            if ended:
                yield lineno, pieces[-1] if pieces else b"", True
                break
            more = stream.readline(limit + 1)
            if not more:
                yield lineno, carry, True
                break
            buf = carry + more


class TextRecords:
    """Plain text: one document per line, per blank-line-separated paragraph, or per file."""

    def __init__(self, mode: str, limit: int, oversize: str, fallback: str):
        self.mode, self.limit, self.oversize, self.fallback = mode, limit, oversize, fallback

    def _decode(self, locator: str, data: bytes) -> RawRecord:
        return decode_strict(locator, data, self.fallback)

    def _too_large(self, locator: str, head: bytes, total: int) -> RawRecord:
        return RawRecord(locator, reason="too_large", detail=f"{total} bytes > max_document_bytes {self.limit}",
                         raw=head[:RAW_CAP])

    def __call__(self, stream: io.BufferedReader) -> Iterator[RawRecord]:
        if self.mode == "line":
            yield from self._lines(stream)
        else:
            yield from self._blocks(stream)

    def _lines(self, stream: io.BufferedReader) -> Iterator[RawRecord]:
        if self.oversize == "quarantine":
            for lineno, line, total in _sized_lines(stream, self.limit):
                locator = f"line:{lineno}"
                yield self._decode(locator, line) if total <= self.limit else self._too_large(locator, line, total)
            return
        part = 0
        for lineno, piece, last in _line_pieces(stream, self.limit):
            part += 1
            whole = last and part == 1
            yield self._decode(f"line:{lineno}" if whole else f"line:{lineno}#{part}", piece)
            if last:
                part = 0

    def _blocks(self, stream: io.BufferedReader) -> Iterator[RawRecord]:
        """Paragraphs (blank-line separated) or the whole file, built from bounded line pieces."""
        block: list[bytes] = []
        size = start = last_line = part = 0
        overflow = False  # quarantine mode: the current block is already too large

        def flush(final: bool) -> Iterator[RawRecord]:
            nonlocal block, size, part, overflow
            if not block and not overflow:
                return
            span = f"lines:{start}-{last_line}" if self.mode == "paragraph" else "file"
            if overflow:
                yield self._too_large(span, b"\n".join(block), size)
            elif part or not final:
                part += 1
                yield self._decode(f"{span}#{part}", b"\n".join(block))
            else:
                yield self._decode(span, b"\n".join(block))
            block, size = [], 0
            if final:
                part, overflow = 0, False

        for lineno, piece, line_done in _line_pieces(stream, self.limit):
            if self.mode == "paragraph" and line_done and not piece.strip() and not (block and not line_done):
                yield from flush(final=True)
                continue
            if not block and not overflow and not part:
                start = lineno
            last_line = lineno
            joiner = 1 if block else 0
            if size + joiner + len(piece) > self.limit:
                if self.oversize == "split":
                    yield from flush(final=False)
                    joiner = 0
                else:
                    overflow = True
            size += joiner + len(piece)
            if not overflow or sum(len(b) for b in block) < RAW_CAP:
                block.append(piece)
        if self.mode == "file" and not any(b.strip() for b in block) and not part and not overflow:
            return
        yield from flush(final=True)


def get_path(obj: Any, dotted: str) -> tuple[bool, Any]:
    """Look up 'a.b.c' in nested dicts; (found, value)."""
    node = obj
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return False, None
        node = node[part]
    return True, node


def pop_path(obj: dict, dotted: str) -> None:
    parts = dotted.split(".")
    node = obj
    for part in parts[:-1]:
        node = node[part]
    node.pop(parts[-1], None)


_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


def record_from_object(locator: str, obj: Any, text_field: str, raw: bytes) -> RawRecord:
    """A record from one decoded JSON value (JSONL line or JSON array item)."""
    if not isinstance(obj, dict):
        return RawRecord(locator, reason="not_an_object", detail=type(obj).__name__, raw=raw[:RAW_CAP])
    found, value = get_path(obj, text_field)
    if not found:
        return RawRecord(locator, reason="missing_text_field", detail=f"no field {text_field!r}", raw=raw[:RAW_CAP])
    if not isinstance(value, str):
        return RawRecord(locator, reason="text_not_string", detail=type(value).__name__, raw=raw[:RAW_CAP])
    pop_path(obj, text_field)
    if _SURROGATE_ESCAPE.search(raw):  # JSON escapes can encode lone surrogates, which are not text
        try:
            value.encode("utf-8")
            json.dumps(obj, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError as exc:
            return RawRecord(locator, reason="invalid_utf8", detail=f"lone surrogate escape: {exc.reason}",
                             raw=raw[:RAW_CAP])
    return RawRecord(locator, text=value, meta=obj or None)


def jsonl_records(stream: io.BufferedReader, text_field: str, limit: int) -> Iterator[RawRecord]:
    for lineno, line, total in _sized_lines(stream, limit):
        locator = f"line:{lineno}"
        if total > limit:
            yield RawRecord(locator, reason="too_large", detail=f"{total} bytes > max_document_bytes {limit}",
                            raw=line[:RAW_CAP])
            continue
        if not line.strip():
            yield RawRecord(locator, text="")  # an empty record: the filter stage counts it as 'empty'
            continue
        rec = decode_strict(locator, line, "none")
        if not rec.ok:
            yield rec
            continue
        try:
            obj = json.loads(rec.text)
        except ValueError as exc:
            yield RawRecord(locator, reason="invalid_json", detail=str(exc)[:200], raw=line[:RAW_CAP])
            continue
        yield record_from_object(locator, obj, text_field, line)


def json_records(stream: io.BufferedReader, text_field: str) -> Iterator[RawRecord]:
    """A JSON document: an array of objects (streamed item by item) or a single object."""
    import ijson

    head = stream.peek(64)[:64].lstrip()
    if head.startswith(b"{"):
        data = stream.read()
        try:
            obj = json.loads(data.decode("utf-8"))
        except (ValueError, UnicodeDecodeError) as exc:
            yield RawRecord("item:1", reason="invalid_json", detail=str(exc)[:200], raw=data[:RAW_CAP])
            return
        yield record_from_object("item:1", obj, text_field, data)
        return
    count = 0
    try:
        for count, obj in enumerate(ijson.items(stream, "item", use_float=True), start=1):
            yield record_from_object(f"item:{count}", obj, text_field, json.dumps(obj, default=str).encode()[:RAW_CAP])
    except (ijson.JSONError, UnicodeDecodeError, ValueError) as exc:
        yield RawRecord(f"after-item:{count}", reason="invalid_json", detail=f"stream broken: {str(exc)[:200]}")


def csv_records(stream: io.BufferedReader, text_field: str, delimiter: str, limit: int) -> Iterator[RawRecord]:
    """CSV/TSV with a header row; quoted fields may hold newlines. Other columns go to meta."""
    csv.field_size_limit(max(limit, 1 << 20))
    text = io.TextIOWrapper(stream, encoding="utf-8", errors="surrogateescape", newline="")
    reader = csv.reader(text, delimiter=delimiter)
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
    rowno = 0
    while True:
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            rowno += 1
            yield RawRecord(f"row:{rowno}", reason="invalid_csv", detail=str(exc)[:200])
            continue
        rowno += 1
        yield row_record(f"row:{rowno}", row, header, idx, delimiter)


def parquet_records(path, text_field: str) -> Iterator[RawRecord]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        pf = pq.ParquetFile(path)
    except (pa.ArrowException, OSError) as exc:
        yield RawRecord("file", reason="invalid_parquet", detail=str(exc)[:200])
        return
    names = pf.schema_arrow.names
    if text_field not in names:
        yield RawRecord("schema", reason="missing_text_field", detail=f"no column {text_field!r}; columns are {names[:20]}")
        return
    rowno = 0
    try:
        for batch in pf.iter_batches(batch_size=8192):
            columns = batch.to_pydict()
            texts = columns.pop(text_field)
            for i, value in enumerate(texts):
                rowno += 1
                locator = f"row:{rowno}"
                if value is None:
                    yield RawRecord(locator, reason="missing_text_field", detail="null text")
                elif not isinstance(value, str):
                    yield RawRecord(locator, reason="text_not_string", detail=type(value).__name__)
                else:
                    meta = {k: v[i] for k, v in columns.items()}
                    yield RawRecord(locator, text=value, meta=json.loads(json.dumps(meta, default=str)) or None)
    except (pa.ArrowException, OSError) as exc:
        yield RawRecord(f"after-row:{rowno}", reason="invalid_parquet", detail=str(exc)[:200])
