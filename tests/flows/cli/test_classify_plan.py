"""Labelled files checked in the plan, before any work (issue 44, items 2 and 4): one class only, labels that
differ only in case or spacing, numeric labels with a value per record, a --valid label the training file lacks,
a --valid of repeats, a non-UTF-8 byte near the top. Each used to fail with a traceback (exit 1) after the corpus,
tokenizer and encode steps had run, or to train silently on 9 classes; now ``classify train`` stops with one line,
exit 2, and nothing is built. Labels are stripped (`` positive`` is ``positive``); a ``labels`` map merges
variants on purpose."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.commands import corpusforge
from tests.flows.cli.test_seq2seq import cli_env

REVIEWS = Path(__file__).resolve().parents[3] / "data" / "labelled" / "reviews.tsv"


def tsv(path: Path, rows: list[tuple[str, str]]) -> Path:
    path.write_text("sentence\tlabel\n" + "".join(f"{t}\t{l}\n" for t, l in rows), encoding="utf-8")
    return path


def rows(n: int, labels=("negative", "positive")) -> list[tuple[str, str]]:
    return [(f"review number {i} was {'bad' if i % 2 else 'good'}", labels[i % len(labels)]) for i in range(n)]


def train(tmp_path, *files, extra=(), code=2):
    store = tmp_path / "store"
    done = corpusforge("classify", "train", *files, "--preset", "sst2-bilstm", "--store", store, *extra,
                       env=cli_env(None), code=code)
    assert not [p for p in store.glob("*/*/manifest.json")], "nothing is built before the plan is checked"
    return done.stderr.strip()


def test_one_class_only(tmp_path):
    error = train(tmp_path, tsv(tmp_path / "t.tsv", rows(40, ("positive",))))
    assert "\n" not in error and "one class only ('positive', 40 records)" in error


def test_labels_that_differ_only_in_case_or_spacing_are_listed_and_a_map_merges_them(tmp_path):
    labelled = rows(60, ("positive", "Positive", " positive", "negative", "NEGATIVE "))
    error = train(tmp_path, tsv(tmp_path / "t.tsv", labelled))
    assert "\n" not in error and "differ only in case or spacing" in error
    assert "'Positive' (12), 'positive' (24)" in error  # ' positive' is 'positive' once stripped
    assert "'NEGATIVE' (12), 'negative' (12)" in error and "--set 'labels." in error
    from corpusforge.api import classify_config

    config = classify_config(tmp_path / "t.tsv", "sst2-bilstm", valid=tsv(tmp_path / "v.tsv", rows(10, ("Positive", "negative"))),
                             overrides=["labels.Positive=positive", "labels.NEGATIVE=negative"])
    assert config["classify"]["labels"] == {"Positive": "positive", "NEGATIVE": "negative"}


def test_numbers_with_a_value_per_record_are_not_classes(tmp_path):
    error = train(tmp_path, tsv(tmp_path / "t.tsv", [(f"text {i}", f"{i / 7:.4f}") for i in range(2000)]))
    assert "\n" not in error and "numbers with 2,000 distinct values" in error


def test_a_valid_label_the_training_file_lacks(tmp_path):
    t = tsv(tmp_path / "t.tsv", rows(40))
    v = tsv(tmp_path / "v.tsv", rows(10, ("negative", "positive", "neutral")))
    error = train(tmp_path, t, extra=("--valid", v))
    assert "\n" not in error and "labels the training file does not have: 'neutral' (3)" in error


def test_a_valid_file_of_repeats_says_so(tmp_path):
    t = tsv(tmp_path / "t.tsv", rows(40))
    v = tsv(tmp_path / "v.tsv", rows(40)[:10])
    error = train(tmp_path, t, extra=("--valid", v, "--set", "corpus.dedup.exact=true"))
    assert "\n" not in error and "all 10 records repeat training records" in error
    # the preset keeps every record (dedup.exact: false, to score a dev set whole): then repeats are no error
    from corpusforge.api import classify_config

    assert classify_config(t, "sst2-bilstm", valid=v)["corpus"]["dedup"] == {"exact": False}


def test_a_byte_that_is_not_utf8_near_the_top_names_its_line(tmp_path):
    t = tmp_path / "t.tsv"
    t.write_bytes(b"sentence\tlabel\nfine\tpositive\ncaf\xe9 au lait\tnegative\n" + b"more\tpositive\n" * 50)
    error = train(tmp_path, t)
    assert "\n" not in error and "line 3 (byte 4: b'\\xe9') is not UTF-8" in error


def test_the_corpus_reader_strips_labels(tmp_path):
    from corpusforge.storage.records import parse_label

    assert parse_label(" positive ", "str") == (True, "positive")
    assert parse_label(" 7 ", "int") == (True, 7)
