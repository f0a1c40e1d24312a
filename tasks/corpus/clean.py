"""Text cleaning: an ordered list of ops, built into one polars expression.

Presets (``preset`` picks the default op list; ``ops`` replaces it; the other fields tune single ops):

- ``lm`` (default), for neural LMs: ``[nfc, normalize_whitespace]``. Case and punctuation are kept; line
  breaks inside a document are kept (a character LM learns verse layout from them); runs of spaces/tabs
  collapse to one space and CRLF becomes LF.
- ``raw``: ``[]``, the text is not altered at all (n-gram estimation that must match a reference tool byte
  for byte, tokenizer training on the exact input).
- ``classic``, for bag-of-words / TF-IDF / n-gram IR work: ``[nfkc, strip_html, strip_emails, strip_urls,
  strip_emoji, lowercase, strip_punctuation, remove_stopwords, normalize_whitespace]``. Add ``stem`` or
  ``lemmatize`` to ``ops`` for morphological folding (the teaching texts do both, on different examples).
- ``social``, for noisy web text: ``[strip_html, strip_emails, strip_urls, nfkc, mentions, hashtags,
  squash_elongation, demojize, lowercase, normalize_whitespace]`` with mentions dropped and the hashtag
  symbol stripped ("#tech" -> "tech"), emoji mapped to ``:name:`` text.

``unicode_form`` and ``normalize_whitespace`` (the two fields of the original config) still override the
op list when set: ``unicode_form`` swaps or removes the nfc/nfkc op, ``normalize_whitespace`` adds it at
the end or removes it.

Op order matters and is the user's: e.g. ``strip_emails`` must precede ``strip_urls`` (a bare-domain URL
pattern would otherwise eat the domain of an address), ``squash_elongation`` must precede ``demojize``
(":zzz:"), stemmers expect lowercase input (put ``lowercase`` first), and ``remove_stopwords`` leaves the
separators around a removed word, so follow it with ``normalize_whitespace``.

Vectorized: every op is a polars string expression (regex or Aho-Corasick ``replace_many`` passes) except
those a library forces into Python (``demojize``: emoji.demojize; ``stem``: PyStemmer; ``lemmatize``:
simplemma) and ``squash_elongation`` (it needs a regex backreference, which polars' Rust regex lacks).
Those run through ``map_batches`` and keep the Python work small: stemming and lemmatization call the
library once per *distinct* word of the batch and substitute with one ``replace_many`` pass; demojize and
squash_elongation call Python only on the documents that can change (found by a vectorized test).
``nfc``/``nfkc`` also go through ``map_batches``, to skip ASCII-only documents (invariant under both forms).

Lemmatization vs the teaching texts: on "Running was considered better than going to gym." the WordNet
lemmatizer (with POS tags) in the teaching texts gives "run be consider good than go to gym"; simplemma
2.0 (dictionary lookup, no POS) gives exactly the same words once lowercased and punctuation-stripped
(tests/tasks/corpus/test_clean.py records it). It differs from WordNet elsewhere: being POS-blind it always picks
one lemma per form (e.g. "saw" -> "see", never the noun "saw").

A tagged corpus (``reader.tags``: words that each carry a tag) is cleaned one word at a time (:func:`clean_words`):
the ops see each word alone, so they can change its characters (``nfc``, ``nfkc``, ``lowercase``, ``stem``, ...)
but not where words begin and end. The ops that would split, merge or drop words (:func:`tagged_refusal`) are
refused by the corpus config; a word that another op empties or gives whitespace drops its sentence as
``alignment_changed``, never silently.

Stop-word lists (tasks/data, licences in tasks/corpus/data/README.md): English uses the Glasgow IR list as shipped
by scikit-learn (318 words; reproduces the teaching example); other languages, or ``stopword_list: iso``,
use the stopwords-iso collection (58 languages).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Literal

OPS = (
    "nfc", "nfkc", "strip_html", "strip_emails", "strip_urls", "strip_emoji", "demojize", "mentions",
    "hashtags", "squash_elongation", "lowercase", "strip_punctuation", "ptb_tokenize", "ptb_mikolov",
    "remove_stopwords", "lemmatize", "stem", "normalize_whitespace",
)
PRESET_OPS: dict[str, tuple[str, ...]] = {
    "lm": ("nfc", "normalize_whitespace"),
    "raw": (),
    "classic": ("nfkc", "strip_html", "strip_emails", "strip_urls", "strip_emoji", "lowercase",
                "strip_punctuation", "remove_stopwords", "normalize_whitespace"),
    "social": ("strip_html", "strip_emails", "strip_urls", "nfkc", "mentions", "hashtags", "squash_elongation",
               "demojize", "lowercase", "normalize_whitespace"),
}
PRESETS = tuple(PRESET_OPS)
EXCLUSIVE = (("nfc", "nfkc"), ("strip_emoji", "demojize"))

# ISO 639-1 -> PyStemmer (Snowball) algorithm name.
SNOWBALL = {
    "ar": "arabic", "hy": "armenian", "eu": "basque", "ca": "catalan", "cs": "czech", "da": "danish",
    "nl": "dutch", "en": "english", "eo": "esperanto", "et": "estonian", "fi": "finnish", "fr": "french",
    "de": "german", "el": "greek", "hi": "hindi", "hu": "hungarian", "id": "indonesian", "ga": "irish",
    "it": "italian", "lt": "lithuanian", "ne": "nepali", "no": "norwegian", "fa": "persian", "pl": "polish",
    "pt": "portuguese", "ro": "romanian", "ru": "russian", "sr": "serbian", "st": "sesotho", "es": "spanish",
    "sv": "swedish", "ta": "tamil", "tr": "turkish", "yi": "yiddish",
}
DATA = Path(__file__).parent / "data"

# Patterns (Rust regex syntax, used by polars).
_EMOJI_TAIL = r"(?:[\x{FE0E}\x{FE0F}]|\p{Emoji_Modifier}|[\x{E0020}-\x{E007F}])*"
_EMOJI_HEAD = r"[\p{Extended_Pictographic}\p{Regional_Indicator}]"
EMOJI_PATTERN = (
    rf"(?:{_EMOJI_HEAD}{_EMOJI_TAIL}(?:\x{{200D}}{_EMOJI_HEAD}{_EMOJI_TAIL})*"
    r"|[#*0-9]\x{FE0F}?\x{20E3}|\p{Emoji_Modifier})"
)
_URL_END = r"[^\s<>\"'.,;:!?)\]}]"
_LABEL = r"[a-z0-9](?:[a-z0-9-]*[a-z0-9])?"
_TLDS = "com|org|net|edu|gov|mil|io|ai|app|dev|info|biz|ly|tv|co\\.uk|uk|de|fr|nl|ru|jp|cn|au|br|ch|se|pl"
URL_PATTERN = (
    rf"(?i)\b(?:(?:https?|ftp)://|www\.)[^\s<>\"']*{_URL_END}"
    rf"|(?i)\b{_LABEL}(?:\.{_LABEL})*\.(?:{_TLDS})\b(?:/[^\s<>\"']*{_URL_END})?"
)
EMAIL_PATTERN = rf"(?i)\b[a-z0-9._%+-]+@{_LABEL}(?:\.{_LABEL})*\.[a-z]{{2,}}\b"
HASHTAG_PATTERN = r"(^|[^\w&#])#(\w+)"
MENTION_PATTERN = r"(^|[^\w@.])@(\w+)"
HTML_ENTITIES = (("&nbsp;", " "), ("&lt;", "<"), ("&gt;", ">"), ("&quot;", '"'), ("&#39;", "'"),
                 ("&apos;", "'"), ("&amp;", "&"))


@dataclass(frozen=True)
class CleanConfig:
    """How documents are normalized before filtering and dedup: an ordered list of ops."""

    preset: Literal["lm", "raw", "classic", "social"] = field(
        default="lm",
        metadata={"doc": "Default op list: 'lm' (NFC + whitespace), 'raw' (unchanged), 'classic' (BoW/IR), "
                         "'social' (noisy web text). See the module docstring for each list."},
    )
    ops: tuple[str, ...] | None = field(
        default=None,
        metadata={"doc": "Ordered op names, replacing the preset's list; null: the preset's. Allowed: "
                         + ", ".join(OPS) + "."},
    )
    unicode_form: Literal["NFC", "NFKC", "none"] | None = field(
        default=None, metadata={"doc": "Override the nfc/nfkc op ('none' removes it); null: keep the op list's."}
    )
    normalize_whitespace: bool | None = field(
        default=None,
        metadata={"doc": "Override the normalize_whitespace op (collapse spaces/tabs, strip line ends, CRLF -> LF, "
                         "max one blank line): true adds it last if absent, false removes it; null: the op list's."},
    )
    language: str = field(
        default="en",
        metadata={"doc": "ISO 639-1 code for remove_stopwords, stem (snowball) and lemmatize."},
    )
    stopword_list: Literal["glasgow", "iso"] | None = field(
        default=None,
        metadata={"doc": "'glasgow' (English only, 318 words) or 'iso' (stopwords-iso, 58 languages); "
                         "null: glasgow for English, iso otherwise."},
    )
    extra_stopwords: tuple[str, ...] = field(
        default=(), metadata={"doc": "Words removed in addition to the list (compared case-insensitively)."}
    )
    stemmer: Literal["porter", "snowball"] = field(
        default="snowball",
        metadata={"doc": "For the stem op: 'porter' (Porter 1980, English only) or 'snowball' (language's "
                         "Snowball stemmer; Porter2 for English)."},
    )
    hashtag_mode: Literal["strip_symbol", "drop", "keep"] = field(
        default="strip_symbol", metadata={"doc": "hashtags op: '#tech' -> 'tech', removed, or kept."}
    )
    mention_mode: Literal["strip_symbol", "drop", "keep"] = field(
        default="drop", metadata={"doc": "mentions op: '@user' -> 'user', removed, or kept."}
    )
    elongation_max_repeat: int = field(
        default=2, metadata={"doc": "squash_elongation: a letter repeated more often is cut to this many ('soooo' -> 'soo')."}
    )

    def __post_init__(self) -> None:
        if self.ops is not None:
            unknown = [op for op in self.ops if op not in OPS]
            if unknown:
                raise ValueError(f"ops: {unknown[0]!r} is not an op; allowed: {', '.join(OPS)}")
            dups = sorted({op for op in self.ops if self.ops.count(op) > 1})
            if dups:
                raise ValueError(f"ops: {dups[0]!r} is listed twice; list each op at most once")
            for a, b in EXCLUSIVE:
                if a in self.ops and b in self.ops:
                    raise ValueError(f"ops: {a!r} and {b!r} exclude each other; keep one")
        if self.elongation_max_repeat < 1:
            raise ValueError("elongation_max_repeat: an integer >= 1")
        ops = self.effective_ops
        if "remove_stopwords" in ops:
            if self.effective_stopword_list == "glasgow" and self.language != "en":
                raise ValueError("stopword_list: 'glasgow' is English only; use 'iso' or language 'en'")
            if self.effective_stopword_list == "iso" and self.language not in _iso_stopwords_all():
                raise ValueError(f"language: no stop-word list for {self.language!r}; allowed: "
                                 + ", ".join(sorted(_iso_stopwords_all())))
        if "stem" in ops:
            if self.stemmer == "porter" and self.language != "en":
                raise ValueError("stemmer: 'porter' is English only; use 'snowball' for other languages")
            if self.stemmer == "snowball" and self.language not in SNOWBALL:
                raise ValueError(f"language: no Snowball stemmer for {self.language!r}; allowed: "
                                 + ", ".join(sorted(SNOWBALL)))
        if "lemmatize" in ops:
            try:  # simplemma 2.x keeps its language list here; without it, simplemma itself will complain
                from simplemma.strategies.dictionaries.dictionary_factory import SUPPORTED_LANGUAGES
            except ImportError:
                SUPPORTED_LANGUAGES = frozenset({self.language})
            if self.language not in SUPPORTED_LANGUAGES:
                raise ValueError(f"language: simplemma has no lemmatizer for {self.language!r}; allowed: "
                                 + ", ".join(sorted(SUPPORTED_LANGUAGES)))

    @property
    def effective_ops(self) -> tuple[str, ...]:
        ops = list(PRESET_OPS[self.preset] if self.ops is None else self.ops)
        if self.unicode_form is not None:
            pos = next((i for i, op in enumerate(ops) if op in ("nfc", "nfkc")), 0)
            ops = [op for op in ops if op not in ("nfc", "nfkc")]
            if self.unicode_form != "none":
                ops.insert(pos, self.unicode_form.lower())
        if self.normalize_whitespace is False:
            ops = [op for op in ops if op != "normalize_whitespace"]
        elif self.normalize_whitespace and "normalize_whitespace" not in ops:
            ops.append("normalize_whitespace")
        return tuple(ops)

    @property
    def effective_unicode_form(self) -> str:
        ops = self.effective_ops
        return "NFKC" if "nfkc" in ops else "NFC" if "nfc" in ops else "none"

    @property
    def effective_normalize_whitespace(self) -> bool:
        return "normalize_whitespace" in self.effective_ops

    @property
    def effective_stopword_list(self) -> str:
        return self.stopword_list or ("glasgow" if self.language == "en" else "iso")


def clean_expr(column: str, cfg: CleanConfig):
    """A polars expression that cleans ``column`` by applying ``cfg``'s ops in order. Nulls stay null."""
    import polars as pl

    expr = pl.col(column)
    for op in cfg.effective_ops:
        expr = _OP_BUILDERS[op](expr, cfg)
    return expr


