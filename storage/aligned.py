"""Line-aligned files read as one source of records: line ``i`` of every file is one record whose named fields are
the files' lines (Multi30k's ``train.de`` + ``train.en``). Each file is read as lines whatever its suffix, under an
optional compression suffix, with the readers' line ends (LF, CRLF, CR), BOMs and UTF-16/32 transcoding, strict
decoding and size bound. A line that is bad in one file quarantines the record, its detail naming the field and
the file; lines one file has past the end of another are ``missing_pair_line``, one record each; a file that
cannot be read as lines at all (refused, empty, binary) makes the whole source one quarantine record, as a plain
file is one. Each file is hashed as it is read and checked against its digest, as corpusforge.storage.readers does.
"""

from __future__ import annotations

import io
import os
import stat
from collections.abc import Iterator
from pathlib import Path

from corpusforge.storage.compression import CorruptSource, SourceBytes, open_source
from corpusforge.storage.formats import normalize_line_ends, sized_lines
from corpusforge.storage.readers import (ReaderConfig, SourceChanged, SourceError, SourceFile, batched,
                                        check_digest)
from corpusforge.storage.records import RAW_CAP, FieldSpec, RawRecord, RecordBatch, decode_strict

__all__ = ["AlignedCounts", "aligned_file", "aligned_line_records", "check_aligned_counts", "count_aligned_lines",
           "read_aligned"]


def aligned_file(path: Path, name: str) -> SourceFile:
    """One of several line-aligned files: read as lines whatever its suffix (``train.de``), under an optional
    compression suffix; refused only when it is not a readable regular file."""
    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        return SourceFile(name, path, "unreadable", exc.strerror or str(exc))
    if not stat.S_ISREG(mode):
        return SourceFile(name, path, "not_a_regular_file", "a directory, device, socket or pipe")
    return SourceFile(name, path)


class AlignedCounts(SourceError):
    """Line-aligned files that do not have the same number of lines by the readers' line rule: line ``i`` of one
    is not line ``i`` of the other, so every pair after the first difference would be wrong. One line, naming
    each file's count (and, where lone carriage returns explain it, how many each file holds)."""


def count_aligned_lines(path: Path) -> tuple[int, int]:
    """(lines, lone CRs) of one line-aligned file by the rule its records are read with: LF, CRLF and a lone CR
    each end a line, a last line without an end counts; after decompression and UTF-16/32 transcoding, as
    :func:`read_aligned` reads it. An empty or binary file counts 0 lines (the reader quarantines it whole).
    One streaming pass in 1 MiB blocks: memory does not grow with the file."""
    raw = SourceBytes(path)
    opened = None
    try:
        opened = open_source(path, raw)
        if opened.empty or opened.binary or opened.stream is None:
            return 0, 0
        lf = cr = crlf = 0
        last = b""
        while True:
            block = opened.stream.read(1 << 20)
            if not block:
                break
            lf += block.count(b"\n")
            cr += block.count(b"\r")
            crlf += block.count(b"\r\n") + (last == b"\r" and block[:1] == b"\n")
            last = block[-1:]
        lone = cr - crlf
        return lf + lone + (last not in (b"", b"\n", b"\r")), lone
    finally:
        if opened is not None and opened.stream is not None:
            opened.stream.close()
        raw.release()


def check_aligned_counts(files: dict[str, SourceFile]) -> dict[str, int]:
    """Each file's line count ({key: lines}) when all are equal; :class:`AlignedCounts` otherwise, before any
    record is read. Files the reader refuses (missing, not regular) are left to it: it quarantines them whole."""
    counts: dict[str, tuple[int, int]] = {}
    for key, sf in files.items():
        if sf.refused:
            continue
        try:
            counts[key] = count_aligned_lines(sf.path)
        except (CorruptSource, OSError):
            continue  # the reader reports a broken or unreadable file with its own reason
    if len({lines for lines, _ in counts.values()}) <= 1:
        return {key: lines for key, (lines, _) in counts.items()}
    said = " vs ".join(f"{files[key].name} ({key}) has {lines:,} lines" for key, (lines, _) in counts.items())
    lone = {key: n for key, (_, n) in counts.items() if n}
    hint = ""
    if lone:
        hint = ("; a lone carriage return (\\r) ends a line too: "
                + ", ".join(f"{files[key].name} holds {n:,}" for key, n in lone.items())
                + " (remove them, e.g. tr -d '\\r')")
    raise AlignedCounts(f"line-aligned files must have the same number of lines, line i of each being one pair: "
                        f"{said}{hint}")


def read_aligned(name: str, files: dict[str, SourceFile], cfg: ReaderConfig | None = None, *, spec: FieldSpec,
                 expect_sha256: dict[str, str] | None = None, batches: bool = True
                 ) -> Iterator[RecordBatch | RawRecord]:
    """The records of line-aligned files read as one source ``name``: line ``i`` of each file (``files``: source
    key -> file, the keys ``spec`` reads) is one record (:func:`aligned_line_records`). A file that cannot
    be read as lines (refused, empty, binary) makes the whole source one quarantine record naming its field, as
    a plain file is one. With ``expect_sha256`` (key -> digest) each file is hashed as it is read and checked
    after the last record: :class:`SourceChanged` names the source ``name`` and the file. Good records come in
    RecordBatches unless ``batches`` is false."""
    items = _aligned(name, files, cfg or ReaderConfig(), spec, expect_sha256)
    yield from (batched(items, spec) if batches else items)


