"""corpusforge.tasks.corpus.filters: hand-built frames; expected drops and statistics computed independently in plain Python."""

from __future__ import annotations

import random
import re
from collections import Counter

import polars as pl
import pytest

from corpusforge.tasks.config import ConfigError, from_dict
from corpusforge.tasks.corpus.filters import REASONS, FilterConfig, apply_filters, document_stats

QUALITY_ONLY = dict(gopher_quality=True, gopher_min_words=None, gopher_max_words=None,
                    gopher_min_mean_word_length=None, gopher_max_mean_word_length=None,
                    gopher_max_symbol_word_ratio=None, gopher_max_bullet_lines_ratio=None,
                    gopher_max_ellipsis_lines_ratio=None, gopher_min_alpha_words_ratio=None,
                    gopher_min_stop_words=None)


def frame(texts: list[str | None]) -> pl.DataFrame:
    return pl.DataFrame({"locator": [f"L{i}" for i in range(len(texts))], "text": texts, "n": list(range(len(texts)))},
                        schema={"locator": pl.Utf8, "text": pl.Utf8, "n": pl.Int64})


def reasons(texts, cfg) -> dict[str, str]:
    kept, dropped = apply_filters(frame(texts), cfg)
    assert kept.height + dropped.height == len(texts)
    return dict(zip(dropped["locator"], dropped["reason"]))


# --- plain-Python references (Gopher definitions as stated in tasks/corpus/filters.py) ---------------------------


def ref_dup(pieces: list[str]) -> tuple[int, int]:
    seen, dup, dup_chars = set(), 0, 0
    for p in pieces:
        if p in seen:
            dup, dup_chars = dup + 1, dup_chars + len(p)
        seen.add(p)
    return dup, dup_chars


def ref_top_ngram_chars(words: list[str], n: int) -> int:
    grams = [" ".join(words[i:i + n]) for i in range(len(words) - n + 1)]
    counts = Counter(grams)
    repeated = [(c, len(g)) for g, c in counts.items() if c >= 2]
    if not repeated:
        return 0
    c, length = max(repeated)
    return c * length


def ref_dup_ngram_chars(words: list[str], n: int) -> int:
    seen, covered = set(), [False] * len(words)
    for i in range(len(words) - n + 1):
        gram = tuple(words[i:i + n])
        if gram in seen:
            for j in range(i, i + n):
                covered[j] = True
        seen.add(gram)
    return sum(len(w) for w, c in zip(words, covered) if c)


def random_doc(rng: random.Random) -> str:
    vocab = ["a", "bb", "ccc", "dd", "e", "ff", "x!"]
    lines = []
    for _ in range(rng.randint(1, 6)):
        if lines and rng.random() < 0.3:
            lines.append(rng.choice(lines))  # a repeated line
        else:
            lines.append(" ".join(rng.choice(vocab) for _ in range(rng.randint(1, 9))))
        if rng.random() < 0.3:
            lines.append("")  # a blank line: paragraph break
    return "\n".join(lines).strip("\n")


def test_repetition_statistics_match_the_reference_on_random_documents():
    rng = random.Random(3)
    texts = [random_doc(rng) for _ in range(300)] + ["single", "a b a b a b a b a b a b"]
    stats = document_stats(pl.Series(texts), quality=False, repetition=True)
    for text, row in zip(texts, stats.iter_rows(named=True)):
        lines = [x for x in re.split(r"\n+", text) if x]
        paras = [x for x in re.split(r"\n{2,}", text) if x]
        words = text.split()
        dup, dup_chars = ref_dup(lines)
        assert row["_dup_line_frac"] == pytest.approx(dup / len(lines)), text
        assert row["_dup_line_char_frac"] == pytest.approx(dup_chars / len(text)), text
        dup, dup_chars = ref_dup(paras)
        assert row["_dup_para_frac"] == pytest.approx(dup / len(paras)), text
        assert row["_dup_para_char_frac"] == pytest.approx(dup_chars / len(text)), text
        for n in (2, 3, 4):
            assert row[f"_top{n}"] == pytest.approx(ref_top_ngram_chars(words, n) / len(text)), (n, text)
        for n in range(5, 11):
            assert row[f"_dup{n}"] == pytest.approx(ref_dup_ngram_chars(words, n) / len(text)), (n, text)


def test_repetition_statistics_when_no_long_ngram_repeats_anywhere():
    stats = document_stats(pl.Series(["a b a b", "c d", "e"]), quality=False, repetition=True)
    # "a b" occurs twice: 2 * len("a b") / len("a b a b") = 6 / 7; nothing else repeats
    assert stats["_top2"].to_list() == pytest.approx([6 / 7, 0.0, 0.0])
    for n in range(3, 11):
        col = f"_top{n}" if n <= 4 else f"_dup{n}"
        assert stats[col].to_list() == [0.0, 0.0, 0.0], col