# The ops that would split, merge or drop the words of a tagged corpus (its tags would no longer line up), and how.
WORD_BREAKING = {
    "ptb_tokenize": "splits words (it's -> it 's)",
    "ptb_mikolov": "splits words (it's -> it 's, 25% -> N N) and empties punctuation words",
    "remove_stopwords": "empties every stop word",
    "strip_punctuation": "empties every punctuation word (. , !)",
    "strip_html": "empties tag words (<br>) and turns block tags into line breaks",
    "strip_emails": "empties e-mail address words",
    "strip_urls": "empties URL words",
    "strip_emoji": "empties emoji words",
}


def tagged_refusal(cfg: CleanConfig) -> str | None:
    """Why ``cfg`` cannot clean a tagged corpus (its first op that splits, merges or drops words), or None."""
    for op in cfg.effective_ops:
        why = WORD_BREAKING.get(op)
        if op == "mentions" and cfg.mention_mode == "drop":
            why = "with mention_mode drop, empties @user words (mention_mode: strip_symbol keeps them)"
        if op == "hashtags" and cfg.hashtag_mode == "drop":
            why = "with hashtag_mode drop, empties #tag words (hashtag_mode: strip_symbol keeps them)"
        if why:
            return (f"{op!r} {why}: a tagged corpus (reader.tags) is cleaned word by word and keeps every word, "
                    f"so its tags stay aligned; leave {op} out (clean.ops, or preset lm or raw)")
    return None


