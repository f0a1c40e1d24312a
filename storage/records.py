"""The record type every reader yields, strict decoding, and named fields (:class:`FieldSpec`)."""

from __future__ import annotations

import re
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
    fields: dict[str, Any] | None = None  # a record with named fields: field -> text (str) or label (int or str)

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


# --- named fields --------------------------------------------------------------------------------------------

# Columns every corpus row has besides its fields: a field cannot take one of these names.
RESERVED_COLUMNS = ("doc_id", "source", "locator", "split", "n_chars", "n_words", "content_hash", "lang", "meta")
LABEL_TYPES = ("int", "str")
_INT64 = 2**63
_DECIMAL = re.compile(r"[+-]?[0-9]{1,19}")


@dataclass(frozen=True)
class FieldSpec:
    """The named fields of a record: its text fields and its labels, each read from a key of the source (a
    JSON key or dotted path, a CSV/TSV/Parquet column, or the key of a file of line-aligned files).

    ``text``: (field, key) pairs, in column order; ``labels``: (field, key, type) with type ``int`` or ``str``.
    A record is good only if every field is: the first bad field makes the whole record a quarantine record
    whose detail names that field (``missing_text_field``, ``text_not_string``, ``missing_label``,
    ``bad_label``).

    ``join``: a text field whose value is a list of strings (an abstract's sentences, several reference summaries)
    becomes its items joined by this separator: each item stripped, the separator inside an item turned into one
    space (so the items can be split again), empty items left out. None: a list is ``text_not_string``."""

    text: tuple[tuple[str, str], ...]
    labels: tuple[tuple[str, str, str], ...] = ()
    join: str | None = None

    @property
    def names(self) -> tuple[str, ...]:
        """The text fields, in order."""
        return tuple(name for name, _ in self.text)

    @property
    def label_names(self) -> tuple[str, ...]:
        return tuple(name for name, _, _ in self.labels)

    @property
    def columns(self) -> tuple[str, ...]:
        return self.names + self.label_names

    @property
    def keys(self) -> tuple[str, ...]:
        """The source keys the fields are read from (what the rest of a record's ``meta`` leaves out)."""
        return tuple(dict.fromkeys([key for _, key in self.text] + [key for _, key, _ in self.labels]))

    def record(self, locator: str, lookup, raw: bytes, meta: dict[str, Any] | None = None) -> RawRecord:
        """The record of one source row: ``lookup(key) -> (found, value)``; ``raw`` is kept (capped) when it is
        quarantined, ``meta`` when it is good."""
        values: dict[str, Any] = {}

        def bad(reason: str, detail: str) -> RawRecord:
            return RawRecord(locator, reason=reason, detail=detail, raw=raw[:RAW_CAP])

        for name, key in self.text:
            found, value = lookup(key)
            where = f"field {name!r}" + (f" ({key!r})" if key != name else "")
            if not found or value is None:
                return bad("missing_text_field", f"{where}: {'null' if found else 'absent'}")
            if isinstance(value, list) and self.join is not None:
                if not all(isinstance(item, str) for item in value):
                    kinds = sorted({type(item).__name__ for item in value if not isinstance(item, str)})
                    return bad("text_not_string", f"{where}: a list with {', '.join(kinds)} items")
                value = join_items(value, self.join)
            if not isinstance(value, str):
                return bad("text_not_string", f"{where}: {type(value).__name__}"
                           + (" (set reader.join_lists to join a list of strings)" if isinstance(value, list) else ""))
            values[name] = value
        for name, key, kind in self.labels:
            found, value = lookup(key)
            where = f"label {name!r}" + (f" ({key!r})" if key != name else "")
            if not found or value is None or (isinstance(value, str) and not value.strip()):
                return bad("missing_label", f"{where}: {'absent' if not found else 'null' if value is None else 'empty'}")
            ok, got = parse_label(value, kind)
            if not ok:
                return bad("bad_label", f"{where}: {got}")
            values[name] = got
        return RawRecord(locator, meta=meta or None, fields=values)

    def blank(self) -> dict[str, Any]:
        """The fields of a blank line (JSONL): empty texts, no labels; the ``empty`` filter drops it, as it drops a
        blank line without named fields."""
        return {**dict.fromkeys(self.names, ""), **dict.fromkeys(self.label_names)}

    def polars_schema(self) -> dict[str, Any]:
        """locator, the text fields, the labels (Int64 or String) and meta: a batch's columns."""
        import polars as pl

        return {"locator": pl.String, **dict.fromkeys(self.names, pl.String),
                **{name: pl.Int64 if kind == "int" else pl.String for name, _, kind in self.labels},
                "meta": pl.String}

    def batch(self, records: list[RawRecord]) -> RecordBatch:
        """Good records with fields as one batch (a polars frame of :meth:`polars_schema`)."""
        import polars as pl

        data: dict[str, list] = {"locator": [r.locator for r in records]}
        for name in self.columns:
            data[name] = [r.fields[name] for r in records]  # type: ignore[index]
        data["meta"] = [meta_json(r.meta) for r in records]
        return RecordBatch(frame=pl.DataFrame(data, schema=self.polars_schema()))


def join_items(items: list[str], separator: str) -> str:
    """A list-valued text field as one text (:class:`FieldSpec` ``join``)."""
    cleaned = (item.replace(separator, " ").strip() for item in items)
    return separator.join(item for item in cleaned if item)


def parse_label(value: Any, kind: str) -> tuple[bool, Any]:
    """(True, the label as ``kind``) or (False, why not). ``int``: a JSON/Parquet integer or a string of decimal
    digits (CSV/TSV cells), within 64 bits; not a bool or a float (``1.0`` is refused rather than guessed).
    ``str``: a string without its surrounding whitespace (`` positive`` is ``positive``; labels are not otherwise
    cleaned), or an integer written in decimal."""
    if kind == "int":
        if isinstance(value, bool) or not isinstance(value, (int, str)):
            return False, f"{value!r} is not an integer ({type(value).__name__}); a text label needs type: str"
        if isinstance(value, str):
            digits = value.strip()
            if not _DECIMAL.fullmatch(digits):
                return False, f"{value[:40]!r} is not an integer; a text label needs type: str"
            value = int(digits)
        if not -_INT64 <= value < _INT64:
            return False, f"{value} does not fit in 64 bits"
        return True, value
    if isinstance(value, str):
        return True, value.strip()
    if isinstance(value, int) and not isinstance(value, bool):
        return True, str(value)
    return False, f"{value!r} is not a string ({type(value).__name__})"