def test_quality_statistics_match_the_reference():
    texts = ["The cat and the hat... #x", "- one\n- two\n* three\nfour…", "123 456 ab", "with that have"]
    stats = document_stats(pl.Series(texts), quality=True, repetition=False)
    for text, row in zip(texts, stats.iter_rows(named=True)):
        words = text.split()
        lines = text.split("\n")
        assert row["_words"] == len(words)
        assert row["_mean_word_len"] == pytest.approx(sum(map(len, words)) / len(words))
        ellipses = text.count("...") + text.count("…")
        assert row["_symbol_ratio"] == pytest.approx(max(text.count("#"), ellipses) / len(words))
        bullets = sum(line.lstrip().startswith(tuple("•‣◦▪●*-")) for line in lines)
        assert row["_bullet_frac"] == pytest.approx(bullets / len(lines))
        ends = sum(line.rstrip().endswith(("...", "…")) for line in lines)
        assert row["_ellipsis_frac"] == pytest.approx(ends / len(lines))
        assert row["_alpha_frac"] == pytest.approx(sum(any(c.isalpha() for c in w) for w in words) / len(words))
        stop = {"the", "be", "to", "of", "and", "that", "have", "with"}
        assert row["_stop_words"] == len({re.sub(r"\W", "", w).lower() for w in words} & stop)


# --- apply_filters ---------------------------------------------------------------------------------------


def test_default_config_drops_only_empty_documents():
    texts = ["a", "", "   \n ", None, "x" * 10_000, "!"]
    kept, dropped = apply_filters(frame(texts), FilterConfig())
    assert kept.columns == ["locator", "text", "n"]
    assert kept["n"].to_list() == [0, 4, 5]  # order kept
    assert dropped.columns == ["locator", "reason", "detail"]
    assert dropped["locator"].to_list() == ["L1", "L2", "L3"]
    assert set(dropped["reason"]) == {"empty"}
    assert dropped["detail"].to_list() == ["no text after cleaning"] * 3


def test_length_bounds_are_inclusive_and_the_first_failing_filter_wins():
    cfg = FilterConfig(min_chars=5, max_chars=12, min_words=2, max_words=3)
    texts = ["", "abcd", "abcde", "ab cd efg hij", "aaaaabbbbbcccc", "abcdefg", "a b c d e f", "ab cde"]
    # by hand: '' empty; 'abcd' 4 < 5 chars; 'abcde' 1 word < 2; 13 chars > 12; 14 chars > 12 (too_long first);
    # 'abcdefg' 1 word; 'a b c d e f' 11 chars, 6 words > 3; 'ab cde' 6 chars 2 words: kept
    assert reasons(texts, cfg) == {"L0": "empty", "L1": "too_short", "L2": "too_few_words", "L3": "too_long",
                                   "L4": "too_long", "L5": "too_few_words", "L6": "too_many_words"}
    _, dropped = apply_filters(frame(texts), cfg)
    assert dropped.filter(pl.col("locator") == "L1")["detail"].item() == "n_chars=4 < 5"


def test_drop_empty_off_keeps_empty_documents_and_undefined_ratios_never_drop():
    cfg = FilterConfig(drop_empty=False, **{**QUALITY_ONLY, "gopher_min_alpha_words_ratio": 0.8})
    kept, dropped = apply_filters(frame(["", "   "]), cfg)
    assert kept.height == 2 and dropped.height == 0


@pytest.mark.parametrize(
    ("override", "text", "reason"),
    [
        ({"gopher_min_words": 3}, "two words", "gopher_word_count"),
        ({"gopher_max_words": 3}, "one two three four", "gopher_word_count"),
        ({"gopher_min_mean_word_length": 3.0}, "a bb cc", "gopher_mean_word_length"),  # 5/3 < 3
        ({"gopher_max_mean_word_length": 10.0}, "abcdefghijkl", "gopher_mean_word_length"),  # 12 > 10
        ({"gopher_max_symbol_word_ratio": 0.1}, "#a b c d e f g h i j #k", "gopher_symbol_ratio"),  # 2/11 > 0.1
        ({"gopher_max_symbol_word_ratio": 0.1}, "a b c d e f g h i j... k", None),  # 1/11 <= 0.1
        ({"gopher_max_bullet_lines_ratio": 0.5}, "• a\n- b\nc", "gopher_bullet_lines"),  # 2/3 > 0.5
        ({"gopher_max_ellipsis_lines_ratio": 0.3}, "a...\nb\nc\nd", None),  # 1/4 <= 0.3
        ({"gopher_max_ellipsis_lines_ratio": 0.3}, "a...\nb…\nc\nd", "gopher_ellipsis_lines"),  # 2/4
        ({"gopher_min_alpha_words_ratio": 0.8}, "12 34 ab cd ef", "gopher_alpha_words"),  # 3/5 < 0.8
        ({"gopher_min_alpha_words_ratio": 0.8}, "12 ab cd ef gh", None),  # 4/5
        ({"gopher_min_stop_words": 2}, "The the THE cat", "gopher_stop_words"),  # one distinct
        ({"gopher_min_stop_words": 2}, "The cat and, mat", None),
    ],
)
def test_each_gopher_quality_rule(override, text, reason):
    got = reasons([text], FilterConfig(**{**QUALITY_ONLY, **override}))
    assert got == ({} if reason is None else {"L0": reason})


