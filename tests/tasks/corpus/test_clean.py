"""corpusforge.tasks.corpus.clean: the 'lm' preset as polars expressions."""

from __future__ import annotations

import unicodedata

import polars as pl
import pytest

from corpusforge.tasks.corpus.clean import CleanConfig, clean_expr, word_count_expr, word_counts

COMBINING_E = "e\u0301"  # 'e' + COMBINING ACUTE ACCENT (NFD)
PRECOMPOSED_E = "\u00e9"  # 'é'


def clean(texts: list[str], cfg: CleanConfig = CleanConfig()) -> list[str]:
    return pl.DataFrame({"t": texts}, schema={"t": pl.Utf8}).select(clean_expr("t", cfg))["t"].to_list()


def test_nfc_folds_combining_accent():
    [out] = clean([f"caf{COMBINING_E}"])
    assert out == f"caf{PRECOMPOSED_E}"
    assert len(out) == 4
    assert out == unicodedata.normalize("NFC", f"caf{COMBINING_E}")


def test_unicode_form_none_keeps_combining_accent():
    [out] = clean([f"caf{COMBINING_E}"], CleanConfig(unicode_form="none"))
    assert out == f"caf{COMBINING_E}"
    assert len(out) == 5


def test_nfkc_folds_compatibility_characters_but_nfc_does_not():
    ligature = "\ufb01le"  # 'ﬁ' ligature
    assert clean([ligature]) == [ligature]
    assert clean([ligature], CleanConfig(unicode_form="NFKC")) == ["file"]


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("a\r\nb", "a\nb"),  # CRLF -> LF
        ("a\rb", "a\nb"),  # lone CR -> LF
        ("a\t\tb", "a b"),  # tabs -> one space
        ("a    b", "a b"),  # runs of spaces -> one
        ("a\u00a0b", "a b"),  # NBSP -> space
        ("a \t\u00a0 b", "a b"),  # mixed horizontal whitespace -> one space
        ("a \n b", "a\nb"),  # spaces around newlines stripped
        ("a\t\r\n\tb", "a\nb"),
        ("a\n\n\nb", "a\n\nb"),  # 3+ newlines -> one blank line
        ("a\n\n\n\n\n\nb", "a\n\nb"),
        ("a \n \n \n b", "a\n\nb"),  # whitespace-only lines count as blank
        ("a\n\nb", "a\n\nb"),  # one blank line is kept
        ("a\nb", "a\nb"),  # a line break inside a document is kept
        ("  \n padded \t\n ", "padded"),  # leading/trailing whitespace stripped
        ("   ", ""),
        ("", ""),
    ],
)
def test_whitespace_normalization(raw, expected):
    assert clean([raw]) == [expected]


def test_case_and_punctuation_kept():
    text = "HeLLo, World! \"Quoted\" -- (it's) 3.14; ¿Qué? ¡Sí!"
    assert clean([text]) == [text]


def test_normalize_whitespace_off_leaves_whitespace_alone():
    raw = "a\t\tb\r\n\n\n\nc  "
    assert clean([raw], CleanConfig(normalize_whitespace=False)) == [raw]


def test_null_stays_null():
    assert clean([None, "x"]) == [None, "x"]


def test_word_count_counts_whitespace_separated_tokens():
    texts = ["one", "two words", "a\tb\nc  d", "", "   ", "don't stop-me now!", "x\u00a0y"]
    out = pl.DataFrame({"t": texts}).select(word_count_expr("t"))["t"]
    assert out.dtype == pl.Int64
    assert out.to_list() == [len(t.split()) for t in texts]
    assert out.to_list() == [1, 2, 4, 0, 0, 3, 2]


