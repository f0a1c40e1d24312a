"""Text cleaning presets, as vectorized polars expressions.

The spine ships the ``lm`` preset for neural LMs: Unicode NFC and whitespace normalization, keeping
case and punctuation. Line breaks inside a document are kept (a character LM learns verse layout from
them); runs of spaces/tabs collapse to one space and CRLF becomes LF.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

PRESETS = ("lm",)


@dataclass(frozen=True)
class CleanConfig:
    """How documents are normalized before filtering and dedup."""

    preset: Literal["lm"] = field(default="lm", metadata={"doc": "Named preset; 'lm' keeps case and punctuation."})
    unicode_form: Literal["NFC", "NFKC", "none"] = field(
        default="NFC", metadata={"doc": "Unicode normalization form applied first."}
    )
    normalize_whitespace: bool = field(
        default=True, metadata={"doc": "Collapse spaces/tabs, strip line ends, CRLF -> LF, max one blank line."}
    )


def clean_expr(column: str, cfg: CleanConfig):
    """A polars expression that cleans ``column`` according to ``cfg``."""
    import polars as pl

    expr = pl.col(column)
    if cfg.unicode_form != "none":
        expr = expr.str.normalize(cfg.unicode_form)
    if cfg.normalize_whitespace:
        expr = (
            expr.str.replace_all(r"\r\n?", "\n")
            .str.replace_all(r"[^\S\n]+", " ")  # horizontal whitespace (incl. NBSP, tabs) -> one space
            .str.replace_all(r" ?\n ?", "\n")
            .str.replace_all(r"\n{3,}", "\n\n")
            .str.strip_chars()
        )
    return expr


def word_count_expr(column: str):
    import polars as pl

    return pl.col(column).str.count_matches(r"\S+").cast(pl.Int64)