def test_gopher_defaults_are_the_papers_and_off_by_default():
    cfg = FilterConfig()
    assert not cfg.gopher_quality and not cfg.gopher_repetition and not cfg.lang_id
    # Rae et al. 2021, appendix A: 50..100,000 words, mean word length 3..10, symbol ratio 0.1, bullets 0.9,
    # ellipsis lines 0.3, 80 % alphabetic words, 2 stop words; repetition 0.3/0.3/0.2/0.2 and the n-gram tables
    assert (cfg.gopher_min_words, cfg.gopher_max_words) == (50, 100_000)
    assert (cfg.gopher_min_mean_word_length, cfg.gopher_max_mean_word_length) == (3, 10)
    assert (cfg.gopher_max_symbol_word_ratio, cfg.gopher_max_bullet_lines_ratio, cfg.gopher_max_ellipsis_lines_ratio,
            cfg.gopher_min_alpha_words_ratio, cfg.gopher_min_stop_words) == (0.1, 0.9, 0.3, 0.8, 2)
    assert (cfg.gopher_max_dup_lines_ratio, cfg.gopher_max_dup_paragraphs_ratio, cfg.gopher_max_dup_line_chars_ratio,
            cfg.gopher_max_dup_paragraph_chars_ratio) == (0.3, 0.3, 0.2, 0.2)
    assert cfg.gopher_max_top_ngram_chars_ratio == (0.20, 0.18, 0.16)
    assert cfg.gopher_max_dup_ngram_chars_ratio == (0.15, 0.14, 0.13, 0.12, 0.11, 0.10)


def test_repetition_rules_in_order():
    cfg = FilterConfig(gopher_repetition=True)
    prose = "the quick brown fox jumps over the lazy dog while seven wizards quietly hex a jovial kumquat"
    texts = [
        prose,  # nothing repeats
        "spam line\nspam line\nspam line\nham",  # 2/4 lines repeat -> dup_lines first
        # 1/3 paragraphs repeat (> 0.3) but only 2/10 lines (<= 0.3)
        "alpha beta\ngamma delta\n\nalpha beta\ngamma delta\n\n" + "\n".join(f"line {i} here" for i in range(6)),
        "one two three four five six " * 3 + "seven",  # lines/paras fine; top 2-gram "one two" x3
    ]
    # by hand for the last: 19 words, 89 chars (3*29 + 5 - 1 ... computed below independently)
    last = texts[3]
    assert ref_top_ngram_chars(last.split(), 2) / len(last) > 0.2
    assert reasons(texts, cfg) == {"L1": "gopher_dup_lines", "L2": "gopher_dup_paragraphs", "L3": "gopher_top_2gram"}
    # with the top-n-gram rules off, the duplicated 5-gram rule catches it
    assert reasons([last], FilterConfig(gopher_repetition=True, gopher_max_top_ngram_chars_ratio=())) == {
        "L0": "gopher_dup_5gram"}


def test_every_reason_is_a_short_stable_code():
    assert len(REASONS) == len(set(REASONS))
    assert REASONS[:5] == ("empty", "too_short", "too_long", "too_few_words", "too_many_words")
    assert REASONS[-1] == "lang"
    assert all(re.fullmatch(r"[a-z0-9_]{3,30}", r) for r in REASONS)


def test_frame_without_locator_uses_row_numbers():
    kept, dropped = apply_filters(pl.DataFrame({"body": ["x", "", "y"]}), FilterConfig(), text_col="body")
    assert kept["body"].to_list() == ["x", "y"]
    assert dropped["locator"].to_list() == ["1"]


