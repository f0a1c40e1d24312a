"""Labelled files as the commands that score or inspect them read them (``classify evaluate``, the column finder of
``classify train``): TSV, CSV or JSONL rows with a header (TSV, CSV) or keys (JSONL), read by the corpus readers'
rules. A ``.tsv`` has no quoting unless asked for (GLUE, SST-2 and CoNLL write none: a double quote is text, each
line one row); a row with another number of fields than the header is ``ragged_row``. Nothing is dropped without
being counted: :class:`Labelled` holds the rows read, the rows kept and, per reason, the lines dropped."""

from __future__ import annotations

import csv
import itertools
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["Labelled", "LabelledError", "is_tsv", "labelled_rows", "read_labelled"]


class LabelledError(ValueError):
    """A file that cannot be read as labelled rows at all (not UTF-8, broken JSON, no such columns): one line."""


def is_tsv(path: Path) -> bool:
    suffix = "".join(Path(path).suffixes[-2:]).lower()
    return ".tsv" in suffix or ".tab" in suffix


def _is_jsonl(path: Path) -> bool:
    suffix = "".join(Path(path).suffixes[-2:]).lower()
    return ".jsonl" in suffix or ".ndjson" in suffix or suffix.endswith(".json")


def labelled_rows(path: Path, quoting: bool | None = None) -> tuple[list[str], Iterator[tuple[int, dict | None, str]]]:
    """(columns, rows): each row is (its line, its fields by column or None, why it is None). ``quoting``:
    default on for CSV, off for TSV. Raises LabelledError for a file that is not UTF-8 text."""
    from corpusforge.storage.fast_csv import csv_reader

    path = Path(path)
    try:
        fh = open(path, encoding="utf-8-sig", newline="")
    except OSError as exc:
        raise LabelledError(f"{path}: {exc.strerror or exc}") from exc
    if _is_jsonl(path):
        def jsonl() -> Iterator[tuple[int, dict | None, str]]:
            with fh:
                for lineno, line in enumerate(_lines(fh, path), 1):
                    if not line.strip():
                        continue
                    try:
                        row = json.loads(line)
                    except json.JSONDecodeError as exc:
                        yield lineno, None, f"invalid_json ({exc.msg})"
                        continue
                    yield (lineno, row, "") if isinstance(row, dict) else (lineno, None, "not_an_object")
        rows = jsonl()
        first = list(itertools.islice(rows, 1000))
        columns = next((list(r) for _, r, _ in first if r is not None), [])
        return columns, itertools.chain(first, rows)
    tsv = is_tsv(path)
    reader = csv_reader(_lines(fh, path), "\t" if tsv else ",", (not tsv) if quoting is None else quoting)
    try:
        header = next(reader, [])
    except csv.Error as exc:
        fh.close()
        raise LabelledError(f"{path}: header: {exc}") from exc

    def table() -> Iterator[tuple[int, dict | None, str]]:
        with fh:
            while True:
                try:
                    row = next(reader)
                except StopIteration:
                    return
                except csv.Error as exc:
                    yield reader.line_num, None, f"invalid_csv ({exc})"
                    continue
                if not row:
                    continue  # a blank line is no record
                if len(row) != len(header):
                    yield reader.line_num, None, "ragged_row"
                    continue
                yield reader.line_num, dict(zip(header, row)), ""

    return list(header), table()


def _lines(fh, path: Path) -> Iterator[str]:
    try:
        yield from fh
    except UnicodeDecodeError as exc:
        raise LabelledError(f"{path}: {_first_bad_line(path)} is not UTF-8") from exc


def _first_bad_line(path: Path) -> str:
    """'line N (byte B)': the first line that does not decode, read again in binary (a text stream's decode
    error gives a position inside its block only)."""
    with open(path, "rb") as fh:
        for lineno, line in enumerate(fh, 1):
            try:
                line.decode("utf-8")
            except UnicodeDecodeError as exc:
                return f"line {lineno} (byte {exc.start + 1}: {line[exc.start:exc.start + 1]!r})"
    return "a line"


@dataclass
class Labelled:
    """What a labelled file gave: ``texts`` and ``labels`` of the rows kept, ``read`` rows in all, and ``dropped``
    (reason -> the lines dropped for it)."""

    columns: list[str]
    text_column: str
    label_column: str
    texts: list[str] = field(default_factory=list)
    labels: list[Any] = field(default_factory=list)
    read: int = 0
    dropped: dict[str, list[int]] = field(default_factory=dict)

    @property
    def kept(self) -> int:
        return len(self.texts)

    def accounting(self) -> dict[str, Any]:
        """records_read, records_scored and records_dropped ({reason: count}), with the first lines of each."""
        return {"records_read": self.read, "records_scored": self.kept,
                "records_dropped": {reason: len(lines) for reason, lines in sorted(self.dropped.items())},
                "dropped_lines": {reason: lines[:10] for reason, lines in sorted(self.dropped.items())}}

    def summary(self) -> str:
        """One line: '1,000 records read, 998 scored, 2 dropped: ragged_row 2 (lines 5, 9)'."""
        text = f"{self.read:,} records read, {self.kept:,} scored"
        if self.dropped:
            parts = []
            for reason, lines in sorted(self.dropped.items()):
                shown = ", ".join(map(str, lines[:5])) + (", ..." if len(lines) > 5 else "")
                parts.append(f"{reason} {len(lines):,} (line{'s' if len(lines) > 1 else ''} {shown})")
            text += f", {self.read - self.kept:,} dropped: " + "; ".join(parts)
        return text


def read_labelled(path: Path, text_columns: tuple[str, ...], label_columns: tuple[str, ...],
                  quoting: bool | None = None, strip_labels: bool = True) -> Labelled:
    """The labelled rows of ``path``: the first of ``text_columns`` and of ``label_columns`` that the file has.
    Rows without a label or a text are dropped and counted (``missing_label``, ``missing_text``), as are ragged
    rows and broken lines; labels are stripped of surrounding whitespace (`` positive`` is ``positive``)."""
    columns, rows = labelled_rows(path, quoting)
    text = next((c for c in text_columns if c in columns), None)
    label = next((c for c in label_columns if c in columns), None)
    if text is None or label is None:
        raise LabelledError(f"{path}: needs a text and a label column; its columns are {', '.join(columns) or 'none'}")
    out = Labelled(columns, text, label)
    for line, row, why in rows:
        out.read += 1
        if row is None:
            out.dropped.setdefault(why.split(" ")[0], []).append(line)
            continue
        value, body = row.get(label), row.get(text)
        if isinstance(value, str) and strip_labels:
            value = value.strip()
        if value is None or value == "":
            out.dropped.setdefault("missing_label", []).append(line)
        elif body is None or not isinstance(body, str):
            out.dropped.setdefault("missing_text", []).append(line)
        else:
            out.texts.append(body)
            out.labels.append(value)
    return out