def clean_words(tokens, cfg: CleanConfig, as_read=None):
    """A tagged corpus's cleaning: (cleaned, problem) for a Series of records' words joined by one space. Each word
    is cleaned alone with :func:`clean_expr` (one vectorized pass over all the words of the Series) and the words
    joined back by one space, so a record keeps its word count. ``problem``: per record, the first word that the
    cleaning left empty or holding whitespace (its tags would no longer line up: the record is dropped as
    ``alignment_changed``), else null. ``as_read``: the words as read, to show in ``problem`` (default ``tokens``)."""
    import polars as pl

    as_read = tokens if as_read is None else as_read
    if tokens.len() == 0:
        return tokens, pl.Series(tokens.name, [None] * tokens.len(), dtype=pl.Utf8)
    words = (pl.DataFrame({"row": pl.int_range(tokens.len(), eager=True), "word": tokens.str.split(" "),
                           "read": as_read.str.split(" ")})
             .explode("word", "read")
             .with_columns(pl.int_range(pl.len()).over("row").alias("at"), clean_expr("word", cfg).alias("clean")))
    bad = pl.col("clean").is_null() | ~pl.col("clean").str.contains(r"^\S+$")
    how = pl.when(pl.col("clean").fill_null("") == "").then(pl.lit("is empty after cleaning")).otherwise(
        pl.format("holds whitespace after cleaning ('{}')", "clean"))
    words = words.with_columns(pl.when(bad).then(pl.format("word {} '{}' ", pl.col("at") + 1, "read") + how)
                               .alias("problem"))
    out = words.group_by("row", maintain_order=True).agg(pl.col("clean").str.join(" "),
                                                          pl.col("problem").drop_nulls().first())
    return out["clean"].alias(tokens.name), out["problem"].alias(tokens.name)


