"""Opening a source file: transparent decompression, encoding marks and binary sniffing.

``open_source(path, SourceBytes(path))`` returns a buffered binary stream of the *decompressed, UTF-8* bytes
plus what was detected; :class:`SourceBytes` hashes the file's raw bytes as they are read, so the reader can
prove the records came from the bytes a source's id was made from (``SourceBytes.proof``). Compression is chosen by suffix (.gz, .bz2, .xz, .zst). A byte-order mark decides the
encoding: a UTF-8 BOM is dropped; UTF-16/32 (LE/BE) files are decoded and re-encoded to UTF-8 as they
are read. Everything is streamed in bounded chunks, whatever the file's size.

A compressed stream that ends early is an error, never a silent end of file: gzip, bz2 and xz say so
themselves; python-zstandard's reader just stops, so the frames of a ``.zst`` file are walked (headers
and block sizes only, no decompression) when its reader reaches the end (:func:`zstd_frames_problem`).
"""

from __future__ import annotations

import bz2
import codecs
import gzip
import hashlib
import io
import lzma
import os
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

COMPRESSION_SUFFIXES = {".gz": "gzip", ".bz2": "bz2", ".xz": "xz", ".zst": "zstd"}
SNIFF_BYTES = 8192
TRANSCODE_CHUNK = 1 << 16  # bytes of UTF-16/32 decoded at a time
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


