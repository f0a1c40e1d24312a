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


class RecordBatch:
    """Many good records at once (the fast paths): locators, texts and JSON metas, in record order.

    Built either from parallel Python lists (the text reader) or from a polars frame with the columns
    ``locator, text, meta`` (the JSONL/CSV readers, which never materialise one Python object per
    record). ``frame()`` gives the polars form, the list attributes the Python one; each converts lazily.
    """

    def __init__(self, locators: list[str] | None = None, texts: list[str] | None = None,
                 metas: list[str | None] | None = None, *, frame=None):
        if frame is None and (locators is None or texts is None):
            raise ValueError("RecordBatch needs locators and texts, or a frame")
        self._locators, self._texts, self._metas, self._frame = locators, texts, metas, frame

    @property
    def locators(self) -> list[str]:
        if self._locators is None:
            self._locators = self._frame["locator"].to_list()
        return self._locators

    @property
    def texts(self) -> list[str]:
        if self._texts is None:
            self._texts = self._frame["text"].to_list()
        return self._texts

    @property
    def metas(self) -> list[str | None] | None:
        """JSON text per record, or None for a batch without any meta."""
        if self._frame is not None and self._metas is None:
            self._metas = self._frame["meta"].to_list()
        return self._metas

    def frame(self):
        """The batch as a polars frame: locator, text, meta (all strings; meta may be null)."""
        import polars as pl

        if self._frame is None:
            metas = self._metas if self._metas is not None else [None] * len(self._texts)
            self._frame = pl.DataFrame({"locator": self._locators, "text": self._texts, "meta": metas},
                                       schema=dict.fromkeys(BATCH_COLUMNS, pl.String))
        return self._frame

    def __len__(self) -> int:
        return self._frame.height if self._frame is not None else len(self._texts)


BATCH_COLUMNS = ("locator", "text", "meta")


def meta_json(meta: dict[str, Any] | None) -> str | None:
    """How a record's meta is stored: sorted keys, non-ASCII kept, None for no (or empty) meta."""
    import json

    return json.dumps(meta, sort_keys=True, ensure_ascii=False) if meta else None


def ids_column(field: str) -> str:
    """The column of token ids that the encode step writes for the text field ``field`` (``src`` -> ``src_ids``):
    one rule for the tokenizer stage that writes it and the stages and collates that read it. (A corpus with only
    ``text`` and no named fields keeps its one ``ids`` column, as before fields existed.)"""
    return f"{field}_ids"