def clean_texts(texts: list[str | None], cfg: CleanConfig) -> list[str | None]:
    """Convenience: clean a Python list of strings (tests, notebooks)."""
    import polars as pl

    return pl.DataFrame({"t": texts}, schema={"t": pl.Utf8}).select(clean_expr("t", cfg))["t"].to_list()


def is_empty_expr(column: str):
    """A document is empty when it has no non-whitespace character (whatever the preset kept)."""
    import polars as pl

    return ~pl.col(column).str.contains(r"\S")


def word_count_expr(column: str):
    import polars as pl

    return pl.col(column).str.count_matches(r"\S+").cast(pl.Int64)


def word_counts(texts):
    """``word_count_expr`` on a Series, ~3.5x faster. ASCII documents are counted in numpy on their UTF-8
    bytes: a word starts at a non-space byte that follows a space or begins the document (space and
    \\t \\n \\v \\f \\r are the ASCII members of Unicode White_Space, all that ``\\s`` matches there). The
    others (any non-ASCII character, where Unicode spaces count) go through the regex. The same Int64
    values; nulls stay null."""
    import numpy as np
    import polars as pl
    import pyarrow as pa

    n = texts.len()
    if n == 0:
        return pl.Series(texts.name, [], dtype=pl.Int64)
    arrow = texts.fill_null("").to_arrow()
    if arrow.type != pa.large_string():
        arrow = arrow.cast(pa.large_string())
    arrow = arrow.combine_chunks() if isinstance(arrow, pa.ChunkedArray) else arrow
    _, offsets_buf, data_buf = arrow.buffers()
    offsets = np.frombuffer(offsets_buf, dtype=np.int64, count=n + 1, offset=arrow.offset * 8)
    data = np.frombuffer(data_buf, dtype=np.uint8, count=int(offsets[-1]) - int(offsets[0]),
                         offset=int(offsets[0])) if data_buf is not None else np.zeros(0, np.uint8)
    offsets = offsets - offsets[0]
    is_space = (data == 32) | ((data - np.uint8(9)) < 5)  # space, or \t \n \v \f \r (uint8 wraps below 9)
    prev_space = np.empty_like(is_space)
    if len(is_space):
        prev_space[0] = True
        prev_space[1:] = is_space[:-1]
        starts = offsets[:-1][offsets[:-1] < offsets[1:]]
        prev_space[starts] = True  # a document's first byte starts a word unless it is a space
    word_starts = np.flatnonzero(~is_space & prev_space)
    begins = np.searchsorted(word_starts, offsets)  # words starting before each document's first byte
    counts = pl.Series(texts.name, np.diff(begins), dtype=pl.Int64)
    non_ascii = (texts.str.len_bytes() != texts.str.len_chars()).fill_null(False).arg_true()
    if non_ascii.len():
        regex = texts.gather(non_ascii).str.count_matches(r"\S+").cast(pl.Int64)
        counts = counts.scatter(non_ascii, regex)
    return counts.set(texts.is_null(), None) if texts.null_count() else counts


