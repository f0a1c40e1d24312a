"""Opening a source file: transparent decompression, encoding marks and binary sniffing.

``open_source(path)`` returns a buffered binary stream of the *decompressed, UTF-8* bytes plus what was
detected. Compression is chosen by suffix (.gz, .bz2, .xz, .zst). A byte-order mark decides the
encoding: a UTF-8 BOM is dropped; UTF-16/32 (LE/BE) files are decoded and re-encoded to UTF-8, which
needs the whole file in memory, so they are limited to ``MAX_TRANSCODE_BYTES``. Everything else is
streamed in bounded chunks, whatever the file's size.
"""

from __future__ import annotations

import bz2
import codecs
import gzip
import io
import lzma
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

COMPRESSION_SUFFIXES = {".gz": "gzip", ".bz2": "bz2", ".xz": "xz", ".zst": "zstd"}
SNIFF_BYTES = 8192
MAX_TRANSCODE_BYTES = 256 << 20
BOMS = (  # longest first: the UTF-32 LE mark starts with the UTF-16 LE one
    (codecs.BOM_UTF32_LE, "utf-32-le"),
    (codecs.BOM_UTF32_BE, "utf-32-be"),
    (codecs.BOM_UTF8, "utf-8-sig"),
    (codecs.BOM_UTF16_LE, "utf-16-le"),
    (codecs.BOM_UTF16_BE, "utf-16-be"),
)


class CorruptSource(Exception):
    """The compressed stream is truncated or not what its suffix says. ``detail`` says where."""

    def __init__(self, detail: str):
        super().__init__(detail)
        self.detail = detail


def compression_of(path: Path) -> str | None:
    return COMPRESSION_SUFFIXES.get(path.suffix.lower())


def inner_suffix(path: Path) -> str:
    """The format suffix under any compression suffix: 'a.jsonl.gz' -> '.jsonl'."""
    if compression_of(path):
        return Path(path.stem).suffix.lower()
    return path.suffix.lower()


# Errors that decompressors raise on truncated or fake input.
DECOMPRESSION_ERRORS: tuple[type[BaseException], ...] = (EOFError, gzip.BadGzipFile, lzma.LZMAError, OSError, ValueError)


def _open_raw(path: Path) -> BinaryIO:
    kind = compression_of(path)
    if kind == "gzip":
        return gzip.open(path, "rb")
    if kind == "bz2":
        return bz2.open(path, "rb")
    if kind == "xz":
        return lzma.open(path, "rb")
    if kind == "zstd":
        import zstandard

        return zstandard.open(path, "rb")
    return open(path, "rb")


class CountingReader(io.RawIOBase):
    """Serves ``head`` first, then the rest of ``stream`` (also used to put back bytes already read);
    counts decompressed bytes and turns decompression errors into :class:`CorruptSource` naming the
    offset reached."""

    def __init__(self, head: bytes, stream: BinaryIO, label: str):
        self._head = memoryview(head)
        self._stream = stream
        self._label = label
        self.bytes_read = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        if self._head:
            n = min(len(buffer), len(self._head))
            buffer[:n] = self._head[:n]
            self._head = self._head[n:]
        else:
            try:
                chunk = self._stream.read(len(buffer))
            except DECOMPRESSION_ERRORS as exc:
                if self._label == "file" and isinstance(exc, OSError):
                    raise  # a plain file's read error is I/O trouble ('unreadable'), not corruption
                raise CorruptSource(f"{self._label} stream broken after {self.bytes_read} bytes: {exc}") from exc
            n = len(chunk)
            buffer[:n] = chunk
        self.bytes_read += n
        return n

    def close(self) -> None:
        self._stream.close()
        super().close()


def looks_binary(head: bytes) -> bool:
    """Binary if NUL bytes are more than a stray few (over 1% of the head), or if there is any NUL
    and the head is not UTF-8 text. A text file with a stray NUL stays text: the NUL is stripped and
    counted later (control_chars_removed)."""
    nuls = head.count(0)
    if not nuls:
        return False
    if nuls > max(2, len(head) // 100):
        return True
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as exc:
        return exc.start < len(head) - 4  # an error only in the last bytes is a cut character
    return False


@dataclass
class Opened:
    stream: io.BufferedReader | None  # None when the file is empty or binary
    encoding: str  # 'utf-8', 'utf-8-sig', 'utf-16-le', ...
    compression: str | None
    head: bytes  # the first SNIFF_BYTES of the decoded (UTF-8) content, for error reports
    binary: bool = False
    empty: bool = False


def open_source(path: Path) -> Opened:
    """Open ``path`` for record reading. Raises CorruptSource on a broken compressed head, OSError on I/O."""
    kind = compression_of(path)
    label = kind or "file"
    raw = _open_raw(path)
    try:
        head = raw.read(SNIFF_BYTES)
    except DECOMPRESSION_ERRORS as exc:
        raw.close()
        if kind is None and isinstance(exc, OSError):
            raise
        raise CorruptSource(f"{label} stream broken at the start: {exc}") from exc
    if not head:
        raw.close()
        return Opened(None, "utf-8", kind, b"", empty=True)
    encoding = "utf-8"
    for bom, name in BOMS:
        if head.startswith(bom):
            encoding = name
            break
    if encoding in ("utf-8", "utf-8-sig"):
        if looks_binary(head):
            raw.close()
            return Opened(None, encoding, kind, head, binary=True)
        if encoding == "utf-8-sig":
            head = head[len(codecs.BOM_UTF8):]
        reader = CountingReader(head, raw, label)
        return Opened(io.BufferedReader(reader, buffer_size=1 << 16), encoding, kind, head)
    # UTF-16/32: transcode to UTF-8 in memory (bounded).
    try:
        rest = raw.read(MAX_TRANSCODE_BYTES + 1 - len(head))
    except DECOMPRESSION_ERRORS as exc:
        raw.close()
        raise CorruptSource(f"{label} stream broken: {exc}") from exc
    raw.close()
    data = head + rest
    if len(data) > MAX_TRANSCODE_BYTES:
        raise CorruptSource(f"{encoding} file larger than {MAX_TRANSCODE_BYTES >> 20} MiB; convert it to UTF-8 first")
    try:
        text = data.decode(encoding)
    except UnicodeDecodeError as exc:
        raise CorruptSource(f"invalid {encoding} at byte {exc.start}") from exc
    utf8 = text.removeprefix("\ufeff").encode("utf-8")
    return Opened(io.BufferedReader(CountingReader(utf8, io.BytesIO(b""), label)), encoding, kind, utf8[:SNIFF_BYTES])
