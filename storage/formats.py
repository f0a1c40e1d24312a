"""Record readers per format. Each takes a buffered binary stream of UTF-8 bytes and yields RawRecords.

Memory stays bounded by ``max_document_bytes``: lines are read with a size limit, and an oversize
document is either split on a whitespace boundary (``oversize: split``, locators ``line:7#2``) or
quarantined as ``too_large`` with its first bytes kept (``oversize: quarantine``). JSON arrays are
streamed item by item by a byte scanner that never holds more than the limit of one item; CSV/TSV rows with the csv module (quoted newlines are handled); Parquet in row
batches with pyarrow.
"""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Iterator
from typing import Any

from corpusforge.storage.compression import Chunked
from corpusforge.storage.fast_csv import row_record
from corpusforge.storage.records import RAW_CAP, FieldSpec, RawRecord, decode_strict

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


def text_lines(text: str) -> list[str]:
    """``text``'s lines by the readers' rule: LF, CRLF and a lone CR end a line, nothing else does (unlike
    ``str.splitlines``, which also splits at form feeds, U+0085 and U+2028); a last line without an end counts."""
    lines = _LINE_END.split(text)
    if lines and lines[-1] == "":
        lines.pop()
    return lines


_LINE_END = re.compile(r"\r\n|\r|\n")


def sized_lines(stream: io.BufferedReader, limit: int) -> Iterator[tuple[int, bytes, int]]:
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


class LineEnds(io.RawIOBase):
    """``stream`` with every line end as LF: CRLF and a lone CR (old Mac files) become LF, so line and
    paragraph modes split where an editor would. A CR at the end of one read waits for the next byte
    (it may be half of a CRLF). Streams without CR pass through unchanged (one memchr per read)."""

    def __init__(self, stream: io.BufferedReader):
        self._stream, self._cr, self._out = Chunked(stream), False, b""  # _cr: a CR held back from the last read

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        while not self._out:
            chunk = self._stream.read(max(len(buffer), 1))
            data, self._cr = (b"\r" if self._cr else b"") + chunk, False
            if not data:
                return 0
            if b"\r" in data:
                if chunk and data.endswith(b"\r"):  # at the end of the file a CR is a line end as it is
                    data, self._cr = data[:-1], True
                data = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
            self._out = data
        out = self._out
        n = min(len(buffer), len(out))
        buffer[:n] = out if n == len(out) else memoryview(out)[:n]
        self._out = out[n:] if n < len(out) else b""
        return n

    def close(self) -> None:
        self._stream.stream.close()
        super().close()


def normalize_line_ends(stream: io.BufferedReader) -> io.BufferedReader:
    return io.BufferedReader(LineEnds(stream), buffer_size=1 << 16)


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
            for lineno, line, total in sized_lines(stream, self.limit):
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
        """Paragraphs (blank-line separated) or the whole file, built from bounded line pieces into one
        bytearray (never one object per line: a block of millions of short lines stays ~its size)."""
        block = bytearray()  # the block's lines joined by LF; past the limit only its head is kept
        lines = size = start = last_line = part = 0  # lines: lines in block; size: the block's full size
        overflow = False  # quarantine mode: the current block is already too large

        def flush(final: bool) -> Iterator[RawRecord]:
            nonlocal block, lines, size, part, overflow
            if not lines and not overflow:
                return
            span = f"lines:{start}-{last_line}" if self.mode == "paragraph" else "file"
            data = bytes(block)
            if overflow:
                yield self._too_large(span, data, size)
            elif part or not final:
                part += 1
                yield self._decode(f"{span}#{part}", data)
            else:
                yield self._decode(span, data)
            block, lines, size = bytearray(), 0, 0
            if final:
                part, overflow = 0, False

        for lineno, piece, line_done in _line_pieces(stream, self.limit):
            if self.mode == "paragraph" and line_done and not piece.strip():
                yield from flush(final=True)
                continue
            if not lines and not overflow and not part:
                start = lineno
            last_line = lineno
            joiner = 1 if lines else 0
            if size + joiner + len(piece) > self.limit:
                if self.oversize == "split":
                    yield from flush(final=False)
                    joiner = 0
                else:
                    overflow = True
            size += joiner + len(piece)
            if not overflow or len(block) < RAW_CAP:
                if joiner:
                    block += b"\n"
                block += piece
                lines += 1
        if self.mode == "file" and not block.strip() and not part and not overflow:
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