def _aligned(name: str, files: dict[str, SourceFile], cfg: ReaderConfig, spec: FieldSpec,
             expect: dict[str, str] | None) -> Iterator[RawRecord]:
    field_of: dict[str, str] = {}
    for field_name, key in spec.text:
        field_of.setdefault(key, field_name)

    def where(key: str) -> str:
        return f"field {field_of.get(key, key)!r} ({files[key].name})"

    refused = next((key for key, sf in files.items() if sf.refused), None)
    if refused is not None:
        yield RawRecord("file", reason=files[refused].refused or "", detail=f"{where(refused)}: {files[refused].detail}")
        return
    raws: dict[str, SourceBytes] = {}
    opened = {}
    count = 0
    try:
        try:
            for key, sf in files.items():
                raws[key] = SourceBytes(sf.path)
                opened[key] = open_source(sf.path, raws[key])
            key = next((k for k, o in opened.items() if o.empty or o.binary), None)
            if key is not None:
                count += 1
                if opened[key].empty:
                    yield RawRecord("file", reason="empty_file", detail=f"{where(key)}: 0 bytes"
                                    + (" after decompression" if files[key].compression else ""))
                else:
                    yield RawRecord("file", reason="binary_file", detail=f"{where(key)}: NUL bytes in the first 8 KiB",
                                    raw=opened[key].head[:RAW_CAP])
            else:
                streams = {k: normalize_line_ends(o.stream) for k, o in opened.items()}
                wide = {k: o.encoding for k, o in opened.items() if o.encoding.startswith(("utf-16", "utf-32"))}
                fallback = {k: "none" if k in wide else cfg.encoding_fallback for k in opened}
                names = {k: sf.name for k, sf in files.items()}
                for rec in aligned_line_records(streams, spec, cfg.max_document_bytes, fallback, wide, names):
                    count += 1
                    yield rec
        except CorruptSource as exc:
            count += 1
            yield RawRecord(f"after-record:{count - 1}", reason="corrupt_compressed", detail=exc.detail)
        except OSError as exc:
            count += 1
            yield RawRecord(f"after-record:{count - 1}", reason="unreadable", detail=exc.strerror or str(exc))
        if count == 0:
            yield RawRecord("file", reason="no_records", detail="the files hold no line")
        if expect is not None:
            for key, raw in raws.items():
                try:
                    check_digest(files[key], raw, expect[key])
                except SourceChanged as exc:
                    raise SourceChanged(name, f"{files[key].name}: {exc.detail}") from exc
    finally:
        for o in opened.values():
            if o.stream is not None:
                o.stream.close()
        for raw in raws.values():
            raw.release()


def aligned_line_records(streams: dict[str, io.BufferedReader], spec: FieldSpec, limit: int,
                         fallback: dict[str, str], wide: dict[str, str], files: dict[str, str]) -> Iterator[RawRecord]:
    """Line-aligned files as records: line ``i`` of every stream (keyed as the keys ``spec`` reads) is record
    ``line:i``. A line undecodable (or over ``limit`` bytes) in one file quarantines the record, the detail naming
    the field and its file; lines that one file has past the end of another are ``missing_pair_line``, one
    record each. ``fallback``: each stream's encoding fallback; ``wide``: the UTF-16/32 encoding of a transcoded
    stream (its bad units are ``invalid_utf16``/``invalid_utf32``); ``files``: each key's file name, for details."""
    field_of = {}
    for name, key in spec.text:
        field_of.setdefault(key, name)
    lines = {key: sized_lines(stream, limit) for key, stream in streams.items()}
    ends: dict[str, int] = {}  # key -> the number of lines of a file that has ended
    lineno = 0
    while True:
        lineno += 1
        got = {}
        for key, it in lines.items():
            try:
                got[key] = None if key in ends else next(it, None)
            except CorruptSource as exc:  # say which file broke
                raise CorruptSource(f"{files.get(key, key)}: {exc.detail}") from exc
            if got[key] is None:
                ends.setdefault(key, lineno - 1)
        present = [key for key, line in got.items() if line is not None]
        if not present:
            return
        locator = f"line:{lineno}"

        def where(key: str) -> str:
            return f"field {field_of.get(key, key)!r} ({files.get(key, key)})"

        if len(present) < len(got):
            ended = [key for key in got if got[key] is None]
            yield RawRecord(locator, reason="missing_pair_line",
                            detail=f"{' and '.join(where(k) for k in present)} has line {lineno}, "
                                   + " and ".join(f"{where(k)} ended at line {ends[k]}" for k in ended),
                            raw=got[present[0]][1][:RAW_CAP])
            continue
        texts: dict[str, str] = {}
        encodings: dict[str, str] = {}
        bad: RawRecord | None = None
        for key, (_, line, total) in got.items():
            if total > limit:
                bad = RawRecord(locator, reason="too_large",
                                detail=f"{where(key)}: {total} bytes > max_document_bytes {limit}", raw=line[:RAW_CAP])
                break
            rec = decode_strict(locator, line, fallback.get(key, "none"))
            if not rec.ok:
                reason, detail = rec.reason, rec.detail
                if wide.get(key):
                    reason = "invalid_" + wide[key][:6].replace("-", "")
                    detail = (f"invalid {wide[key]}: a lone surrogate, a cut code unit or a code point over U+10FFFF "
                              "(raw: the line as UTF-8, each bad byte b as U+DC00+b)")
                bad = RawRecord(locator, reason=reason, detail=f"{where(key)}: {detail}", raw=rec.raw)
                break
            texts[key] = rec.text  # type: ignore[assignment]
            if rec.meta:
                encodings[key] = rec.meta["_encoding"]
        if bad is not None:
            yield bad
            continue
        rec = spec.record(locator, lambda key: (key in texts, texts.get(key)), b"")
        yield RawRecord(locator, meta={"_encoding": encodings} if encodings else None, fields=rec.fields) if rec.ok else rec
