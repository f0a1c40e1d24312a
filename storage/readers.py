"""Source discovery and readers for raw text corpora.

Discovery walks directories recursively in sorted order. A symlink is followed only while its target
stays inside the root the user named; a link that escapes it, or that loops back to a directory being
walked, is *refused*: it becomes a :class:`SourceFile` with a reason instead of being read, so it still
shows up in the accounting. Hidden entries (names starting with '.') are skipped and listed.

Readers yield :class:`RawRecord` objects. A record either carries decoded text or a quarantine
reason with the raw bytes (capped). Decoding is strict UTF-8: nothing undecodable becomes text.

Reason codes (stable, used in manifests): ``empty_file``, ``no_records``, ``binary_file``,
``invalid_utf8``, ``invalid_json``, ``not_an_object``, ``missing_text_field``, ``text_not_string``,
``unreadable``, ``symlink_escape``, ``symlink_loop``, ``unsupported_format``, ``not_a_regular_file``.
"""

from __future__ import annotations

import errno
import json
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

UTF8_BOM = b"\xef\xbb\xbf"
RAW_CAP = 4096  # bytes of the original record kept in quarantine
BINARY_SNIFF = 8192
TEXT_SUFFIXES = {".txt", ".text", ".md"}
JSONL_SUFFIXES = {".jsonl", ".ndjson"}
SUPPORTED_SUFFIXES = TEXT_SUFFIXES | JSONL_SUFFIXES
TXT_MODES = ("line", "paragraph", "file")


@dataclass(frozen=True)
class ReaderConfig:
    """How raw files are split into records."""

    txt_mode: Literal["line", "paragraph", "file"] = field(
        default="line",
        metadata={"doc": "Text files: one document per line, per blank-line-separated paragraph, or per file."},
    )
    text_field: str = field(default="text", metadata={"doc": "JSONL: the field holding the text; others go to meta."})

    def __post_init__(self) -> None:
        if not self.text_field:
            raise ValueError("text_field: must be a non-empty field name")


class SourceError(ValueError):
    """A source the user named that cannot be used at all (missing path, clashing names)."""


@dataclass(frozen=True)
class SourceFile:
    """One file found under a source root. ``refused`` is a reason code when it must not be read."""

    name: str
    path: Path
    refused: str | None = None
    detail: str = ""

    @property
    def format(self) -> str | None:
        suffix = self.path.suffix.lower()
        if suffix in TEXT_SUFFIXES:
            return "txt"
        if suffix in JSONL_SUFFIXES:
            return "jsonl"
        return None


@dataclass
class Discovery:
    files: list[SourceFile] = field(default_factory=list)
    skipped_hidden: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class RawRecord:
    locator: str
    text: str | None = None
    meta: dict[str, Any] | None = None
    reason: str | None = None
    detail: str = ""
    raw: bytes | None = None

    @property
    def ok(self) -> bool:
        return self.reason is None