def test_word_counts_equal_the_regex_count_on_every_kind_of_text():
    """The numpy path (ASCII documents) and the regex path (the rest) give exactly ``word_count_expr``."""
    import random

    rng = random.Random(7)
    alphabet = ["a", "b", " ", "  ", "\t", "\n", "\r", "\x0b", "\x0c", "\x1f", "\u00a0", "\u3000", "é", "\u2028",
                "x\u0301", ".", "\x85"]
    texts = ["", " ", "one", " lead", "trail ", None, "\u00a0", "é", "a\u00a0b"]
    texts += ["".join(rng.choices(alphabet, k=rng.randrange(0, 30))) for _ in range(500)]
    series = pl.Series("t", texts, dtype=pl.Utf8)
    expected = pl.DataFrame({"t": series}).select(word_count_expr("t"))["t"]
    for part in (series, series.slice(3, 200), series.filter(series.is_not_null()), series[:0]):
        got = word_counts(part)
        want = pl.DataFrame({"t": part}).select(word_count_expr("t"))["t"]
        assert got.dtype == pl.Int64 and got.to_list() == want.to_list()
    assert word_counts(series).null_count() == 1 and expected.null_count() == 1


def test_whitespace_runs_only_where_a_document_can_change_and_gives_the_whole_chain():
    """normalize_whitespace rewrites only the documents WHITESPACE_TO_FIX matches; on every kind of
    whitespace (CR, CRLF, tabs, NBSP, em space, U+001C, NEL, runs, ends, empty and null documents) the
    result equals the full chain of replacements run on every document."""
    import random

    from corpusforge.tasks.corpus.clean import _whitespace_batch, _whitespace_chain

    rng = random.Random(11)
    alphabet = [" ", "  ", "\t", "\n", "\r", "\r\n", "\u00a0", "\u2003", "\x0b", "\x0c", "\x1c", "\x85", "a", "b",
                "é", "\n\n\n", "\u2028"]
    texts = ["", " ", "a b", "a  b", "a\nb", "a \nb", "a\n\nb", "a\n\n\nb", "x ", " x", None]
    texts += ["".join(rng.choices(alphabet, k=rng.randrange(0, 14))) for _ in range(20000)]
    series = pl.Series("t", texts, dtype=pl.Utf8)
    for part in (series, series.filter(series.str.contains(r"^[ab]*$").fill_null(False)), series[:0]):
        want = pl.DataFrame({"t": part}).select(_whitespace_chain(pl.col("t")))["t"]
        got = _whitespace_batch(part)
        assert got.name == "t" and got.to_list() == want.to_list()
    # most documents of a cleaned corpus need nothing: those are not touched, and the rest are fixed
    assert _whitespace_batch(pl.Series("t", ["a b", "c  d", None])).to_list() == ["a b", "c d", None]
    assert _whitespace_batch(pl.Series("t", [" a", "b\r\n"])).to_list() == ["a", "b"]


def test_raw_preset_leaves_text_byte_identical():
    raw = f"  caf{COMBINING_E}\r\n\tTwo  spaces \n\n\n\nend  "
    assert clean([raw], CleanConfig(preset="raw")) == [raw]
    # an explicit field still overrides the preset's choice
    assert clean([raw], CleanConfig(preset="raw", unicode_form="NFC")) == [raw.replace(COMBINING_E, "\u00e9")]


# --- ops, presets and the teaching-text examples ---------------------------------------------------------

import re  # noqa: E402
from pathlib import Path  # noqa: E402

from corpusforge.tasks.corpus.clean import OPS, PRESET_OPS, clean_texts, stopwords  # noqa: E402
from corpusforge.tasks.config import ConfigError, from_dict  # noqa: E402

TEACHING_GREETING = "👋 Hello, together we will learn NLP (Natural Language Processing)!!!"
TEACHING_GYM = "Running was considered better than going to gym."
TEACHING_TWEET = ("WOw!!! The new iphone 18 pro is SOOO good! I luvv it… best phone ever? "
                  "Check it out at someCoolSite.com #tech #apple")


def ops_cfg(*ops: str, **kw) -> CleanConfig:
    return CleanConfig(ops=ops, **kw)


