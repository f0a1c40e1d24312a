"""Text cleaning presets, as vectorized polars expressions.

Presets:
- ``lm`` (default), for neural LMs: Unicode NFC and whitespace normalization, keeping case and
  punctuation. Line breaks inside a document are kept (a character LM learns verse layout from them);
  runs of spaces/tabs collapse to one space and CRLF becomes LF.
- ``raw``: the text is not altered at all (n-gram estimation that must match a reference tool
  byte for byte, tokenizer training on the exact input).

``unicode_form`` and ``normalize_whitespace`` override the preset's choice when set.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

PRESET_DEFAULTS = {
    "lm": {"unicode_form": "NFC", "normalize_whitespace": True},
    "raw": {"unicode_form": "none", "normalize_whitespace": False},
}
PRESETS = tuple(PRESET_DEFAULTS)


@dataclass(frozen=True)
class CleanConfig:
    """How documents are normalized before filtering and dedup."""

    preset: Literal["lm", "raw"] = field(
        default="lm", metadata={"doc": "'lm': NFC + whitespace normalization, case/punctuation kept; 'raw': unchanged."}
    )
    unicode_form: Literal["NFC", "NFKC", "none"] | None = field(
        default=None, metadata={"doc": "Unicode normalization form; null means the preset's choice."}
    )
    normalize_whitespace: bool | None = field(
        default=None,
        metadata={"doc": "Collapse spaces/tabs, strip line ends, CRLF -> LF, max one blank line; null: preset's."},
    )

    @property
    def effective_unicode_form(self) -> str:
        return self.unicode_form or PRESET_DEFAULTS[self.preset]["unicode_form"]

    @property
    def effective_normalize_whitespace(self) -> bool:
        if self.normalize_whitespace is None:
            return bool(PRESET_DEFAULTS[self.preset]["normalize_whitespace"])
        return self.normalize_whitespace


def clean_expr(column: str, cfg: CleanConfig):
    """A polars expression that cleans ``column`` according to ``cfg``."""
    import polars as pl

    expr = pl.col(column)
    if cfg.effective_unicode_form != "none":
        expr = expr.str.normalize(cfg.effective_unicode_form)
    if cfg.effective_normalize_whitespace:
        expr = (
            expr.str.replace_all(r"\r\n?", "\n")
            .str.replace_all(r"[^\S\n]+", " ")  # horizontal whitespace (incl. NBSP, tabs) -> one space
            .str.replace_all(r" ?\n ?", "\n")
            .str.replace_all(r"\n{3,}", "\n\n")
            .str.strip_chars()
        )
    return expr


def is_empty_expr(column: str):
    """A document is empty when it has no non-whitespace character (whatever the preset kept)."""
    import polars as pl

    return ~pl.col(column).str.contains(r"\S")


def word_count_expr(column: str):
    import polars as pl

    return pl.col(column).str.count_matches(r"\S+").cast(pl.Int64)
