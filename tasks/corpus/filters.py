"""Document filters: each one a tiny function returning ``(keep, detail)`` polars expressions for one reason code.

``apply_filters(df, cfg)`` computes the per-document statistics the enabled filters need (vectorized:
regex counts, and an explode + group-by for the repetition statistics), then gives every dropped row the
reason of the *first* failing filter in this order (the reason codes are stable):

1. ``empty``: no non-whitespace character (on by default: the only filter of the original corpus step).
2. ``too_short`` / ``too_long``: characters outside [min_chars, max_chars].
3. ``too_few_words`` / ``too_many_words``: whitespace-separated words outside [min_words, max_words].
4. Gopher quality rules (``gopher_quality: true``), Rae et al. 2021, "Scaling Language Models: Methods,
   Analysis & Insights from Training Gopher", appendix A (MassiveText quality filters); the default
   thresholds are the paper's: ``gopher_word_count`` (50..100,000 words), ``gopher_mean_word_length``
   (3..10 characters), ``gopher_symbol_ratio`` ('#' or ellipsis per word > 0.1), ``gopher_bullet_lines``
   (> 90 % of lines start with a bullet), ``gopher_ellipsis_lines`` (> 30 % end with an ellipsis),
   ``gopher_alpha_words`` (< 80 % of words contain a letter), ``gopher_stop_words`` (fewer than 2 of the
   English words the, be, to, of, and, that, have, with; turn it off for other languages).
5. Gopher repetition rules (``gopher_repetition: true``), same paper, same defaults:
   ``gopher_dup_lines`` / ``gopher_dup_paragraphs`` (> 30 % of lines / paragraphs are repeats),
   ``gopher_dup_line_chars`` / ``gopher_dup_paragraph_chars`` (> 20 % of the characters are in repeats),
   ``gopher_top_{n}gram`` for n = 2, 3, 4 (the most frequent repeated n-gram covers > 20 / 18 / 16 % of
   the characters), ``gopher_dup_{n}gram`` for n = 5..10 (words inside a repeated n-gram hold > 15, 14,
   13, 12, 11, 10 % of the characters; overlapping repeats count each word once).
6. ``lang``: optional offline language id (py3langid); it also fills the ``lang`` column of kept rows.

Records with named fields (reader.fields, line-aligned files) go through these filters field by field, the first
failing field's reason winning (its detail starts with the field's name); then, with ``max_length_ratio``,
``length_ratio`` compares the fields' word counts (tasks/corpus/shard.py). ``lang`` is not available there.

Definitions, where the paper leaves room: words are whitespace-separated tokens; lines split on runs of
"\\n"; paragraphs on blank lines; a repeat is any occurrence after the first in the document; the top
n-gram counts only when it occurs at least twice (a single occurrence is not repetition); character
fractions are over the document's characters (``len(text)``), n-gram lengths include the joining spaces.
A statistic that is undefined (no words) never drops a document; ``empty`` is the filter for those.
Two choices differ from datatrove's GopherRepetitionFilter: it counts the top n-gram even when it occurs
once (which drops every short document), and it measures duplicate n-grams greedily, skipping n words
after each repeat; here every word inside any repeated n-gram counts once, which is vectorizable.
Lines, paragraphs and n-grams are grouped by 64-bit hashes (a collision, ~n²/2⁶⁴, could only hide a
repeat or invent one within a single document).

Vectorized: the quality statistics are regex counts per document; the repetition statistics explode the
documents into lines / paragraphs / words and group them; only the language id loops in Python (py3langid
scores one string at a time). Stages run on the rows the previous stage kept (see ``apply_filters``).

Reference: J. W. Rae et al., "Scaling Language Models: Methods, Analysis & Insights from Training Gopher",
arXiv:2112.11446 (2021), appendix A.1.1 (quality filters) and table A1 (repetition thresholds).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, fields
from functools import lru_cache
from typing import Any

TOP_NGRAM_NS = (2, 3, 4)
DUP_NGRAM_NS = (5, 6, 7, 8, 9, 10)
GOPHER_STOP_WORDS = ("the", "be", "to", "of", "and", "that", "have", "with")
BULLETS = "•‣◦▪●*-"


@dataclass(frozen=True)
class FilterConfig:
    """Which documents to drop after cleaning, and why. A null threshold turns that one rule off."""

    drop_empty: bool = field(default=True, metadata={"doc": "Drop documents with no non-whitespace character ('empty')."})
    min_chars: int = field(default=0, metadata={"doc": "Drop documents with fewer characters ('too_short'); 0: off."})
    max_chars: int | None = field(default=None, metadata={"doc": "Drop documents with more characters ('too_long')."})
    min_words: int = field(default=0, metadata={"doc": "Drop documents with fewer words ('too_few_words'); 0: off."})
    max_words: int | None = field(default=None, metadata={"doc": "Drop documents with more words ('too_many_words')."})

    gopher_quality: bool = field(default=False, metadata={"doc": "Apply the Gopher quality rules below."})
    gopher_min_words: int | None = field(default=50, metadata={"doc": "Gopher: fewest words ('gopher_word_count')."})
    gopher_max_words: int | None = field(default=100_000, metadata={"doc": "Gopher: most words ('gopher_word_count')."})
    gopher_min_mean_word_length: float | None = field(
        default=3.0, metadata={"doc": "Gopher: smallest mean word length in characters ('gopher_mean_word_length')."})
    gopher_max_mean_word_length: float | None = field(
        default=10.0, metadata={"doc": "Gopher: largest mean word length ('gopher_mean_word_length')."})
    gopher_max_symbol_word_ratio: float | None = field(
        default=0.1, metadata={"doc": "Gopher: most '#' per word, and most ellipses per word ('gopher_symbol_ratio')."})
    gopher_max_bullet_lines_ratio: float | None = field(
        default=0.9, metadata={"doc": f"Gopher: most lines starting with one of {BULLETS} ('gopher_bullet_lines')."})
    gopher_max_ellipsis_lines_ratio: float | None = field(
        default=0.3, metadata={"doc": "Gopher: most lines ending with '...' or '…' ('gopher_ellipsis_lines')."})
    gopher_min_alpha_words_ratio: float | None = field(
        default=0.8, metadata={"doc": "Gopher: fewest words with a letter, as a fraction ('gopher_alpha_words')."})
    gopher_min_stop_words: int | None = field(
        default=2, metadata={"doc": "Gopher: fewest distinct of the, be, to, of, and, that, have, with "
                                    "(case-insensitive; English only) ('gopher_stop_words')."})

    gopher_repetition: bool = field(default=False, metadata={"doc": "Apply the Gopher repetition rules below."})
    gopher_max_dup_lines_ratio: float | None = field(
        default=0.3, metadata={"doc": "Gopher: most repeated lines, as a fraction of lines ('gopher_dup_lines')."})
    gopher_max_dup_paragraphs_ratio: float | None = field(
        default=0.3, metadata={"doc": "Gopher: most repeated paragraphs ('gopher_dup_paragraphs')."})
    gopher_max_dup_line_chars_ratio: float | None = field(
        default=0.2, metadata={"doc": "Gopher: most characters in repeated lines ('gopher_dup_line_chars')."})
    gopher_max_dup_paragraph_chars_ratio: float | None = field(
        default=0.2, metadata={"doc": "Gopher: most characters in repeated paragraphs ('gopher_dup_paragraph_chars')."})
    gopher_max_top_ngram_chars_ratio: tuple[float, ...] = field(
        default=(0.20, 0.18, 0.16),
        metadata={"doc": "Gopher: for n = 2, 3, 4, most characters in the top repeated n-gram ('gopher_top_{n}gram'); "
                         "[] turns the three rules off."})
    gopher_max_dup_ngram_chars_ratio: tuple[float, ...] = field(
        default=(0.15, 0.14, 0.13, 0.12, 0.11, 0.10),
        metadata={"doc": "Gopher: for n = 5..10, most characters in repeated n-grams ('gopher_dup_{n}gram'); "
                         "[] turns the six rules off."})

    lang_id: bool = field(default=False, metadata={"doc": "Identify each kept document's language (py3langid, "
                                                          "offline) into the 'lang' column."})
    languages: tuple[str, ...] = field(
        default=(), metadata={"doc": "With lang_id: keep only these ISO 639-1 codes ('lang'); []: keep all."})
    min_lang_prob: float = field(
        default=0.0, metadata={"doc": "With lang_id: drop documents whose top language probability is lower ('lang')."})
    lang_max_chars: int = field(
        default=2000, metadata={"doc": "With lang_id: characters from the start of a document given to the identifier."})
    max_length_ratio: float | None = field(
        default=None, metadata={
            "identity": lambda cfg: cfg.max_length_ratio is not None,
            "doc": "Named fields (translation pairs): drop a record whose longest text field has more than this many "
                   "times the words of its shortest ('length_ratio'; Moses' clean-corpus-n uses 9); null: off. The "
                   "length filters above (max_words, max_chars, ...) apply to each field."})

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, (int, float)) and not isinstance(value, bool) and value < 0:
                raise ValueError(f"{f.name}: must be >= 0")
        for low, high in (("min_chars", "max_chars"), ("min_words", "max_words"),
                          ("gopher_min_words", "gopher_max_words"),
                          ("gopher_min_mean_word_length", "gopher_max_mean_word_length")):
            lo, hi = getattr(self, low), getattr(self, high)
            if lo is not None and hi is not None and hi < lo:
                raise ValueError(f"{high}: must be >= {low} ({lo})")
        for name in ("gopher_max_symbol_word_ratio", "gopher_max_bullet_lines_ratio", "gopher_max_ellipsis_lines_ratio",
                     "gopher_min_alpha_words_ratio", "gopher_max_dup_lines_ratio", "gopher_max_dup_paragraphs_ratio",
                     "gopher_max_dup_line_chars_ratio", "gopher_max_dup_paragraph_chars_ratio", "min_lang_prob"):
            value = getattr(self, name)
            if value is not None and value > 1:
                raise ValueError(f"{name}: a fraction between 0 and 1")
        for name, ns in (("gopher_max_top_ngram_chars_ratio", TOP_NGRAM_NS),
                         ("gopher_max_dup_ngram_chars_ratio", DUP_NGRAM_NS)):
            value = getattr(self, name)
            if value and len(value) != len(ns):
                raise ValueError(f"{name}: {len(ns)} fractions (n = {ns[0]}..{ns[-1]}) or [] for off")
            if any(not 0 <= v <= 1 for v in value):
                raise ValueError(f"{name}: fractions between 0 and 1")
        if self.max_length_ratio is not None and self.max_length_ratio < 1:
            raise ValueError(f"max_length_ratio: a ratio >= 1 (longest field / shortest field, in words), got "
                             f"{self.max_length_ratio}")
        if self.lang_max_chars < 1:
            raise ValueError("lang_max_chars: an integer >= 1")
        bad = [code for code in self.languages if not (code.isascii() and code.isalpha() and code.islower())]
        if bad:
            raise ValueError(f"languages: {bad[0]!r} is not a lowercase ISO 639-1 code like 'en'")


# --- the filters ---------------------------------------------------------------------------------------
# Each filter is one hook: cfg -> (keep, detail) polars expressions over the statistics frame of
# document_stats (keep: the row passes; detail: why it did not), or None when the filter is off.

Check = Callable[[FilterConfig], "tuple[Any, Any] | None"]


def _col(name):
    import polars as pl

    return pl.col(name)


def _fmt(template: str, *values):
    import polars as pl

    return pl.format(template, *[v.round(3) if isinstance(v, pl.Expr) else pl.lit(v) for v in values])


def empty(cfg):
    return (_col("_has_text"), _fmt("no text after cleaning")) if cfg.drop_empty else None


def too_short(cfg):
    return (_col("_chars") >= cfg.min_chars, _fmt("n_chars={} < {}", _col("_chars"), cfg.min_chars)) if cfg.min_chars else None


def too_long(cfg):
    if cfg.max_chars is None:
        return None
    return _col("_chars") <= cfg.max_chars, _fmt("n_chars={} > {}", _col("_chars"), cfg.max_chars)


def too_few_words(cfg):
    return (_col("_words") >= cfg.min_words, _fmt("n_words={} < {}", _col("_words"), cfg.min_words)) if cfg.min_words else None


def too_many_words(cfg):
    if cfg.max_words is None:
        return None
    return _col("_words") <= cfg.max_words, _fmt("n_words={} > {}", _col("_words"), cfg.max_words)


def _bounded(stat: str, low, high, label: str):
    """keep = low <= stat <= high (either bound may be None)."""
    keep = None
    if low is not None:
        keep = _col(stat) >= low
    if high is not None:
        keep = _col(stat) <= high if keep is None else keep & (_col(stat) <= high)
    if keep is None:
        return None
    return keep, _fmt(label + "={} outside [{}, {}]", _col(stat), "-" if low is None else low, "-" if high is None else high)


def _at_most(stat: str, limit, label: str):
    return None if limit is None else (_col(stat) <= limit, _fmt(label + "={} > {}", _col(stat), limit))


def _at_least(stat: str, limit, label: str):
    return None if limit is None else (_col(stat) >= limit, _fmt(label + "={} < {}", _col(stat), limit))


def _gopher(rule):
    def check(cfg):
        return rule(cfg) if cfg.gopher_quality else None
    return check


def _repetition(rule):
    def check(cfg):
        return rule(cfg) if cfg.gopher_repetition else None
    return check


def _ngram_check(kind: str, ns: tuple[int, ...], attr: str, n: int):
    def check(cfg):
        limits = getattr(cfg, attr)
        if not cfg.gopher_repetition or not limits:
            return None
        return _at_most(f"_{kind}{n}", limits[ns.index(n)], f"{kind}_{n}gram_char_frac")
    return check


FILTERS: tuple[tuple[str, Check], ...] = (
    ("empty", empty),
    ("too_short", too_short),
    ("too_long", too_long),
    ("too_few_words", too_few_words),
    ("too_many_words", too_many_words),
    ("gopher_word_count", _gopher(lambda c: _bounded("_words", c.gopher_min_words, c.gopher_max_words, "n_words"))),
    ("gopher_mean_word_length", _gopher(lambda c: _bounded("_mean_word_len", c.gopher_min_mean_word_length,
                                                            c.gopher_max_mean_word_length, "mean_word_length"))),
    ("gopher_symbol_ratio", _gopher(lambda c: _at_most("_symbol_ratio", c.gopher_max_symbol_word_ratio,
                                                       "max(hash, ellipsis)_per_word"))),
    ("gopher_bullet_lines", _gopher(lambda c: _at_most("_bullet_frac", c.gopher_max_bullet_lines_ratio, "bullet_lines"))),
    ("gopher_ellipsis_lines", _gopher(lambda c: _at_most("_ellipsis_frac", c.gopher_max_ellipsis_lines_ratio,
                                                         "ellipsis_lines"))),
    ("gopher_alpha_words", _gopher(lambda c: _at_least("_alpha_frac", c.gopher_min_alpha_words_ratio, "alpha_words"))),
    ("gopher_stop_words", _gopher(lambda c: _at_least("_stop_words", c.gopher_min_stop_words, "stop_words"))),
    ("gopher_dup_lines", _repetition(lambda c: _at_most("_dup_line_frac", c.gopher_max_dup_lines_ratio, "dup_lines"))),
    ("gopher_dup_paragraphs", _repetition(lambda c: _at_most("_dup_para_frac", c.gopher_max_dup_paragraphs_ratio,
                                                             "dup_paragraphs"))),
    ("gopher_dup_line_chars", _repetition(lambda c: _at_most("_dup_line_char_frac", c.gopher_max_dup_line_chars_ratio,
                                                             "dup_line_chars"))),
    ("gopher_dup_paragraph_chars", _repetition(lambda c: _at_most("_dup_para_char_frac",
                                                                  c.gopher_max_dup_paragraph_chars_ratio,
                                                                  "dup_paragraph_chars"))),
    *((f"gopher_top_{n}gram", _ngram_check("top", TOP_NGRAM_NS, "gopher_max_top_ngram_chars_ratio", n))
      for n in TOP_NGRAM_NS),
    *((f"gopher_dup_{n}gram", _ngram_check("dup", DUP_NGRAM_NS, "gopher_max_dup_ngram_chars_ratio", n))
      for n in DUP_NGRAM_NS),
)
REASONS = tuple(reason for reason, _ in FILTERS) + ("lang",)
REPETITION_PREFIXES = ("gopher_dup_", "gopher_top_")


# --- apply ----------------------------------------------------------------------------------------------


def apply_filters(df, cfg: FilterConfig, text_col: str = "text"):
    """(kept rows, dropped rows) of ``df``. Dropped rows have columns [source,] locator, reason, detail (one reason per
    row: the first failing filter in ``REASONS`` order). Kept rows keep ``df``'s columns and order; with
    ``lang_id`` their ``lang`` column is filled. Rows without a ``locator`` column are located by row number.

    The filters run in three stages, each on the rows the earlier ones kept (same result as evaluating every
    filter on every row and taking the first failure, less work): length + Gopher quality rules (regex
    counts), Gopher repetition rules (explode + group-by), language id (a Python loop)."""
    import polars as pl

    locator = df["locator"].cast(pl.Utf8) if "locator" in df.columns else pl.Series("locator", range(df.height)).cast(pl.Utf8)
    reason = pl.repeat(None, df.height, dtype=pl.Utf8, eager=True).alias("reason")  # not a Python list of Nones
    detail = reason.alias("detail")
    for repetition in (False, True):
        checks = [(code, out) for code, check in FILTERS
                  if code.startswith(REPETITION_PREFIXES) == repetition and (out := check(cfg)) is not None]
        if not checks:
            continue
        rows = reason.is_null().arg_true()
        texts = df[text_col] if rows.len() == df.height else df[text_col].gather(rows)
        # only the statistics some check reads: with the default config that is one regex pass, not three
        used = {name for keep, detail in (out for _, out in checks) for name in
                (*keep.meta.root_names(), *detail.meta.root_names())}
        stats = document_stats(texts, quality=cfg.gopher_quality and not repetition, repetition=repetition,
                               base=used)
        failed = stats.select(
            pl.coalesce([pl.when(keep.not_()).then(pl.lit(code)) for code, (keep, _) in checks]).alias("reason"),
            pl.coalesce([pl.when(keep.not_()).then(text) for _, (keep, text) in checks]).alias("detail"),
        )
        reason = reason.scatter(rows, failed["reason"])
        detail = detail.scatter(rows, failed["detail"])
    keep_mask = reason.is_null()
    source = {"source": df["source"]} if "source" in df.columns else {}  # a shard of several files
    dropped = pl.DataFrame({**source, "locator": locator, "reason": reason, "detail": detail}).filter(~keep_mask)
    kept = df.filter(keep_mask)
    if cfg.lang_id:
        kept, lang_dropped = _filter_language(kept, cfg, text_col)
        dropped = pl.concat([dropped, lang_dropped])
    return kept, dropped


BASE_STATS = ("_has_text", "_chars", "_words")


def document_stats(texts, *, quality: bool = True, repetition: bool = True, base=BASE_STATS):
    """Per-document statistics behind the filters, one row per text (columns prefixed with '_'). Of the
    base statistics only those named in ``base`` are computed, plus what the quality and repetition
    statistics are built on (characters and words)."""
    import polars as pl

    t = pl.col("t")
    words = pl.col("_words")
    per_word = lambda e: pl.when(words > 0).then(e / words)  # noqa: E731 - undefined without words -> null
    frame = pl.DataFrame({"t": texts.fill_null("")})
    wanted = set(base) | ({"_chars", "_words"} if quality or repetition else set())
    cols = {"_has_text": t.str.contains(r"\S"), "_chars": t.str.len_chars(), "_words": t.str.count_matches(r"\S+")}
    frame = frame.with_columns(expr.alias(name) for name, expr in cols.items() if name in wanted)
    if quality:
        lines = t.str.count_matches("\n") + 1
        frame = frame.with_columns(
            per_word(t.str.len_chars() - t.str.count_matches(r"\s")).alias("_mean_word_len"),
            per_word(pl.max_horizontal(t.str.count_matches("#", literal=True),
                                       t.str.count_matches(r"\.\.\.|…"))).alias("_symbol_ratio"),
            (t.str.count_matches(rf"(?m)^[^\S\n]*[{BULLETS}]") / lines).alias("_bullet_frac"),
            (t.str.count_matches(r"(?m)(?:\.\.\.|…)[^\S\n]*$") / lines).alias("_ellipsis_frac"),
            per_word(t.str.count_matches(r"\S*\p{L}\S*")).alias("_alpha_frac"),
            t.str.extract_all(r"(?i)\b(?:" + "|".join(GOPHER_STOP_WORDS) + r")\b")
            .list.eval(pl.element().str.to_lowercase()).list.n_unique().alias("_stop_words"),
        )
    if repetition:
        frame = _repetition_stats(frame.with_row_index("_doc"))
    return frame.drop("t")


def _repetition_stats(frame):
    import polars as pl

    chars = pl.col("_chars")
    stats = [frame]
    for name, pattern, sep in (("line", r"[^\n]+", "\n"), ("para", r"[^\n]+(?:\n[^\n]+)*", "\n\n")):
        # only documents with a separator can repeat a line / paragraph; the others score 0
        multi = frame.filter(pl.col("t").str.contains(sep, literal=True))
        pieces = (
            multi.select("_doc", pl.col("t").str.extract_all(pattern).alias("p")).explode("p").drop_nulls("p")
            .select("_doc", pl.col("p").hash(11).alias("h"), pl.col("p").str.len_chars().alias("len"))
        )
        per_doc = (  # grouping on a 64-bit hash of the piece instead of the string: same groups, less work
            pieces.group_by("_doc", "h").agg(pl.len().alias("n"), pl.first("len"))
            .group_by("_doc").agg(pl.col("n").sum().alias(f"{name}_total"), (pl.col("n") - 1).sum().alias(f"{name}_dup"),
                                  ((pl.col("n") - 1) * pl.col("len")).sum().alias(f"{name}_dup_chars"))
        )
        stats.append(per_doc)

    # Every word with its position. An n-gram's id is a polynomial hash over its words' hashes, in wrapping
    # 64-bit arithmetic, seeded with the document index so that equal n-grams of different documents differ.
    words = (
        frame.filter(pl.col("_words") >= 2)
        .select("_doc", pl.col("t").str.extract_all(r"\S+").alias("w"))
        .with_columns(pl.col("w").list.len().alias("len"), pl.int_ranges(0, pl.col("w").list.len()).alias("pos"))
        .explode("w", "pos")
        .select("_doc", "len", "pos", pl.col("w").str.len_chars().cast(pl.UInt64).alias("wlen"),
                pl.col("w").hash(7).alias("h"))
        .with_columns((pl.col("_doc").cast(pl.UInt64) * _U64(0x9E3779B97F4A7C15) + pl.col("h")).alias("k"),
                      pl.col("wlen").alias("span"))
    )
    dups, tops = [], []
    repeat = ~pl.col("k").is_first_distinct()
    for n in range(2, DUP_NGRAM_NS[-1] + 1):
        # An n-gram can repeat only where an (n-1)-gram repeats, so each round keeps only the documents (whole,
        # in order) that had a repeat in the previous one: most of a natural corpus drops out after a few words.
        words = words.filter(pl.col("_doc").is_in(words.filter(repeat)["_doc"].unique().implode()))
        # extend every (n-1)-gram by the word n-1 places ahead; only rows with n words left in their document
        # are n-grams (the others read the next document's words and are masked out)
        gram = pl.when(pl.col("pos") <= pl.col("len") - n).then(pl.col("k"))
        words = words.with_columns(
            (pl.col("k") * _U64(1_000_003) + pl.col("h").shift(-(n - 1))).alias("k"),
            (pl.col("span") + 1 + pl.col("wlen").shift(-(n - 1))).alias("span"),
        ).with_columns(gram.alias("g"))
        repeat = pl.col("g").is_not_null() & ~pl.col("g").is_first_distinct()
        words = words.with_columns(repeat.alias("r"))
        repeat = pl.col("r")
        if n in TOP_NGRAM_NS:
            # the most frequent repeated n-gram (ties: the longest): count = its repeats + 1, packed as
            # count * 2**32 + span for one max() per document
            tops.append(
                words.filter("r").group_by("g").agg(pl.first("_doc"), (pl.len() + 1).alias("c"), pl.first("span"))
                .group_by("_doc").agg((pl.col("c").cast(pl.UInt64) * _U64(1 << 32) + pl.col("span")).max()
                                      .alias(f"top{n}"))
            )
        if n in DUP_NGRAM_NS:
            # word j is covered when a repeated n-gram starts at one of j-n+1..j; a window reaching into the
            # previous document only sees its last n-1 positions, which are never n-grams
            covered = pl.col("r").cast(pl.UInt8).rolling_max(window_size=n, min_samples=1) * pl.col("wlen")
            dups.append(words.select("_doc", covered.alias(f"dup{n}")).group_by("_doc").agg(pl.col(f"dup{n}").sum()))
    out = frame
    for table in [*stats[1:], *dups, *tops]:
        out = out.join(table, on="_doc", how="left", maintain_order="left")
    top_value = lambda c: (pl.col(c) // (1 << 32)) * (pl.col(c) % (1 << 32))  # noqa: E731 - count * span
    return out.with_columns(
        *(pl.when(pl.col(f"{name}_total") > 0).then(pl.col(f"{name}_dup") / pl.col(f"{name}_total"))
          .otherwise(pl.when(chars > 0).then(0.0)).alias(f"_dup_{name}_frac") for name in ("line", "para")),
        *(pl.when(chars > 0).then(pl.col(f"{name}_dup_chars").fill_null(0) / chars).alias(f"_dup_{name}_char_frac")
          for name in ("line", "para")),
        *(pl.when(chars > 0).then(top_value(f"top{n}").fill_null(0) / chars).alias(f"_top{n}") for n in TOP_NGRAM_NS),
        *(pl.when(chars > 0).then(pl.col(f"dup{n}").fill_null(0) / chars).alias(f"_dup{n}") for n in DUP_NGRAM_NS),
    ).select(frame.columns + [f"_dup_{x}_{y}" for x in ("line", "para") for y in ("frac", "char_frac")]
             + [f"_top{n}" for n in TOP_NGRAM_NS] + [f"_dup{n}" for n in DUP_NGRAM_NS]).drop("_doc")


def _U64(value: int):
    import polars as pl

    return pl.lit(value, dtype=pl.UInt64)


def _filter_language(kept, cfg: FilterConfig, text_col: str):
    """py3langid per document: a Python loop the library forces (it scores one string at a time)."""
    import polars as pl

    identify = _language_identifier()
    pairs = [identify(t[: cfg.lang_max_chars]) if t else ("und", 0.0) for t in kept[text_col].to_list()]
    lang = pl.Series("lang", [p[0] for p in pairs], dtype=pl.Utf8)
    prob = pl.Series("p", [float(p[1]) for p in pairs], dtype=pl.Float64)
    kept = kept.with_columns(lang)
    bad = prob < cfg.min_lang_prob
    if cfg.languages:
        bad = bad | ~lang.is_in(list(cfg.languages))
    allowed = ",".join(cfg.languages) or "any"
    detail = pl.DataFrame({"lang": lang, "p": prob}).select(
        pl.format("lang={} p={} (allowed: {}, min p {})", "lang", pl.col("p").round(3), pl.lit(allowed),
                  pl.lit(cfg.min_lang_prob)).alias("detail"))["detail"]
    locator = kept["locator"].cast(pl.Utf8) if "locator" in kept.columns else pl.Series(range(kept.height)).cast(pl.Utf8)
    source = {"source": kept["source"]} if "source" in kept.columns else {}  # a shard of several files
    dropped = pl.DataFrame({**source, "locator": locator, "reason": "lang", "detail": detail},
                           schema={**dict.fromkeys(source, pl.Utf8), "locator": pl.Utf8, "reason": pl.Utf8,
                                   "detail": pl.Utf8}).filter(bad)
    return kept.filter(~bad), dropped


@lru_cache(maxsize=1)
def _language_identifier():
    from py3langid.langid import MODEL_FILE, LanguageIdentifier

    return LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True).classify