# --- ops: (expr, cfg) -> expr ---------------------------------------------------------------------------


# A document the whitespace chain changes holds one of these; any other document is left as it is, so the chain
# runs only on the documents that match (one scan of the rest instead of five).
WHITESPACE_TO_FIX = r"\r|[^\S\n]{2,}|[^\S\n ]| \n|\n |\n{3,}|^\s|\s$"


def _whitespace(expr, cfg):
    return _map_batches(expr, _whitespace_batch)


def _whitespace_batch(s):
    """``_whitespace_chain`` on the documents of ``s`` that can change (``WHITESPACE_TO_FIX``): each of its
    steps is the identity on a document without a CR, a run of 2+ horizontal spaces, a horizontal space other
    than " ", a space beside a LF, 3+ LFs, or whitespace at either end. Nulls stay null."""
    import polars as pl

    idx = s.str.contains(WHITESPACE_TO_FIX).fill_null(False).arg_true()
    if idx.len() == 0:
        return s
    fixed = s.gather(idx).to_frame("t").select(_whitespace_chain(pl.col("t")))["t"]
    return fixed.alias(s.name) if idx.len() == s.len() else s.clone().scatter(idx, fixed)


def _whitespace_chain(expr):
    """The definition of ``normalize_whitespace``."""
    return (
        expr.str.replace_all(r"\r\n?", "\n")
        # runs of horizontal whitespace (incl. NBSP, tabs) -> one space; matching only the runs that change
        # (2+ characters, or one that is not a plain space) keeps single spaces out of the replace path
        .str.replace_all(r"[^\S\n]{2,}|[^\S\n ]", " ")
        .str.replace_all(r" ?\n ?", "\n")
        .str.replace_all(r"\n{3,}", "\n\n")
        .str.strip_chars()
    )