def _within(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def discover_sources(sources: list[str | os.PathLike[str]]) -> Discovery:
    """Expand files and directories into a sorted list of source files with stable names.

    A file named directly is called by its base name; a file found under a directory ``d`` is called
    ``basename(d)/relative/path``. Names must be unique across all sources.
    """
    found = Discovery()
    for src in sources:
        path = Path(src).expanduser()
        if not path.exists() and not path.is_symlink():
            raise SourceError(f"source {str(src)!r} does not exist")
        if path.is_dir():
            root = os.path.realpath(path)
            label = Path(root).name or "root"
            _walk(Path(path), root, label, {root}, found)
        else:
            found.files.append(_classify_file(path, path.name))
    seen: dict[str, SourceFile] = {}
    for sf in found.files:
        if sf.name in seen:
            raise SourceError(
                f"two sources would both be named {sf.name!r} ({seen[sf.name].path} and {sf.path}); "
                "pass their common parent directory instead"
            )
        seen[sf.name] = sf
    return found


def _walk(directory: Path, root: str, label: str, ancestors: set[str], found: Discovery) -> None:
    try:
        entries = sorted(os.scandir(directory), key=lambda e: e.name)
    except OSError as exc:
        found.files.append(SourceFile(label, directory, "unreadable", f"cannot list directory: {exc.strerror}"))
        return
    for entry in entries:
        name = f"{label}/{entry.name}"
        path = Path(entry.path)
        if entry.name.startswith("."):
            found.skipped_hidden.append(name)
            continue
        if entry.is_symlink():
            try:
                target = os.path.realpath(path, strict=True)
            except OSError as exc:
                if exc.errno == errno.ELOOP:  # a cycle of links (a -> b -> a)
                    found.files.append(SourceFile(name, path, "symlink_loop", "the link chain loops"))
                else:
                    found.files.append(SourceFile(name, path, "unreadable", f"dangling symlink: {exc.strerror}"))
                continue
            if not _within(target, root):
                found.files.append(SourceFile(name, path, "symlink_escape", "points outside the input root"))
                continue
            if target in ancestors:
                found.files.append(SourceFile(name, path, "symlink_loop", "loops back to a parent directory"))
                continue
        try:
            is_dir = entry.is_dir(follow_symlinks=True)
        except OSError as exc:
            found.files.append(SourceFile(name, path, "unreadable", str(exc)))
            continue
        if is_dir:
            real = os.path.realpath(path)
            if real in ancestors:
                found.files.append(SourceFile(name, path, "symlink_loop", f"loops back to {real}"))
                continue
            _walk(path, root, name, ancestors | {real}, found)
        else:
            found.files.append(_classify_file(path, name))


def _classify_file(path: Path, name: str) -> SourceFile:
    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        return SourceFile(name, path, "unreadable", exc.strerror or str(exc))
    if not stat.S_ISREG(mode):
        return SourceFile(name, path, "not_a_regular_file", "device, socket or pipe")
    sf = SourceFile(name, path)
    if sf.format is None:
        return SourceFile(name, path, "unsupported_format", f"suffix {path.suffix or '(none)'!r} is not one of {sorted(SUPPORTED_SUFFIXES)}")
    return sf


def _decode(data: bytes) -> tuple[str | None, str]:
    try:
        return data.decode("utf-8"), ""
    except UnicodeDecodeError as exc:
        return None, f"invalid UTF-8 at byte {exc.start}: {data[exc.start:exc.start + 4]!r}"


def read_records(source: SourceFile, *, txt_mode: str = "line", text_field: str = "text") -> Iterator[RawRecord]:
    """Yield every record of one source file, good or bad. Always yields at least one record."""
    if source.refused:
        yield RawRecord("file", reason=source.refused, detail=source.detail)
        return
    if txt_mode not in TXT_MODES:
        raise ValueError(f"txt_mode must be one of {TXT_MODES}, got {txt_mode!r}")
    count = 0
    try:
        with open(source.path, "rb") as fh:
            head = fh.read(BINARY_SNIFF)
            if not head:
                yield RawRecord("file", reason="empty_file", detail="0 bytes")
                return
            if b"\x00" in head:
                yield RawRecord("file", reason="binary_file", detail="NUL byte in the first 8 KiB", raw=head[:RAW_CAP])
                return
            fh.seek(3 if head.startswith(UTF8_BOM) else 0)  # a UTF-8 BOM is an encoding mark, not text
            if source.format == "jsonl":
                records = _jsonl_records(fh, text_field)
            elif txt_mode == "line":
                records = _line_records(fh)
            elif txt_mode == "paragraph":
                records = _paragraph_records(fh)
            else:
                records = _file_records(fh)
            for rec in records:
                count += 1
                yield rec
    except OSError as exc:
        count += 1
        yield RawRecord(f"after-record:{count - 1}", reason="unreadable", detail=exc.strerror or str(exc))
    if count == 0:
        yield RawRecord("file", reason="no_records", detail="the file holds only whitespace")


def _lines(fh) -> Iterator[tuple[int, bytes]]:
    for lineno, line in enumerate(fh, start=1):
        yield lineno, line.rstrip(b"\n").rstrip(b"\r")


def _text_record(locator: str, data: bytes) -> RawRecord:
    text, detail = _decode(data)
    if text is None:
        return RawRecord(locator, reason="invalid_utf8", detail=detail, raw=data[:RAW_CAP])
    return RawRecord(locator, text=text)


def _line_records(fh) -> Iterator[RawRecord]:
    for lineno, line in _lines(fh):
        yield _text_record(f"line:{lineno}", line)


def _paragraph_records(fh) -> Iterator[RawRecord]:
    block: list[bytes] = []
    start = 0
    for lineno, line in _lines(fh):
        if line.strip():
            if not block:
                start = lineno
            block.append(line)
        elif block:
            yield _text_record(f"lines:{start}-{lineno - 1}", b"\n".join(block))
            block = []
    if block:
        yield _text_record(f"lines:{start}-{start + len(block) - 1}", b"\n".join(block))


def _file_records(fh) -> Iterator[RawRecord]:
    data = fh.read()
    if data.strip():
        yield _text_record("file", data)


def _jsonl_records(fh, text_field: str) -> Iterator[RawRecord]:
    for lineno, line in _lines(fh):
        locator = f"line:{lineno}"
        if not line.strip():
            yield RawRecord(locator, text="")  # an empty record: the filter stage counts it as 'empty'
            continue
        text, detail = _decode(line)
        if text is None:
            yield RawRecord(locator, reason="invalid_utf8", detail=detail, raw=line[:RAW_CAP])
            continue
        try:
            obj = json.loads(text)
        except ValueError as exc:
            yield RawRecord(locator, reason="invalid_json", detail=str(exc)[:200], raw=line[:RAW_CAP])
            continue
        if not isinstance(obj, dict):
            yield RawRecord(locator, reason="not_an_object", detail=type(obj).__name__, raw=line[:RAW_CAP])
            continue
        if text_field not in obj:
            yield RawRecord(locator, reason="missing_text_field", detail=f"no field {text_field!r}", raw=line[:RAW_CAP])
            continue
        value = obj.pop(text_field)
        if not isinstance(value, str):
            yield RawRecord(locator, reason="text_not_string", detail=type(value).__name__, raw=line[:RAW_CAP])
            continue
        try:  # JSON escapes can encode lone surrogates ("\ud800"), which are not valid Unicode text
            value.encode("utf-8")
            json.dumps(obj, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError as exc:
            yield RawRecord(locator, reason="invalid_utf8", detail=f"lone surrogate escape: {exc.reason}",
                            raw=line[:RAW_CAP])
            continue
        yield RawRecord(locator, text=value, meta=obj)