def test_lm_and_raw_op_lists_are_the_original_presets():
    assert CleanConfig().effective_ops == ("nfc", "normalize_whitespace")
    assert CleanConfig(preset="raw").effective_ops == ()
    assert CleanConfig(unicode_form="NFKC", normalize_whitespace=False).effective_ops == ("nfkc",)
    assert CleanConfig(preset="raw", normalize_whitespace=True).effective_ops == ("normalize_whitespace",)


def test_teaching_classic_example_without_stemming():
    # ../shared/seeds/001: "👋 Hello, together we will learn NLP (Natural Language Processing)!!!" ->
    # "hello learn nlp natural language processing"
    assert clean([TEACHING_GREETING], CleanConfig(preset="classic")) == ["hello learn nlp natural language processing"]


def test_teaching_porter_example():
    # ../shared/seeds/001: Porter Stemmer Output: ["run", "wa", "consid", "better", "than", "go", "to", "gym"]
    cfg = ops_cfg("lowercase", "strip_punctuation", "stem", "normalize_whitespace", stemmer="porter")
    assert clean([TEACHING_GYM], cfg) == ["run wa consid better than go to gym"]
    # the same words through the classic preset plus stemming: stop words go first
    classic = CleanConfig(preset="classic", ops=PRESET_OPS["classic"] + ("stem",), stemmer="porter")
    assert clean([TEACHING_GYM], classic) == ["run consid better go gym"]


def test_snowball_english_is_porter2_which_keeps_was():
    # Porter2 (snowballstem.org/algorithms/english) does not strip the 's' of "was" (the vowel sits right
    # before it); the original Porter algorithm does ("wa", above)
    cfg = ops_cfg("lowercase", "strip_punctuation", "stem", "normalize_whitespace", stemmer="snowball")
    assert clean([TEACHING_GYM], cfg) == ["run was consid better than go to gym"]


def test_lemmatizer_on_the_teaching_sentence():
    # WordNet (with POS tags) in ../shared/seeds/001: ["run", "be", "consider", "good", "than", "go", "to", "gym"].
    # simplemma 2.0 (dictionary, no POS) gives the same eight words: no difference on this sentence.
    cfg = ops_cfg("lowercase", "strip_punctuation", "lemmatize", "normalize_whitespace")
    assert clean([TEACHING_GYM], cfg) == ["run be consider good than go to gym"]
    # where it does differ from POS-aware WordNet: one lemma per form, whatever the role ("saw" as a noun)
    assert clean(["the saw"], ops_cfg("lemmatize")) == ["the see"]


def test_stem_keeps_punctuation_and_line_breaks_between_words():
    cfg = ops_cfg("stem", stemmer="porter")
    assert clean(["running,\njumping. (cats)", None, ""], cfg) == ["run,\njump. (cat)", None, ""]


def test_snowball_german_stemmer_and_iso_stopwords():
    cfg = ops_cfg("lowercase", "remove_stopwords", "stem", "normalize_whitespace", language="de")
    # "die", "und", "der" are German stop words (stopwords-iso de); Snowball German: häuser -> haus
    assert clean(["Die Häuser und der Garten"], cfg) == ["haus gart"]


def test_classic_matches_a_plain_python_reference():
    glasgow_file = Path(__file__).resolve().parents[3] / "tasks" / "corpus" / "data" / "stopwords-glasgow-en.txt"
    glasgow = set(glasgow_file.read_text(encoding="utf-8").split())
    texts = [TEACHING_GREETING, "The QUICK brown fox, isn't it?\nJumps over the lazy dog; twice!",
             "Ünïcödé ﬁle — naïve café résumé", "   ", "#hashtag and @mention stay as words"]
    got = clean(texts, CleanConfig(preset="classic"))
    for text, out in zip(texts, got):
        # reference: NFKC, drop emoji, lowercase, the teaching texts' re.sub(r'[^\w\s]', ''), drop stop words
        ref = unicodedata.normalize("NFKC", text).replace("👋", "").lower()
        tokens = re.sub(r"[^\w\s]", "", ref).split()
        # classic keeps line breaks (normalize_whitespace), so compare the word sequences
        assert out.split() == [t for t in tokens if t not in glasgow]
        assert "  " not in out and out == out.strip()