# Penn Treebank-style splitting, each step a (pattern, replacement) of polars' Rust regex (no look-around, so the
# context is captured and put back). On text already split this way every step is the identity.
PTB_STEPS = (
    (r"[\u2018\u2019]", "'"),                              # curly single quotes and apostrophes -> '
    (r"[\u201c\u201d]", '"'),                              # curly double quotes -> "
    (r'(^|[\s(\[{])"', "${1}`` "),                         # an opening double quote -> ``
    (r'"', " '' "),                                        # any other double quote closes -> ''
    (r"(?i)([a-z])(n't)\b", "${1} ${2}"),                  # doesn't -> does n't, can't -> ca n't
    (r"(?i)([a-z0-9])('s|'re|'ve|'ll|'d|'m)\b", "${1} ${2}"),  # it's -> it 's, we've -> we 've
    (r"([(\[{])(\S)", "${1} ${2}"),                        # (great -> ( great
    (r"(\S)([)\]}])", "${1} ${2}"),                        # great) -> great )
    (r"\.([,;:!?]+)(\s|$)", ". ${1}${2}"),                 # u.s., -> u.s. , (the period may be the word's)
    (r"([^\s.,!?;:])([.,!?;:]+)(\s|$)", "${1} ${2}${3}"),  # a word's trailing punctuation: movie. -> movie .
    # ... but an abbreviation or initials keep their period, as the treebank has them: mr. vs. u.s. j.k. f.
    # (twice: a match takes the space after it, which the next abbreviation needs before it: mr. f. kennedy)
    *[(r"(?i)(^|\s)(mr|mrs|ms|dr|st|jr|sr|vs|bros|inc|corp|ltd|[a-z](?:\.[a-z])*) \.(\s|$)", "${1}${2}.${3}")] * 2,
    (r"(?i)(^|\s)(no) \.(\s+\d)", "${1}${2}.${3}"),         # no. 9
    (r"[^\S\n]{2,}", " "),                                 # the spaces the steps above doubled
)


def _ptb_tokenize(expr):
    """``ptb_tokenize``: split text the way the Penn Treebank and GLUE's SST-2 are (``It's great!`` ->
    ``It 's great !``): clitics (n't 's 're 've 'll 'd 'm), a word's trailing punctuation, brackets, and double quotes
    as `` and ''. Idempotent: text already split this way is unchanged, so a corpus that was tokenized so keeps its
    words, and raw text given to a model trained on it is split to match (put ``lowercase`` first for SST-2/PTB).
    Numbers (3.5, 1,000), abbreviations (mr. vs. no. 9) and initials (u.s. j.k. f.) are kept whole."""
    for pattern, replacement in PTB_STEPS:
        expr = expr.str.replace_all(pattern, replacement)
    return expr.str.strip_chars(" ")


# The abbreviations whose period Mikolov's Penn Treebank text keeps (every "word." of its train/valid/test files that
# is not initials): a word's last period is punctuation, and dropped, unless the word is one of these or initials.
PTB_ABBREVIATIONS = (
    "mr mrs ms messrs dr prof gov gen sen sens rep rev adm col st sr jr cie co cos corp inc ltd bros vs etc no "
    "jan feb aug sept oct nov dec "
    "ala ariz calif colo conn del fla ga ill ind kan ky mass md mich minn mo neb nev okla ore pa tenn va wash wis"
).split()
PTB_MIKOLOV_STEPS = (
    (r"[\u2018\u2019]", "'"),
    (r"(?i)([a-z])(n't)\b", "${1} ${2}"),                     # clitics split, as ptb_tokenize
    (r"(?i)([a-z0-9])('s|'re|'ve|'ll|'d|'m)\b", "${1} ${2}"),
    (r"\$(\d)", "$$ ${1}"),                                   # $3.50 -> $ N
    # a number (and the punctuation right after it) -> N; each such step twice, as a match takes the space after
    # it that the next match needs before it (N N, mr. corp.)
    *[(r"(^|\s)[-+]?\d[\d,.]*([.,;:!?%)]*)(\s|$)", "${1}N ${2}${3}")] * 2,
    (r"%", " N "),                                            # 25% -> N N, as the benchmark has it
    (r"[\u201c\u201d\"`,;:!?()\[\]{}]+|''|--", " "),          # punctuation the text has not got
    *[(r"(?i)(^|[\s-])([a-z](?:\.[a-z])*)\.(\s|$)", "${1}${2}\ue000${3}")] * 2,  # initials keep their period
    *[(r"(?i)(^|\s)(" + "|".join(PTB_ABBREVIATIONS) + r")\.(\s|$)", "${1}${2}\ue000${3}")] * 2,  # and mr. corp.
    (r"\.+(\s|$)", "${1}"),                                   # any other word's last period is punctuation
    (r"\ue000", "."),
    *[(r"(^|\s)n(\s|$)", "${1}N${2}")] * 2,                   # the number token after a lowercase op
    (r"[^\S\n]{2,}", " "),
)


