"""JSONL without a Python step per record: a block of lines is parsed with polars expressions.

The per-record reader (``corpusforge.storage.formats.jsonl_records``: ``json.loads`` per line, the text field popped,
the rest dumped as ``meta`` with sorted keys) is the definition. This path handles, vectorized, the lines
whose result it can prove is the same, and sends every other line through that reader:

- blank lines (ASCII whitespace only) are empty records, as there;
- a *flat* object (string, number, true/false/null values; keys without escapes, none repeated) whose
  text field holds a string: the line is checked against a regular grammar that is a strict subset of
  what ``json.loads`` accepts (``FLAT_OBJECT``), cut into ``"key": value`` pairs, the text decoded by
  polars' JSON decoder, and ``meta`` rebuilt exactly as ``json.dumps(meta, sort_keys=True,
  ensure_ascii=False)`` writes it: pairs sorted by key, ``", "`` and ``": "`` separators, strings
  re-escaped the way ``json.dumps`` escapes them (only ``"``, ``\\`` and control characters), integers
  as written, and floats (the one case where Python rewrites a number: ``1.50`` -> ``1.5``, ``1e5`` ->
  ``100000.0``) through Python's own ``json`` once per distinct token.

Everything else takes the per-record path, line by line: invalid JSON, non-objects, a missing or
non-string text field, nested values, NaN/Infinity, duplicate keys, escapes that could encode a lone
surrogate (``\\uD800``-``\\uDFFF``), lines over ``max_document_bytes``, undecodable bytes, and every line
when the text field is a dotted path (it addresses nested objects). tests/storage/test_fast_paths.py
compares both paths on a hostile file.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterator

from corpusforge.storage.line_blocks import REST, TEXT, line_blocks, per_record
from corpusforge.storage.records import BATCH_COLUMNS, RawRecord, RecordBatch, meta_json

WS = r"[ \t]*"
KEY = r'"[^"\\\x00-\x1f]*"'
# a \u escape of a surrogate (D800-DFFF) is outside the grammar: it could encode a lone surrogate, not text
STRING = r'"(?:[^"\\\x00-\x1f]|\\["\\/bfnrt]|\\u(?:[0-9a-cA-Ce-fE-F][0-9a-fA-F]{3}|[dD][0-7][0-9a-fA-F]{2}))*"'
NUMBER = r"-?(?:0|[1-9][0-9]{0,99})(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?"  # Python refuses ints over 4300 digits
VALUE = rf"(?:{STRING}|{NUMBER}|true|false|null)"
PAIR = rf"{KEY}{WS}:{WS}{VALUE}"
FLAT_OBJECT = rf"^{WS}\{{{WS}(?:{PAIR}{WS}(?:,{WS}{PAIR}{WS})*)?\}}{WS}$"
BLANK = r"^[ \t\r\x0b\x0c]*$"  # bytes.strip()'s whitespace: such a line is an empty record
PLAIN_INT = r"^-?(?:0|[1-9][0-9]*)$"
# json.dumps(ensure_ascii=False) escapes exactly these characters, and only these
JSON_ESCAPES = {"\\": "\\\\", '"': '\\"', "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t"}
JSON_ESCAPES.update({chr(c): f"\\u{c:04x}" for c in range(0x20) if chr(c) not in JSON_ESCAPES})


def fast_jsonl(stream: io.BufferedReader, text_field: str, limit: int) -> Iterator[RecordBatch | RawRecord]:
    from corpusforge.storage.formats import jsonl_records

    def slow(s: io.BufferedReader) -> Iterator[RawRecord]:
        return jsonl_records(s, text_field, limit)

    for kind, lineno, payload in line_blocks(stream, limit):
        if kind == TEXT and "." not in text_field:
            yield from _jsonl_block(payload, lineno, text_field, limit, slow)
        elif kind == REST:
            yield from per_record(slow, payload, lineno)
        else:  # undecodable line, or a dotted text field: the per-record reader
            data = payload if isinstance(payload, bytes) else payload.encode() + b"\n"
            yield from per_record(slow, data, lineno)


def _jsonl_block(text: str, lineno: int, text_field: str, limit: int, slow) -> Iterator[RecordBatch | RawRecord]:
    """Records of the lines of one decoded block (numbered from ``lineno + 1``): bad ones first, in line
    order, then one batch with every good one in line order."""
    import polars as pl

    lines = pl.Series("raw", [text], dtype=pl.String).str.split("\n").explode().to_frame().with_row_index("i")
    if "\r" in text:
        lines = lines.with_columns(pl.col("raw").str.strip_chars_end("\r").alias("line"))
    else:
        lines = lines.with_columns(pl.col("raw").alias("line"))
    line = pl.col("line")
    lines = lines.with_columns(
        (line.str.len_bytes() > limit).alias("big"),
        line.str.contains(BLANK).alias("blank"),
        line.str.contains(FLAT_OBJECT).alias("flat"),
    )
    objects = lines.filter(pl.col("flat") & ~pl.col("big") & ~pl.col("blank"))
    simple_texts, simple_pairs = _escape_free(objects, text_field)
    if simple_texts.height:
        objects = objects.join(simple_texts.select("i"), on="i", how="anti")
    texts, pairs = [simple_texts], [simple_pairs]
    if objects.height:  # the general path: every pair cut out by the regex, string values decoded
        general = _pairs(objects.select("i", "raw"))
        is_text = pl.col("key") == text_field
        # One text field holding a string, and no key twice (json.loads keeps the last): else per record.
        ok = (general.group_by("i")
              .agg(((is_text.sum() == 1) & (is_text & pl.col("value").str.starts_with('"')).any()
                    & (pl.col("key").n_unique() == pl.len())).alias("ok"))
              .filter("ok").select("i"))
        general = general.join(ok, on="i", how="semi")
        texts.append(general.filter(is_text).select("i", pl.col("value").str.json_decode(pl.String).alias("text")))
        pairs.append(general.filter(~is_text))
    blanks = lines.filter(pl.col("blank") & ~pl.col("big"))
    if blanks.height:
        texts.append(blanks.select("i", pl.lit("").alias("text")))
    fast = pl.concat(texts).join(_metas(pl.concat(pairs)), on="i", how="left")
    slow_rows = lines.join(fast.select("i"), on="i", how="anti").select("i", "raw")
    good_slow: list[tuple[int, int, str, str, str | None]] = []
    for i, raw in slow_rows.sort("i").iter_rows():
        for k, rec in enumerate(per_record(slow, raw.encode() + b"\n", lineno + i)):
            if rec.ok:
                good_slow.append((i, k, rec.locator, rec.text, meta_json(rec.meta)))
            else:
                yield rec
    frame = fast.select("i", pl.lit(0, pl.UInt32).alias("k"),
                        pl.format("line:{}", pl.col("i").cast(pl.Int64) + lineno + 1).alias("locator"), "text", "meta")
    if good_slow:
        extra = pl.DataFrame(good_slow, schema={"i": pl.UInt32, "k": pl.UInt32, "locator": pl.String,
                                                "text": pl.String, "meta": pl.String}, orient="row")
        frame = frame.vstack(extra)
    frame = frame.sort("i", "k").select(BATCH_COLUMNS)
    if frame.height:
        yield RecordBatch(frame=frame)


def _pairs(frame):
    """``i, key, value``: the ``"key": value`` pairs of each ``raw`` (flat JSON objects, or what is left of one)."""
    import polars as pl

    return (frame.select("i", pl.col("raw").str.extract_all(PAIR).alias("pair")).explode("pair")
            # a key holds no quote, so the first two quotes delimit it; then ':' and blanks, then the value
            .select("i", pl.col("pair").str.splitn('"', 3).alias("pair")).unnest("pair")
            .select("i", pl.col("field_1").alias("key"), pl.col("field_2").str.strip_chars_start(" \t:").alias("value")))


def _escape_free(objects, text_field: str):
    """The flat objects with no backslash in the line, whose text field holds a string: ``(i, text)`` and the
    ``i, key, value`` pairs of their other fields, without a regex pass over the text.

    With no backslash, no string has an escape, so every quote opens or closes a string and a string's
    characters are its value. The first ``"<field>"`` of such a line opens a string (a closing quote is followed
    by blanks and ``,:}``, never by the field's first character): it is the key when blanks, ``:`` and blanks
    follow; its value, when a string, ends at the next quote. What is left of the line, before the key and after
    the value, holds the other pairs (short: the pair regex runs on it, not on the text). A line whose text field
    comes twice, or any key twice, or whose first ``"<field>"`` is a value, is left to the general path."""
    import polars as pl

    schema_texts = {"i": pl.UInt32, "text": pl.String}
    schema_pairs = {"i": pl.UInt32, "key": pl.String, "value": pl.String}
    if not text_field or any(c in text_field for c in '"\\') or any(ord(c) < 0x20 for c in text_field):
        return pl.DataFrame(schema=schema_texts), pl.DataFrame(schema=schema_pairs)
    cut = (objects.filter(~pl.col("line").str.contains("\\", literal=True))
           .select("i", pl.col("line").str.splitn(f'"{text_field}"', 2).alias("p")).unnest("p")
           .select("i", pl.col("field_0").alias("before"), pl.col("field_1").str.strip_chars_start(" \t").alias("after"))
           .filter(pl.col("after").str.starts_with(":"))
           .with_columns(pl.col("after").str.strip_prefix(":").str.strip_chars_start(" \t"))
           .filter(pl.col("after").str.starts_with('"'))
           .select("i", "before", pl.col("after").str.strip_prefix('"').str.splitn('"', 2).alias("p")).unnest("p")
           .filter(pl.col("field_1").is_not_null())
           .select("i", pl.col("field_0").alias("text"), (pl.col("before") + pl.col("field_1")).alias("raw")))
    pairs = _pairs(cut.select("i", "raw")).filter(pl.col("key").is_not_null())
    bad = (pairs.group_by("i").agg(((pl.col("key") == text_field).any() | (pl.col("key").n_unique() < pl.len()))
                                   .alias("bad")).filter("bad").select("i"))
    return (cut.join(bad, on="i", how="anti").select("i", "text"),
            pairs.join(bad, on="i", how="anti"))


def _metas(pairs):
    """``i, meta``: the non-text pairs of each line as ``json.dumps(meta, sort_keys=True, ensure_ascii=False)``."""
    import polars as pl

    value = pairs["value"]
    canonical = value.clone()
    # strings with escapes: decode, then escape again as json.dumps does ("\/" -> "/", "\u00e9" -> "é")
    escaped = (value.str.starts_with('"') & value.str.contains("\\", literal=True)).arg_true()
    if escaped.len():
        decoded = value.gather(escaped).str.json_decode(pl.String)
        again = '"' + decoded.str.replace_many(list(JSON_ESCAPES), list(JSON_ESCAPES.values())) + '"'
        canonical = canonical.scatter(escaped, again)
    # numbers Python would write differently (floats, -0): Python's json, once per distinct token
    rewrite = (~value.str.starts_with('"') & ~value.is_in(["true", "false", "null"])
               & (~value.str.contains(PLAIN_INT) | (value == "-0"))).arg_true()
    if rewrite.len():
        tokens = value.gather(rewrite)
        mapping = {tok: json.dumps(json.loads(tok)) for tok in tokens.unique().to_list()}
        canonical = canonical.scatter(rewrite, tokens.replace_strict(mapping, return_dtype=pl.String))
    pairs = pairs.with_columns(canonical.alias("value"))
    # a line with one pair besides the text (the common case) needs no sort and no group
    single = pl.len().over("i") == 1
    one = pairs.filter(single).select("i", pl.concat_str(pl.lit('{"'), "key", pl.lit('": '), "value", pl.lit("}"))
                                      .alias("meta"))
    several = (pairs.filter(~single).sort("i", "key")
               .group_by("i", maintain_order=True)
               .agg(pl.format('"{}": {}', "key", "value").str.join(", ").alias("meta"))
               .select("i", ("{" + pl.col("meta") + "}").alias("meta")))
    return pl.concat([one, several])