def record_from_object(locator: str, obj: Any, text_field: str, raw: bytes, spec: FieldSpec | None = None) -> RawRecord:
    """A record from one decoded JSON value (JSONL line or JSON array item); with ``spec``, its named fields."""
    if not isinstance(obj, dict):
        return RawRecord(locator, reason="not_an_object", detail=type(obj).__name__, raw=raw[:RAW_CAP])
    if spec is not None:
        return _fields_from_object(locator, obj, raw, spec)
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


def _fields_from_object(locator: str, obj: dict, raw: bytes, spec: FieldSpec) -> RawRecord:
    """The named fields of a JSON object; the keys they are not read from stay as ``meta``."""
    rec = spec.record(locator, lambda key: get_path(obj, key), raw)
    if not rec.ok:
        return rec
    if _SURROGATE_ESCAPE.search(raw):  # JSON escapes can encode lone surrogates, which are not text
        try:
            json.dumps(obj, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError as exc:
            return RawRecord(locator, reason="invalid_utf8", detail=f"lone surrogate escape: {exc.reason}",
                             raw=raw[:RAW_CAP])
    for key in spec.keys:
        if get_path(obj, key)[0]:
            pop_path(obj, key)
    return RawRecord(locator, meta=obj or None, fields=rec.fields)


def jsonl_records(stream: io.BufferedReader, text_field: str, limit: int, spec: FieldSpec | None = None
                  ) -> Iterator[RawRecord]:
    for lineno, line, total in sized_lines(stream, limit):
        locator = f"line:{lineno}"
        if total > limit:
            yield RawRecord(locator, reason="too_large", detail=f"{total} bytes > max_document_bytes {limit}",
                            raw=line[:RAW_CAP])
            continue
        if not line.strip():  # an empty record: the filter stage counts it as 'empty'
            yield RawRecord(locator, text="") if spec is None else RawRecord(locator, fields=spec.blank())
            continue
        rec = decode_strict(locator, line, "none")
        if not rec.ok:
            yield rec
            continue
        try:
            obj = json.loads(rec.text)
        except (ValueError, RecursionError) as exc:
            detail = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)[:200]
            yield RawRecord(locator, reason="invalid_json", detail=detail, raw=line[:RAW_CAP])
            continue
        yield record_from_object(locator, obj, text_field, line, spec)