def test_language_filter_fills_lang_and_drops_other_languages():
    texts = [
        "The committee will publish its annual report on the state of the public libraries next week.",
        "Le comité publiera la semaine prochaine son rapport annuel sur l'état des bibliothèques publiques.",
        "Der Ausschuss veröffentlicht nächste Woche seinen Jahresbericht über den Zustand der Bibliotheken.",
        "",
    ]
    kept, dropped = apply_filters(frame(texts), FilterConfig(lang_id=True, languages=("en", "de")))
    assert kept["lang"].to_list() == ["en", "de"]
    assert dict(zip(dropped["locator"], dropped["reason"])) == {"L3": "empty", "L1": "lang"}
    assert dropped.filter(pl.col("reason") == "lang")["detail"].item().startswith("lang=fr p=")
    # without a language list nothing is dropped, every kept row is labelled
    kept, dropped = apply_filters(frame(texts[:3]), FilterConfig(lang_id=True))
    assert kept["lang"].to_list() == ["en", "fr", "de"] and dropped.height == 0
    # min_lang_prob around the library's own probability for a short, ambiguous text
    from corpusforge.tasks.corpus.filters import _language_identifier  # py3langid's own classify (the model is loaded once)

    text = "ok go"
    _, p = _language_identifier()(text)
    assert 0 < p < 0.99
    _, dropped = apply_filters(frame([text]), FilterConfig(lang_id=True, min_lang_prob=min(1.0, p + 0.01)))
    assert dropped["reason"].to_list() == ["lang"]
    kept, _ = apply_filters(frame([text]), FilterConfig(lang_id=True, min_lang_prob=p - 0.01))
    assert kept.height == 1


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"min_chars": -1}, "min_chars: must be >= 0"),
        ({"min_chars": 10, "max_chars": 5}, "max_chars: must be >= min_chars"),
        ({"gopher_min_mean_word_length": 5.0, "gopher_max_mean_word_length": 4.0}, "gopher_max_mean_word_length"),
        ({"gopher_max_dup_lines_ratio": 1.5}, "gopher_max_dup_lines_ratio: a fraction"),
        ({"gopher_max_top_ngram_chars_ratio": (0.2,)}, "gopher_max_top_ngram_chars_ratio: 3 fractions"),
        ({"gopher_max_dup_ngram_chars_ratio": (0.1,) * 5 + (2.0,)}, "fractions between 0 and 1"),
        ({"languages": ("EN",)}, "languages: 'EN'"),
        ({"lang_max_chars": 0}, "lang_max_chars"),
    ],
)
def test_invalid_configs_name_the_field(kwargs, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        FilterConfig(**kwargs)


def test_yaml_dict_round_trip_and_errors():
    cfg = from_dict(FilterConfig, {"min_words": 3, "gopher_quality": True, "gopher_max_top_ngram_chars_ratio": []},
                    "corpus.filters")
    assert cfg.min_words == 3 and cfg.gopher_max_top_ngram_chars_ratio == ()
    with pytest.raises(ConfigError, match=r"corpus\.filters\.min_word: unknown key"):
        from_dict(FilterConfig, {"min_word": 3}, "corpus.filters")


def test_staged_evaluation_equals_first_failure_over_all_filters():
    from corpusforge.tasks.corpus.filters import FILTERS

    rng = random.Random(8)
    texts = [random_doc(rng) for _ in range(400)] + ["", "  ", "#" * 3]
    cfg = FilterConfig(min_chars=3, max_words=40, gopher_quality=True, gopher_min_words=4,
                       gopher_min_mean_word_length=1.5, gopher_min_stop_words=None, gopher_repetition=True)
    _, dropped = apply_filters(frame(texts), cfg)
    # reference: every enabled filter evaluated on every row's full statistics; the first failure in order
    stats = document_stats(pl.Series(texts), quality=True, repetition=True)
    checks = [(code, out) for code, check in FILTERS if (out := check(cfg)) is not None]
    keeps = stats.select([keep.fill_null(True).alias(code) for code, (keep, _) in checks])
    expected = {}
    for i, row in enumerate(keeps.iter_rows()):
        failing = [code for (code, _), ok in zip(checks, row) if not ok]
        if failing:
            expected[f"L{i}"] = failing[0]
    assert dict(zip(dropped["locator"], dropped["reason"])) == expected
    assert len(set(expected.values())) >= 4  # the frame exercises several filters


def test_empty_frame_and_all_filters_on():
    schema = {"locator": pl.Utf8, "text": pl.Utf8}
    cfg = FilterConfig(min_chars=3, max_chars=10, min_words=1, max_words=5, gopher_quality=True, gopher_repetition=True)
    kept, dropped = apply_filters(pl.DataFrame({"locator": [], "text": []}, schema=schema), cfg)
    assert kept.height == 0 and kept.columns == ["locator", "text"]
    assert dropped.height == 0 and dropped.columns == ["locator", "reason", "detail"]


def test_document_stats_computes_only_the_statistics_asked_for():
    # the default filters read only _has_text: one regex pass over the texts, not three
    stats = document_stats(pl.Series(["a b", " "]), quality=False, repetition=False, base={"_has_text"})
    assert stats.columns == ["_has_text"] and stats["_has_text"].to_list() == [True, False]
    full = document_stats(pl.Series(["a b"]), quality=True, repetition=False, base={"_has_text"})
    assert {"_chars", "_words", "_mean_word_len"} <= set(full.columns)  # what the quality rules build on