def test_shipped_glasgow_list():
    # scikit-learn's ENGLISH_STOP_WORDS has 318 entries (checked against sklearn 1.9.1 when it was copied;
    # importing sklearn here would cost 2.5 s)
    words = stopwords("en", "glasgow")
    assert len(words) == 318
    assert {"together", "we", "will", "the", "was", "than", "to"} <= words
    assert not {"hello", "learn", "nlp", "natural", "language", "processing", "gym", "better"} & words


def test_stopwords_case_insensitive_extra_words_and_apostrophes():
    cfg = ops_cfg("remove_stopwords", "normalize_whitespace", stopword_list="iso", extra_stopwords=("Gym",))
    # "don't" and "i'm" are entries of the ISO English list; the curly-apostrophe spelling matches too
    assert clean(["Don’t GO to the gym, I'm tired"], cfg) == [", tired"]


def test_social_preset_on_the_teaching_tweet():
    # by hand: URL removed, '…' -> '...' (NFKC), '#' stripped, 'SOOO' -> 'SOO', lowercased, spaces collapsed
    expected = ("wow!!! the new iphone 18 pro is soo good! i luvv it... best phone ever? "
                "check it out at tech apple")
    assert clean([TEACHING_TWEET], CleanConfig(preset="social")) == [expected]


def test_social_mentions_emoji_and_emails():
    text = "@bob loves NLP 👋🏽 ❤️ mail me at bob.smith+x@mail.example.co.uk"
    # the emoji names are CLDR short names (emoji package): 👋🏽 waving hand: medium skin tone, ❤️ red heart
    assert clean([text], CleanConfig(preset="social")) == ["loves nlp :waving_hand_medium_skin_tone: :red_heart: mail me at"]


@pytest.mark.parametrize(
    ("mode", "expected"),
    [("strip_symbol", "tech and apple, x#y &#39;"), ("drop", " and , x#y &#39;"), ("keep", "#tech and #apple, x#y &#39;")],
)
def test_hashtag_modes(mode, expected):
    assert clean(["#tech and #apple, x#y &#39;"], ops_cfg("hashtags", hashtag_mode=mode)) == [expected]


@pytest.mark.parametrize(
    ("mode", "expected"),
    [("strip_symbol", "hi bob, a@b.org"), ("drop", "hi , a@b.org"), ("keep", "hi @bob, a@b.org")],
)
def test_mention_modes_leave_email_addresses_alone(mode, expected):
    assert clean(["hi @bob, a@b.org"], ops_cfg("mentions", mention_mode=mode)) == [expected]


def test_squash_elongation_letters_only():
    texts = ["soooo goooood!!!! 1000000 aaa ab", None, "x\x00yyyy", ""]
    assert clean(texts, ops_cfg("squash_elongation")) == ["soo good!!!! 1000000 aa ab", None, "x\x00yy", ""]
    assert clean(["soooo"], ops_cfg("squash_elongation", elongation_max_repeat=1)) == ["so"]


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("see https://ex.com/a?b=1.", "see ."),
        ("(http://x.org/p)", "()"),
        ("go to www.site.net now", "go to  now"),
        ("at someCoolSite.com #tech", "at  #tech"),
        ("sub.domain.co.uk/path/x and more", " and more"),
        ("e.g. file.py 3.14 U.S.A. node.js", "e.g. file.py 3.14 U.S.A. node.js"),  # not URLs
    ],
)
def test_strip_urls(raw, expected):
    assert clean([raw], ops_cfg("strip_urls")) == [expected]


def test_strip_emails_before_urls():
    assert clean(["write bob.smith+x@mail.example.co.uk or a_b@c.io."], ops_cfg("strip_emails", "strip_urls")) == [
        "write  or ."
    ]