JSON_CHUNK = 1 << 16
JSON_WS = b" \t\n\r"
# Outside a string: a whole string (or one cut by the chunk's end: group 1 is '"' only when it closed;
# '\\' when the chunk ends inside an escape) or one structural character.
_JSON_TOKEN = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*("|\\?\Z)|[][{},]', re.S)
_JSON_STRING_REST = re.compile(rb'[^"\\]*(?:\\.[^"\\]*)*("|\\?\Z)', re.S)


def _whole_item_pattern(levels: int) -> re.Pattern[bytes]:
    """A whole array item (a value nested at most ``levels`` deep, entirely inside the chunk) and the
    separator after it, matched in one step; anything else is left to the token scanner. What it matches
    is parsed by json.loads, which refuses whatever is not JSON."""
    string = rb'"[^"\\]*+(?:\\.[^"\\]*+)*+"'
    inner = rb'(?:[^"{}\[\]]++|' + string + rb')*+'
    for _ in range(levels):
        inner = rb'(?:[^"{}\[\]]++|' + string + rb'|[\[{]' + inner + rb'[\]}])*+'
    value = rb'[\[{]' + inner + rb'[\]}]|' + string + rb'|[^"{}\[\],\s]++'
    return re.compile(rb'[ \t\n\r]*+(' + value + rb')[ \t\n\r]*+([,\]])', re.S)


_JSON_WHOLE_ITEM = _whole_item_pattern(3)


class _ItemBytes:
    """The bytes of one JSON value as they stream past: kept while the value may still fit the limit,
    only counted beyond it (the first RAW_CAP bytes stay for the quarantine record)."""

    __slots__ = ("limit", "pieces", "size", "tail_ws", "started")

    def __init__(self, limit: int):
        self.limit, self.pieces, self.size, self.tail_ws, self.started = limit, [], 0, 0, False

    def add(self, seg: bytes) -> None:
        if not self.started:
            seg = seg.lstrip(JSON_WS)
            if not seg:
                return
            self.started = True
        if self.size <= self.limit:
            self.pieces.append(seg)
        elif self.size - self.tail_ws > self.limit and sum(map(len, self.pieces)) > RAW_CAP:
            self.pieces = [b"".join(self.pieces)[:RAW_CAP]]  # too large for good: keep the head only
        self.size += len(seg)
        body = seg.rstrip(JSON_WS)
        self.tail_ws = self.tail_ws + len(seg) if not body else len(seg) - len(body)

    @property
    def too_large(self) -> bool:
        return self.size - self.tail_ws > self.limit

    def data(self) -> bytes:
        return b"".join(self.pieces).strip(JSON_WS)


def _json_value(locator: str, item: _ItemBytes, text_field: str, spec: FieldSpec | None = None
                ) -> tuple[RawRecord, bool]:
    """(record, parsed) for one complete JSON value: too_large without parsing it, else parsed."""
    if item.too_large:
        return RawRecord(locator, reason="too_large", detail=f"{item.size - item.tail_ws} bytes > "
                         f"max_document_bytes {item.limit}", raw=item.data()[:RAW_CAP]), True
    data = item.data()
    try:
        obj = json.loads(data.decode("utf-8"))
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        detail = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)[:200]
        return RawRecord(locator, reason="invalid_json", detail=detail, raw=data[:RAW_CAP]), False
    return record_from_object(locator, obj, text_field, data, spec), True


def _broken(count: int, detail: str, raw: bytes | None = None) -> RawRecord:
    """The record that ends a JSON array that cannot be trusted past item ``count``."""
    return RawRecord(f"after-item:{count}", reason="invalid_json", detail=f"stream broken: {detail}", raw=raw)