class SourceBytes(io.RawIOBase):
    """A source file's raw bytes as the readers (or a decompressor) read them, hashed on the way: one pass, so
    the digest is of the very bytes that became records, not of a second read. ``proof()`` hashes what is left
    unread (a reader that stopped early) and says whether the file changed while it was open (its fstat before
    and after: size, mtime, ctime, inode)."""

    def __init__(self, path: Path):
        self._fd = -1
        self._fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        try:
            self.before = os.fstat(self._fd)
        except OSError:
            self.release()
            raise
        self._hash = hashlib.sha256()
        self.size = 0
        self.name = str(path)

    def readable(self) -> bool:
        return True

    def fileno(self) -> int:
        return self._fd

    def readinto(self, buffer) -> int:
        n = os.readv(self._fd, [buffer])
        if n:
            self._hash.update(memoryview(buffer)[:n])
            self.size += n
        return n

    def proof(self) -> ReadProof:
        """Read (and hash) the rest of the file, then compare its fstat with the one taken when it was opened."""
        while data := os.read(self._fd, 1 << 20):
            self._hash.update(data)
            self.size += len(data)
        after = os.fstat(self._fd)
        return ReadProof(self._hash.hexdigest(), self.size, _stamp(self.before) == _stamp(after))

    def close(self) -> None:
        """Nothing: the layers read through it close it with themselves, but :meth:`proof` comes after them."""

    def release(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        super().close()

    def __del__(self) -> None:
        self.release()


def _stamp(st: os.stat_result) -> tuple[int, ...]:
    return st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns


@dataclass(frozen=True)
class ReadProof:
    """What a read saw: the sha256 and size of the bytes read, and whether the file's stat stayed the same."""

    sha256: str
    size: int
    stable: bool


def _open_raw(path: Path, source: BinaryIO) -> BinaryIO:
    """The decompressed bytes of ``source`` (the file at ``path``, opened as :class:`SourceBytes`), which stays
    the caller's to close: the decompressors do not close a file object they were given."""
    kind = compression_of(path)
    buffered = io.BufferedReader(source, buffer_size=1 << 16)  # type: ignore[arg-type]
    if kind == "gzip":
        return gzip.GzipFile(fileobj=buffered, mode="rb")
    if kind == "bz2":
        return bz2.BZ2File(buffered, "rb")
    if kind == "xz":
        return lzma.LZMAFile(buffered, "rb")
    if kind == "zstd":
        return io.BufferedReader(ZstdReader(buffered), buffer_size=1 << 16)
    return buffered


ZSTD_MAGIC = 0xFD2FB528
SKIPPABLE_MAGIC = range(0x184D2A50, 0x184D2A60)


def zstd_frames_problem(fh: BinaryIO) -> str | None:
    """Walk the frames of a zstd file (frame headers and block headers, skipping block contents): None if
    every frame is complete, else what is wrong and where. A cut anywhere, even inside the last block's
    checksum, is found; contents are checked by the decompressor itself."""
    fd = fh.fileno()
    size = os.fstat(fd).st_size
    pos = 0

    def take(n: int) -> bytes:  # positional reads: the file's own offset (where hashing reads) stays put
        nonlocal pos
        data = os.pread(fd, n, pos)
        pos += len(data)
        return data

    while pos < size:
        start = pos
        magic = take(4)
        if len(magic) < 4:
            return f"truncated frame header at byte {start} of {size}"
        number = int.from_bytes(magic, "little")
        if number in SKIPPABLE_MAGIC:
            length = take(4)
            if len(length) < 4 or pos + int.from_bytes(length, "little") > size:
                return f"truncated skippable frame at byte {start} of {size}"
            pos += int.from_bytes(length, "little")
            continue
        if number != ZSTD_MAGIC:
            return f"no zstd frame at byte {start} of {size}"
        descriptor = take(1)
        if not descriptor:
            return f"truncated frame header at byte {start} of {size}"
        flags = descriptor[0]
        single_segment = bool(flags & 0x20)
        fcs = (1 if single_segment else 0, 2, 4, 8)[flags >> 6]
        header = (0 if single_segment else 1) + (0, 1, 2, 4)[flags & 3] + fcs
        checksum = 4 if flags & 0x04 else 0
        pos += header
        while True:
            block = take(3)
            if len(block) < 3:
                return f"frame starting at byte {start} cut at byte {size} (no end-of-frame block)"
            value = int.from_bytes(block, "little")
            kind, length = (value >> 1) & 3, value >> 3
            pos += 1 if kind == 1 else length  # an RLE block stores one byte
            if value & 1:
                break
        pos += checksum
        if pos > size:
            return f"frame starting at byte {start} cut at byte {size} (its last block needs {pos - size} more bytes)"
    return None


class ZstdReader(io.RawIOBase):
    """The decompressed bytes of a (multi-frame) ``.zst`` file, with errors raised as the other
    decompressors raise them: a bad frame as ValueError, a file that ends inside a frame as EOFError."""

    def __init__(self, fh: BinaryIO):
        import zstandard

        self._error = zstandard.ZstdError
        self._fh = fh
        self._reader = zstandard.ZstdDecompressor().stream_reader(self._fh, read_across_frames=True, closefd=False)

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        try:
            data = self._reader.read(len(buffer))
        except self._error as exc:
            raise ValueError(str(exc)) from exc
        if not data:
            problem = zstd_frames_problem(self._fh)
            if problem:
                raise EOFError(f"compressed file ended before the end of a frame: {problem}")
        n = len(data)
        buffer[:n] = data
        return n

    def close(self) -> None:
        self._reader.close()
        super().close()


UNDECODABLE = "corpusforge-undecodable"


def _undecodable(exc: UnicodeError) -> tuple[str, int]:
    """Codec error handler: each byte of an invalid unit becomes a lone surrogate (U+DC00 + byte), which
    ``surrogatepass`` writes as 3 bytes that are not UTF-8. Valid UTF-16/32 never decodes to a lone surrogate,
    so these are the only undecodable bytes of a transcoded stream: the record holding them is quarantined
    by the UTF-8 readers, and the text around it is kept (UTF-16/32 units are fixed size: decoding goes on
    right after the bad unit)."""
    if not isinstance(exc, UnicodeDecodeError):
        raise exc
    return "".join(chr(0xDC00 + b) for b in exc.object[exc.start:exc.end]), exc.end


codecs.register_error(UNDECODABLE, _undecodable)


class Transcoder(io.RawIOBase):
    """UTF-16/32 bytes from ``stream`` as UTF-8, decoded in bounded chunks (``TRANSCODE_CHUNK``). An invalid
    unit (a lone surrogate, a cut last unit, a code point over U+10FFFF) becomes bytes that are not UTF-8
    (:func:`_undecodable`), so only the record that holds it is lost."""

    def __init__(self, stream: BinaryIO, encoding: str):
        self._stream, self._encoding = stream, encoding
        self._decoder = codecs.getincrementaldecoder(encoding)(UNDECODABLE)
        self._pending = b""
        self._done = False

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        while not self._pending and not self._done:
            data = self._stream.read(TRANSCODE_CHUNK)
            self._done = not data
            self._pending = self._decoder.decode(data, final=self._done).encode("utf-8", "surrogatepass")
        n = min(len(buffer), len(self._pending))
        buffer[:n] = self._pending[:n]
        self._pending = self._pending[n:]
        return n

    def close(self) -> None:
        self._stream.close()
        super().close()


class Chunked:
    """``read(n)`` of up to n bytes made of single raw reads (``read1``), so that when a stream breaks
    (a truncated or corrupt compressed file) the bytes decoded before the break are handed over first and
    the error is raised by the next call. A plain ``BufferedReader.read(n)`` drops everything it had
    gathered for that call when one of its raw reads fails: the fast paths read 8 MiB at a time and lost
    the good records before a cut that the line-by-line reader kept."""

    __slots__ = ("stream", "error")

    def __init__(self, stream: BinaryIO):
        self.stream, self.error = stream, None

    def read(self, size: int) -> bytes:
        if self.error is not None:
            error, self.error = self.error, None
            raise error
        parts, n = [], 0
        while n < size:
            try:
                data = self.stream.read1(size - n)
            except Exception as exc:  # noqa: BLE001 - re-raised as it is by the next call
                if not parts:
                    raise
                self.error = exc
                break
            if not data:
                break
            parts.append(data)
            n += len(data)
        return parts[0] if len(parts) == 1 else b"".join(parts)


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
            try:  # one decompressor read: what it decoded before a break is not lost with the error
                read1 = getattr(self._stream, "read1", None)
                chunk = read1(len(buffer)) if read1 is not None else self._stream.read(len(buffer))
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


class _Resume:
    """A stream whose first ``read1``/``read`` raises ``error`` (the break met while the head was read), so that
    the records in the head are read first and the break is reported after them, where it is."""

    def __init__(self, stream: BinaryIO, error: BaseException):
        self._stream, self._error = stream, error

    def read1(self, size: int = -1) -> bytes:
        error, self._error = self._error, None
        if error is not None:
            raise error
        return self._stream.read1(size)

    read = read1

    def close(self) -> None:
        self._stream.close()


def _read_head(raw: BinaryIO, size: int) -> tuple[bytes, BaseException | None]:
    """Up to ``size`` bytes in single decompressor reads (``read1``): a break after some bytes keeps them and
    returns the error, where ``read(size)`` would lose them with it (a small truncated .jsonl.gz lost every
    record, "broken at the start")."""
    parts: list[bytes] = []
    got = 0
    while got < size:
        try:
            data = raw.read1(size - got)
        except DECOMPRESSION_ERRORS as exc:
            return b"".join(parts), exc
        if not data:
            break
        parts.append(data)
        got += len(data)
    return b"".join(parts), None


def open_source(path: Path, source: SourceBytes) -> Opened:
    """Open ``path`` for record reading, its bytes read through ``source`` (which the caller closes, after the
    stream). Raises CorruptSource on a broken compressed head, OSError on I/O."""
    kind = compression_of(path)
    label = kind or "file"
    raw = _open_raw(path, source)
    head, error = _read_head(raw, SNIFF_BYTES)
    if error is not None:
        if not head or (kind is None and isinstance(error, OSError)):
            raw.close()
            if kind is None and isinstance(error, OSError):
                raise error
            raise CorruptSource(f"{label} stream broken at the start: {error}") from error
        raw = _Resume(raw, error)  # type: ignore[assignment]
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
    # UTF-16/32: transcoded to UTF-8 chunk by chunk, so memory stays bounded whatever the file's size.
    bom = next(mark for mark, name in BOMS if name == encoding)
    transcoder = Transcoder(CountingReader(head[len(bom):], raw, label), encoding)
    try:
        utf8_head = transcoder.read(SNIFF_BYTES)
    except CorruptSource as exc:  # the head holds only the BOM and part of a unit before the break
        transcoder.close()
        raise CorruptSource(f"{label} stream broken at the start: {exc.detail}") from exc
    reader = CountingReader(utf8_head, transcoder, label)
    return Opened(io.BufferedReader(reader, buffer_size=1 << 16), encoding, kind, utf8_head)