def _ptb_mikolov(expr):
    """``ptb_mikolov``: text as in Mikolov's Penn Treebank (the PTB language-modelling benchmark: lowercased
    elsewhere, numbers as ``N``, no punctuation but abbreviations' periods, clitics split): ``Mr. Smith's firm paid
    $3.50, up 25%.`` -> ``Mr. Smith 's firm paid $ N up N N`` (put ``lowercase`` first: a lone ``n`` it makes from ``N`` is
    ``N`` again). Idempotent on the benchmark's own files (not one line of train, valid or test changes), so a PTB
    model can be given ordinary sentences as prompts."""
    import polars as pl

    out = expr
    for pattern, replacement in PTB_MIKOLOV_STEPS:
        out = out.str.replace_all(pattern, replacement)
    # the spaces at either end that the text had stay (the benchmark's lines start and end with one), those the
    # steps made go
    out = pl.when(expr.str.starts_with(" ")).then(out).otherwise(out.str.strip_chars_start(" "))
    return pl.when(expr.str.ends_with(" ")).then(out).otherwise(out.str.strip_chars_end(" "))


def _strip_html(expr, cfg):
    expr = (
        expr.str.replace_all(r"(?is)<script\b.*?</script\s*>|<style\b.*?</style\s*>|<!--.*?-->", "")
        # block-level tags end a line; inline tags vanish ("wo<b>rd</b>" -> "word")
        .str.replace_all(r"(?i)</?(?:br|p|div|li|ul|ol|h[1-6]|tr|table|blockquote|hr|pre|section|article)\b[^<>]*>",
                         "\n")
        .str.replace_all(r"</?[a-zA-Z][^<>]*>", "")
    )
    # one left-to-right pass over all entities, so "&amp;lt;" becomes "&lt;" and not "<"
    return expr.str.replace_many([e for e, _ in HTML_ENTITIES], [c for _, c in HTML_ENTITIES])


def _hashtag_like(pattern: str, mode: str):
    def build(expr):
        if mode == "keep":
            return expr
        return expr.str.replace_all(pattern, "${1}${2}" if mode == "strip_symbol" else "${1}")
    return build


def _remove_stopwords(expr, cfg):
    """Delete every stop word that stands as a whole word (regex word boundaries, case-insensitive).

    One regex pass; longer words come first in the alternation so "i'm" wins over "i". In "don't", "don"
    and "t" are words of their own (as in any \\b-based tokenizer); the classic preset strips punctuation first.
    """
    import polars as pl

    words = sorted(stopwords(cfg.language, cfg.effective_stopword_list) | _lower(cfg.extra_stopwords),
                   key=lambda w: (-len(w), w))
    return expr.str.replace_all(r"(?i)\b(?:" + "|".join(pl.escape_regex(w) for w in words) + r")\b", "")


def _lower(words) -> set[str]:
    return {w.lower() for w in words}


_OP_BUILDERS = {
    "nfc": lambda e, c: _map_batches(e, lambda s: _normalize_batch(s, "NFC")),
    "nfkc": lambda e, c: _map_batches(e, lambda s: _normalize_batch(s, "NFKC")),
    "strip_html": _strip_html,
    "strip_emails": lambda e, c: e.str.replace_all(EMAIL_PATTERN, ""),
    "strip_urls": lambda e, c: e.str.replace_all(URL_PATTERN, ""),
    "strip_emoji": lambda e, c: e.str.replace_all(EMOJI_PATTERN, ""),
    "demojize": lambda e, c: _map_batches(e, _demojize_batch),
    "mentions": lambda e, c: _hashtag_like(MENTION_PATTERN, c.mention_mode)(e),
    "hashtags": lambda e, c: _hashtag_like(HASHTAG_PATTERN, c.hashtag_mode)(e),
    "squash_elongation": lambda e, c: _map_batches(e, lambda s: _squash_batch(s, c.elongation_max_repeat)),
    "lowercase": lambda e, c: e.str.to_lowercase(),
    # every character that is neither a word character nor whitespace, as the teaching texts'
    # re.sub(r'[^\w\s]', '', text) does
    "strip_punctuation": lambda e, c: e.str.replace_all(r"[^\w\s]+", ""),
    "ptb_tokenize": lambda e, c: _ptb_tokenize(e),
    "ptb_mikolov": lambda e, c: _ptb_mikolov(e),
    "remove_stopwords": _remove_stopwords,
    "lemmatize": lambda e, c: _map_batches(e, lambda s: _map_words(s, _lemmatizer(c.language))),
    "stem": lambda e, c: _map_batches(e, lambda s: _map_words(s, _stemmer(c.stemmer, c.language))),
    "normalize_whitespace": _whitespace,
}


# --- the ops that need Python --------------------------------------------------------------------------


def _map_batches(expr, fn):
    import polars as pl

    return expr.map_batches(fn, return_dtype=pl.Utf8)