def json_records(stream: io.BufferedReader, text_field: str, limit: int = 8 << 20, spec: FieldSpec | None = None
                 ) -> Iterator[RawRecord]:
    """A JSON document: an array of objects (streamed item by item) or a single object.

    Memory stays bounded by ``limit`` whatever the document holds: a byte scanner finds where each array
    item (or the single top-level value) starts and ends, tracking strings and nesting, and keeps at most
    ``limit`` bytes of it; only a value that fits is parsed (``json.loads``). A larger one is quarantined
    as ``too_large`` with its first bytes, without ever being held whole. A syntax error ends the stream
    (``after-item:N``, ``invalid_json``), as a broken array cannot be trusted past that point.
    """
    mode = None  # None before the first significant byte, then "array" or "value"
    depth = 0  # nesting inside the top-level array (1 = between its items)
    in_string = escape = closed = at_item_start = False
    count = 0
    item = _ItemBytes(limit)
    seen_comma = False
    chunks = Chunked(stream)
    while True:
        chunk = chunks.read(JSON_CHUNK)
        if not chunk:
            break
        pos = 0
        if mode is None:
            pos = len(chunk) - len(chunk.lstrip(JSON_WS))
            if pos == len(chunk):
                continue
            if chunk[pos:pos + 1] == b"[":
                mode, depth, pos, at_item_start = "array", 1, pos + 1, True
            else:
                mode = "value"
        if mode == "value":  # one top-level value (an object): held whole only if it fits
            item.add(chunk[pos:])
            continue
        if closed:
            if chunk.strip(JSON_WS):
                yield _broken(count, "data after the end of the array")
                return
            continue
        mark = pos  # start of the current item's bytes in this chunk
        if escape:  # the previous chunk ended with a backslash inside a string
            pos, escape = pos + 1, False
        n = len(chunk)
        while pos < n:
            if at_item_start and not in_string:  # most items: matched whole, then parsed
                at_item_start = False
                m = _JSON_WHOLE_ITEM.match(chunk, pos)
                if m is not None:
                    count += 1
                    whole = _ItemBytes(limit)
                    whole.add(m.group(1))
                    rec, parsed = _json_value(f"item:{count}", whole, text_field, spec)
                    if not parsed:
                        yield _broken(count - 1, rec.detail, rec.raw)
                        return
                    yield rec
                    pos = mark = m.end()
                    if m.group(2) == b",":
                        at_item_start = seen_comma = True
                        continue
                    closed = True
                    if chunk[pos:].strip(JSON_WS):
                        yield _broken(count, "data after the end of the array")
                        return
                    break
            if in_string:
                m = _JSON_STRING_REST.match(chunk, pos)
                end = m.group(1)
                in_string, escape = end != b'"', end == b"\\"
                pos = m.end()
                continue
            m = _JSON_TOKEN.search(chunk, pos)
            if m is None:
                break
            pos = m.end()
            c = chunk[m.start()]
            if c == 0x22:  # '"'
                end = m.group(1)
                in_string, escape = end != b'"', end == b"\\"
            elif c in b"[{":
                depth += 1
            elif c in b"]}" and depth > 1:
                depth -= 1
            elif c == 0x2C and depth > 1:  # ',' inside an item
                pass
            elif c == 0x7D:  # '}' where an item or the array's ']' belongs
                yield _broken(count, "unexpected '}' in the array")
                return
            else:  # ',' between items, or the array's closing ']'
                item.add(chunk[mark:m.start()])
                mark = pos
                if c == 0x2C or item.started or seen_comma:  # '[]' has no item; '[1,]' an empty (bad) one
                    count += 1
                    rec, parsed = _json_value(f"item:{count}", item, text_field, spec)
                    if not parsed:
                        yield _broken(count - 1, rec.detail, rec.raw)
                        return
                    yield rec
                    item = _ItemBytes(limit)
                seen_comma = at_item_start = c == 0x2C
                if c == 0x5D:
                    closed = True
                    if chunk[pos:].strip(JSON_WS):
                        yield _broken(count, "data after the end of the array")
                        return
                    break
        if not closed:
            item.add(chunk[mark:])
    if mode == "value":
        yield _json_value("item:1", item, text_field, spec)[0]
    elif mode == "array" and not closed:
        yield _broken(count, "the file ends inside the array")


def csv_records(stream: io.BufferedReader, text_field: str, delimiter: str, limit: int, spec: FieldSpec | None = None,
                quoting: bool = True) -> Iterator[RawRecord]:
    """CSV/TSV with a header row; quoted fields may hold newlines (``quoting``; without it a double quote is text
    and each line is one row, as TSV files have it). A row with another number of fields than the header is
    ``ragged_row``. Other columns go to meta. A text field
    over ``limit`` bytes, a field over the csv module's field-size limit and a physical line too long to
    hold (``max_line_chars``, skipped unread) are quarantined as ``too_large``. With ``spec``, the named
    fields' columns must all be in the header (else the file is one ``missing_text_field`` record)."""
    from corpusforge.storage.fast_csv import (LineTooLong, TextSource, csv_error, csv_reader, max_line_chars,
                                               too_long_row)

    csv.field_size_limit(max(limit, 1 << 20))
    text = TextSource(stream, max_line_chars(limit))  # what TextIOWrapper(newline='') gives, bounded
    reader = csv_reader(text, delimiter, quoting)
    try:
        header = next(reader)
    except StopIteration:
        return
    except (csv.Error, LineTooLong) as exc:
        yield RawRecord("row:0", reason="invalid_csv", detail=f"header: {exc}")
        return
    if spec is not None:
        missing = [key for key in spec.keys if key not in header]
        if missing:
            yield RawRecord("header", reason="missing_text_field",
                            detail=f"no column {missing[0]!r} (reader.fields/labels); columns are {header[:20]}")
            return
        idx = -1
    elif text_field not in header:
        yield RawRecord("header", reason="missing_text_field",
                        detail=f"no column {text_field!r}; columns are {header[:20]}")
        return
    else:
        idx = header.index(text_field)
    rowno = 0
    while True:
        rowno += 1
        try:
            row = next(reader)
        except StopIteration:
            return
        except LineTooLong as exc:
            yield too_long_row(f"row:{rowno}", exc, limit)
            reader = csv_reader(text, delimiter, quoting)  # a fresh parser: the row was cut off
            continue
        except csv.Error as exc:
            yield csv_error(f"row:{rowno}", exc, limit)
            continue
        if spec is not None:
            yield fields_row_record(f"row:{rowno}", row, header, spec, delimiter, limit, quoting)
        else:
            yield row_record(f"row:{rowno}", row, header, idx, delimiter, limit, quoting)