def test_strip_html():
    raw = "<p>Hello <b>wo</b>rld</p><script>var x = '<p>';</script><!-- c -->Tom &amp; Jerry &lt;3 a<b"
    assert clean([raw], ops_cfg("strip_html")) == ["\nHello world\nTom & Jerry <3 a<b"]


def test_strip_emoji_removes_every_emoji_the_emoji_package_knows():
    emoji = pytest.importorskip("emoji")
    keys = list(emoji.EMOJI_DATA)
    assert len(keys) > 4000
    assert clean(keys, ops_cfg("strip_emoji")) == [""] * len(keys)
    # digits, '#', '*' and text symbols are not emoji on their own
    assert clean(["#1 * 3 a→b ½"], ops_cfg("strip_emoji")) == ["#1 * 3 a→b ½"]


def test_demojize_only_touches_documents_with_emoji():
    out = clean(["plain", None, "hi 👋", "flag 🇫🇷!"], ops_cfg("demojize"))
    assert out == ["plain", None, "hi :waving_hand:", "flag :France:!"]


def test_lowercase_and_punctuation():
    assert clean(["Don't STOP-me now! ¿Qué? snake_case"], ops_cfg("lowercase", "strip_punctuation")) == [
        "dont stopme now qué snake_case"
    ]


def test_ptb_tokenize_splits_as_the_treebank_and_leaves_split_text_alone():
    cfg = ops_cfg("lowercase", "ptb_tokenize")
    raw = ['It\u2019s "great" (really), isn\'t it? Mr. F. Kennedy paid $3.50 in the U.S., 1,000 times...',
           "We've seen No. 9; they'll say we'd won!"]
    split = ["it 's `` great '' ( really ) , is n't it ? mr. f. kennedy paid $3.50 in the u.s. , 1,000 times ...",
             "we 've seen no. 9 ; they 'll say we 'd won !"]
    assert clean(raw, cfg) == split
    assert clean(split, cfg) == split  # idempotent: treebank text keeps its words


def test_ptb_mikolov_makes_text_like_the_benchmark_and_leaves_the_benchmark_alone():
    from tests.conftest import SHARED

    cfg = ops_cfg("lowercase", "ptb_mikolov")
    raw = ["Mr. Smith's firm paid $3.50, up 25%.", "The U.S. unit of Acme Corp. said it won't grow (again) in 1990.",
           ' shares rose N N to $ N in n.j. ']
    assert clean(raw, cfg) == ["mr. smith 's firm paid $ N up N N",
                               "the u.s. unit of acme corp. said it wo n't grow again in N",
                               " shares rose N N to $ N in n.j. "]  # the benchmark's own line: as it was
    ptb = SHARED / "corpora" / "ptb"
    if ptb.is_dir():  # not one line of the benchmark changes (the ptb-* lm presets clean with these ops)
        for split in ("train", "valid", "test"):
            lines = (ptb / f"ptb.{split}.txt").read_text(encoding="utf-8").splitlines()
            assert clean(lines, cfg) == lines, split


def test_every_op_keeps_nulls_and_empty_strings():
    for op in OPS:
        assert clean([None, ""], ops_cfg(op)) == [None, ""], op


def test_op_order_is_the_users():
    # punctuation removal before URL removal destroys the URL pattern; after it, the URL goes
    text = "see http://a.com/x"
    assert clean([text], ops_cfg("strip_urls", "strip_punctuation")) == ["see "]
    assert clean([text], ops_cfg("strip_punctuation", "strip_urls")) == ["see httpacomx"]