def _map_words(s, word_fn):
    """Apply ``word_fn(list of distinct words) -> list of words`` to every word (``\\w+``) of every document.

    Python sees each distinct word once per batch (the library forces a Python call per word); the
    substitution is one vectorized Aho-Corasick pass (``replace_many``) over the documents, with every
    distinct word as a pattern, longest first: at each word's start the whole word is the longest match,
    so no word is ever replaced inside another, and whitespace and punctuation are kept exactly.
    """
    vocab = s.str.extract_all(r"\w+").explode().drop_nulls().unique()
    if vocab.len() == 0:
        return s
    words = sorted(vocab.to_list(), key=len, reverse=True)
    mapped = word_fn(words)
    return s.str.replace_many(words, mapped, leftmost=True)


def _normalize_batch(s, form: str):
    """Unicode normalization of the documents that need it: ASCII text is invariant under NFC and NFKC,
    and most documents of an English corpus are ASCII (the check is a length comparison)."""
    non_ascii = (s.str.len_bytes() != s.str.len_chars()).fill_null(False)
    idx = non_ascii.arg_true()
    if idx.len() == 0:
        return s
    if idx.len() == s.len():
        return s.str.normalize(form)
    return s.clone().scatter(idx, s.gather(idx).str.normalize(form))


def _stemmer(kind: str, language: str):
    import Stemmer  # PyStemmer

    stemmer = Stemmer.Stemmer("porter" if kind == "porter" else SNOWBALL[language])
    return stemmer.stemWords


def _lemmatizer(language: str):
    import simplemma

    def lemmatize(words: list[str]) -> list[str]:
        return [simplemma.lemmatize(w, lang=language) for w in words]  # a Python loop over distinct words
    return lemmatize


def _demojize_batch(s):
    """emoji.demojize, called (in Python; the library has no vectorized form) only on documents with an emoji."""
    import emoji
    import polars as pl

    has = s.str.contains(EMOJI_PATTERN).fill_null(False)
    idx = has.arg_true()
    if idx.len() == 0:
        return s
    mapped = [emoji.demojize(t) for t in s.gather(idx).to_list()]
    return s.clone().scatter(idx, pl.Series(mapped, dtype=pl.Utf8))


def _squash_batch(s, max_repeat: int):
    """Cut runs of one letter longer than ``max_repeat`` ("soooo" -> "soo"; digits are left alone).

    Needs a backreference, which polars' regex engine lacks, so Python's ``re`` does it, but only on the
    candidate documents: those with an ASCII letter repeated ``max_repeat + 1`` times (one vectorized
    Aho-Corasick pass) or with any non-ASCII character. The candidates are joined with NUL (not a letter,
    so no run crosses a document boundary) into one ``re.sub`` call; per document only if one contains NUL.
    """
    import re

    import polars as pl

    runs = [c * (max_repeat + 1) for c in "abcdefghijklmnopqrstuvwxyz"]
    candidate = (s.str.contains_any(runs, ascii_case_insensitive=True)
                 | (s.str.len_bytes() != s.str.len_chars())).fill_null(False)
    idx = candidate.arg_true()
    if idx.len() == 0:
        return s
    pattern = re.compile(r"([^\W\d_])\1{%d,}" % max_repeat)
    repl = r"\1" * max_repeat
    texts = s.gather(idx).to_list()
    if any("\x00" in t for t in texts):
        out = [pattern.sub(repl, t) for t in texts]
    else:
        out = pattern.sub(repl, "\x00".join(texts)).split("\x00")
    return s.clone().scatter(idx, pl.Series(out, dtype=pl.Utf8))


# --- stop-word lists ------------------------------------------------------------------------------------


@lru_cache(maxsize=1)
def _iso_stopwords_all() -> dict[str, list[str]]:
    import json

    return json.loads((DATA / "stopwords-iso.json").read_text(encoding="utf-8"))


@lru_cache(maxsize=64)
def stopwords(language: str, source: str = "glasgow") -> frozenset[str]:
    """The shipped stop-word list (lowercase), with curly-apostrophe variants of words like "don't"."""
    if source == "glasgow":
        if language != "en":
            raise ValueError("stopword_list: 'glasgow' is English only")
        words = (DATA / "stopwords-glasgow-en.txt").read_text(encoding="utf-8").split()
    else:
        words = _iso_stopwords_all()[language]
    words = {w.lower() for w in words}
    return frozenset(words | {w.replace("'", "\u2019") for w in words if "'" in w})
