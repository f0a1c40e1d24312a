"""corpusforge.tasks.corpus.accounting: every record read ends in exactly one bucket, per source and overall."""

from __future__ import annotations

import pytest

from corpusforge.tasks.corpus.accounting import AccountingError, build_accounting, total


def test_sums_per_source_and_overall():
    acc = build_accounting(
        {"b.txt": 6, "a.jsonl": 4, "empty.txt": 1},
        kept_sources=["a.jsonl", "b.txt", "b.txt", "a.jsonl", "b.txt"],
        quarantined=[("a.jsonl", "invalid_json"), ("b.txt", "invalid_utf8"), ("empty.txt", "empty_file")],
        dropped=[("a.jsonl", "filter", "empty"), ("b.txt", "dedup", "exact"), ("b.txt", "filter", "empty")],
    )
    assert acc["per_source"]["a.jsonl"] == {
        "records_read": 4, "kept": 2, "quarantined": {"invalid_json": 1}, "filtered": {"empty": 1},
        "deduplicated": {},
    }
    assert acc["per_source"]["b.txt"] == {
        "records_read": 6, "kept": 3, "quarantined": {"invalid_utf8": 1}, "filtered": {"empty": 1},
        "deduplicated": {"exact": 1},
    }
    assert acc["per_source"]["empty.txt"] == {
        "records_read": 1, "kept": 0, "quarantined": {"empty_file": 1}, "filtered": {}, "deduplicated": {},
    }
    assert acc["records_read"] == 11
    assert acc["kept"] == 5
    assert acc["quarantined"] == {"invalid_json": 1, "invalid_utf8": 1, "empty_file": 1}
    assert acc["filtered"] == {"empty": 2}
    assert acc["deduplicated"] == {"exact": 1}
    assert list(acc["per_source"]) == ["a.jsonl", "b.txt", "empty.txt"]  # sorted, stable in manifests
    assert total(acc) == acc["records_read"]


def test_same_reason_accumulates():
    acc = build_accounting({"s": 3}, [], [("s", "invalid_json")] * 3, [])
    assert acc["quarantined"] == {"invalid_json": 3}
    assert acc["per_source"]["s"]["quarantined"] == {"invalid_json": 3}


def test_source_with_nothing_read_is_fine():
    acc = build_accounting({"s": 0}, [], [], [])
    assert acc["records_read"] == 0 and acc["per_source"]["s"]["kept"] == 0


def test_counts_must_add_up_to_records_read():
    with pytest.raises(AccountingError, match=r"s: read 3 records but accounted for 2"):
        build_accounting({"s": 3}, ["s"], [("s", "invalid_json")], [])


def test_more_rows_than_records_read_is_an_error():
    with pytest.raises(AccountingError, match="read 1 records but accounted for 2"):
        build_accounting({"s": 1}, ["s", "s"], [], [])


def test_row_from_unknown_source_is_an_error():
    with pytest.raises(AccountingError, match="'ghost'.*never read"):
        build_accounting({"s": 1}, ["s"], [("ghost", "invalid_json")], [])
    with pytest.raises(AccountingError, match="never read"):
        build_accounting({"s": 1}, ["ghost"], [], [])
    with pytest.raises(AccountingError, match="never read"):
        build_accounting({"s": 1}, ["s"], [], [("ghost", "dedup", "exact")])


def test_unknown_drop_stage_is_an_error():
    with pytest.raises(AccountingError, match="unknown drop stage 'validate'"):
        build_accounting({"s": 1}, [], [], [("s", "validate", "too_long")])