def test_unicode_form_override_replaces_the_presets_form_in_place():
    cfg = CleanConfig(preset="classic", unicode_form="NFC")
    assert cfg.effective_ops[0] == "nfc"
    assert CleanConfig(preset="classic", unicode_form="none").effective_ops[0] == "strip_html"
    assert "normalize_whitespace" not in CleanConfig(preset="social", normalize_whitespace=False).effective_ops


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"ops": ("lowercase", "stemming")}, "ops: 'stemming' is not an op; allowed: nfc, nfkc"),
        ({"ops": ("lowercase", "lowercase")}, "listed twice"),
        ({"ops": ("nfc", "nfkc")}, "exclude each other"),
        ({"ops": ("strip_emoji", "demojize")}, "exclude each other"),
        ({"ops": ("stem",), "stemmer": "porter", "language": "de"}, "stemmer: 'porter' is English only"),
        ({"ops": ("stem",), "language": "xx"}, "language: no Snowball stemmer"),
        ({"ops": ("remove_stopwords",), "language": "de", "stopword_list": "glasgow"}, "glasgow' is English only"),
        ({"ops": ("remove_stopwords",), "language": "xx"}, "language: no stop-word list"),
        ({"ops": ("lemmatize",), "language": "xx"}, "language: simplemma has no lemmatizer"),
        ({"elongation_max_repeat": 0}, "elongation_max_repeat"),
    ],
)
def test_invalid_configs_name_the_field(kwargs, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        CleanConfig(**kwargs)


def test_yaml_dict_errors_carry_the_dotted_path():
    with pytest.raises(ConfigError, match=r"corpus\.clean\.ops: 'stemming' is not an op; allowed: .*lemmatize"):
        from_dict(CleanConfig, {"preset": "classic", "ops": ["lowercase", "stemming"]}, "corpus.clean")
    with pytest.raises(ConfigError, match=r"corpus\.clean\.preset: 'bow' is not allowed"):
        from_dict(CleanConfig, {"preset": "bow"}, "corpus.clean")
    cfg = from_dict(CleanConfig, {"preset": "social", "hashtag_mode": "drop"}, "corpus.clean")
    assert cfg.effective_ops == PRESET_OPS["social"] and cfg.hashtag_mode == "drop"


def test_whitespace_normalization_matches_a_python_reference_on_random_text():
    # reference: the documented rules with Python's re (the alphabet avoids the few characters on which
    # Python's and Rust's \s disagree)
    rng = __import__("random").Random(5)
    alphabet = ["a", "b", " ", "  ", "\t", "\n", "\r", "\r\n", "\u00a0", "\u2003", "\n\n\n"]
    texts = ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 30))) for _ in range(2000)]

    def reference(t: str) -> str:
        t = re.sub(r"\r\n?", "\n", t)
        t = re.sub(r"[^\S\n]+", " ", t)
        t = re.sub(r" ?\n ?", "\n", t)
        t = re.sub(r"\n{3,}", "\n\n", t)
        return t.strip()

    assert clean(texts) == [reference(unicodedata.normalize("NFC", t)) for t in texts]


def test_stemming_matches_a_per_word_python_reference():
    import Stemmer

    porter = Stemmer.Stemmer("porter")
    rng = __import__("random").Random(11)
    vocab = ["running", "runs", "run", "outrunning", "considered", "connections", "generalization", "a", "is",
             "café", "naïve", "it's", "x_y"]
    seps = [" ", ", ", "\n", "--", "(", ")", "'"]
    texts = ["".join(rng.choice(vocab) + rng.choice(seps) for _ in range(rng.randint(0, 12))) for _ in range(500)]
    expected = [re.sub(r"\w+", lambda m: porter.stemWord(m.group()), t) for t in texts]
    assert clean(texts, ops_cfg("stem", stemmer="porter")) == expected


def test_squash_elongation_matches_python_re_on_random_text():
    rng = __import__("random").Random(2)
    alphabet = ["a", "o", "O", "é", "1", " ", "!", "ß"]
    texts = ["".join(rng.choice(alphabet) * rng.randint(1, 5) for _ in range(rng.randint(0, 8))) for _ in range(1000)]
    for k in (1, 2, 3):
        expected = [re.sub(r"([^\W\d_])\1{%d,}" % k, r"\1" * k, t) for t in texts]
        assert clean(texts, ops_cfg("squash_elongation", elongation_max_repeat=k)) == expected