def fields_row_record(locator: str, row: list[str], header: list[str], spec: FieldSpec, delimiter: str,
                      limit: int, quoting: bool = True) -> RawRecord:
    """One parsed CSV/TSV row with named fields: a row too short to hold a field's column is that field's
    ``missing_text_field`` (or ``missing_label``); a text field over ``limit`` bytes is ``too_large``."""
    from corpusforge.storage.fast_csv import _UNDECODED, ragged_row

    joined = delimiter.join(row)
    raw = joined.encode("utf-8", "surrogateescape")
    if row and len(row) != len(header):
        return ragged_row(locator, row, header, delimiter, quoting, raw)
    if _UNDECODED.search(joined):
        bad = next((h for h, v in zip(header, row) if _UNDECODED.search(v)), "?")
        named = next((f"field {name!r} ({key!r})" if name != key else f"field {name!r}"
                      for name, key in (*spec.text, *((n, k) for n, k, _ in spec.labels)) if key == bad), f"column {bad!r}")
        return RawRecord(locator, reason="invalid_utf8", detail=f"{named}: undecodable bytes", raw=raw[:RAW_CAP])
    position = {h: i for i, h in enumerate(header)}  # a repeated column name: its last one, as for meta
    values = {h: row[i] for h, i in position.items() if i < len(row)}
    for name, key in spec.text:
        value = values.get(key)
        if value is not None and len(value) * 4 > limit and len(value.encode("utf-8")) > limit:
            return RawRecord(locator, reason="too_large", detail=f"field {name!r}: {len(value.encode('utf-8'))} bytes > "
                             f"max_document_bytes {limit}", raw=raw[:RAW_CAP])
    rec = spec.record(locator, lambda key: (key in values, values.get(key)), raw)
    if not rec.ok:
        if len(row) < len(header):
            return RawRecord(locator, reason=rec.reason, detail=f"{rec.detail} (the row has {len(row)} of "
                             f"{len(header)} columns)", raw=rec.raw)
        return rec
    used = set(spec.keys)
    meta = {h: v for h, v in values.items() if h not in used}
    return RawRecord(locator, meta=meta or None, fields=rec.fields)


