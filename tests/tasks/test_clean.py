"""tasks.clean: the 'lm' preset as polars expressions."""

from __future__ import annotations

import unicodedata

import polars as pl
import pytest

from tasks.clean import CleanConfig, clean_expr, word_count_expr

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


def test_raw_preset_leaves_text_byte_identical():
    raw = f"  caf{COMBINING_E}\r\n\tTwo  spaces \n\n\n\nend  "
    assert clean([raw], CleanConfig(preset="raw")) == [raw]
    # an explicit field still overrides the preset's choice
    assert clean([raw], CleanConfig(preset="raw", unicode_form="NFC")) == [raw.replace(COMBINING_E, "\u00e9")]
