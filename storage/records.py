"""The record type every reader yields, and strict decoding."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

RAW_CAP = 4096  # bytes of the original record kept in quarantine


@dataclass(frozen=True)
class RawRecord:
    """A record that either carries decoded text or a quarantine reason with the raw bytes (capped)."""

    locator: str
    text: str | None = None
    meta: dict[str, Any] | None = None
    reason: str | None = None
    detail: str = ""
    raw: bytes | None = None

    @property
    def ok(self) -> bool:
        return self.reason is None


def decode_strict(locator: str, data: bytes, fallback: str = "none") -> RawRecord:
    """Strict UTF-8; with ``fallback='charset-normalizer'`` an undecodable record is decoded with the
    detected encoding instead, which is recorded in the record's meta as ``_encoding``."""
    try:
        return RawRecord(locator, text=data.decode("utf-8"))
    except UnicodeDecodeError as exc:
        detail = f"invalid UTF-8 at byte {exc.start}: {data[exc.start:exc.start + 4]!r}"
    if fallback == "charset-normalizer":
        from charset_normalizer import from_bytes

        best = from_bytes(data).best()
        if best is not None and best.encoding not in ("utf_8", "utf-8"):
            return RawRecord(locator, text=str(best), meta={"_encoding": best.encoding})
    return RawRecord(locator, reason="invalid_utf8", detail=detail, raw=data[:RAW_CAP])


@dataclass
class RecordBatch:
    """Many good records at once (the fast path): parallel lists of locators, texts and JSON metas."""

    locators: list[str]
    texts: list[str]
    metas: list[str | None] | None = None  # JSON text per record, or None for a batch without meta

    def __len__(self) -> int:
        return len(self.texts)