def parquet_records(path, text_field: str, limit: int = 8 << 20, spec: FieldSpec | None = None) -> Iterator[RawRecord]:
    """Parquet in row batches. A text value over ``limit`` bytes is quarantined as ``too_large`` from its
    Arrow length: it is never turned into a Python string (only its first RAW_CAP bytes are). Parquet
    stores a value whole inside one data page, so pyarrow holds that page while reading it."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    if spec is not None:
        yield from _parquet_fields(path, spec, limit)
        return

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
            big: dict[int, tuple[int, bytes]] = {}
            column = batch.column(text_field)
            if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
                sizes = pc.binary_length(column)
                if (pc.max(sizes).as_py() or 0) > limit:
                    for i in pc.indices_nonzero(pc.greater(sizes, limit)).to_pylist():
                        head = pc.utf8_slice_codeunits(column.slice(i, 1), 0, RAW_CAP)[0].as_py().encode()[:RAW_CAP]
                        big[i] = (sizes[i].as_py(), head)
                    keep = pc.invert(pc.fill_null(pc.greater(sizes, limit), False))
                    batch = batch.set_column(names.index(text_field), text_field,
                                             pc.if_else(keep, column, pa.scalar(None, column.type)))
            columns = batch.to_pydict()
            texts = columns.pop(text_field)
            for i, value in enumerate(texts):
                rowno += 1
                locator = f"row:{rowno}"
                if i in big:
                    size, head = big[i]
                    yield RawRecord(locator, reason="too_large", detail=f"{size} bytes > max_document_bytes {limit}",
                                    raw=head)
                elif value is None:
                    yield RawRecord(locator, reason="missing_text_field", detail="null text")
                elif not isinstance(value, str):
                    yield RawRecord(locator, reason="text_not_string", detail=type(value).__name__)
                else:
                    meta = {k: v[i] for k, v in columns.items()}
                    yield RawRecord(locator, text=value, meta=json.loads(json.dumps(meta, default=str)) or None)
    except (pa.ArrowException, OSError) as exc:
        yield RawRecord(f"after-row:{rowno}", reason="invalid_parquet", detail=str(exc)[:200])


def _parquet_fields(path, spec: FieldSpec, limit: int) -> Iterator[RawRecord]:
    """Parquet with named fields: each row's fields from their columns (labels keep an integer column's
    integers), the other columns as meta. A text value over ``limit`` bytes is ``too_large`` from its Arrow
    length, never made a Python string."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    try:
        pf = pq.ParquetFile(path)
    except (pa.ArrowException, OSError) as exc:
        yield RawRecord("file", reason="invalid_parquet", detail=str(exc)[:200])
        return
    names = pf.schema_arrow.names
    missing = [key for key in spec.keys if key not in names]
    if missing:
        yield RawRecord("schema", reason="missing_text_field",
                        detail=f"no column {missing[0]!r} (reader.fields/labels); columns are {names[:20]}")
        return
    rowno = 0
    text_keys = {key: name for name, key in spec.text}
    try:
        for batch in pf.iter_batches(batch_size=8192):
            big: dict[int, str] = {}  # row -> detail of its first oversize field
            for key, name in text_keys.items():
                column = batch.column(key)
                if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
                    sizes = pc.binary_length(column)
                    if (pc.max(sizes).as_py() or 0) > limit:
                        for i in pc.indices_nonzero(pc.greater(sizes, limit)).to_pylist():
                            big.setdefault(i, f"field {name!r}: {sizes[i].as_py()} bytes > max_document_bytes {limit}")
                        keep = pc.invert(pc.fill_null(pc.greater(sizes, limit), False))
                        batch = batch.set_column(names.index(key), key, pc.if_else(keep, column, pa.scalar(None, column.type)))
            columns = batch.to_pydict()
            for i in range(batch.num_rows):
                rowno += 1
                locator = f"row:{rowno}"
                if i in big:
                    yield RawRecord(locator, reason="too_large", detail=big[i])
                    continue
                row = {k: v[i] for k, v in columns.items()}
                rec = spec.record(locator, lambda key: (key in row, row[key]), b"")
                if not rec.ok:
                    yield RawRecord(locator, reason=rec.reason, detail=rec.detail)
                    continue
                used = set(spec.keys)
                meta = {k: v for k, v in row.items() if k not in used}
                yield RawRecord(locator, meta=json.loads(json.dumps(meta, default=str)) or None, fields=rec.fields)
    except (pa.ArrowException, OSError) as exc:
        yield RawRecord(f"after-row:{rowno}", reason="invalid_parquet", detail=str(exc)[:200])

