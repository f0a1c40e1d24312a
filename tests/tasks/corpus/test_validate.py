"""corpusforge.tasks.corpus.validate: the Great Expectations suite run on every shard (real GX, ephemeral or file context)."""

from __future__ import annotations

import threading
from pathlib import Path

import pandas as pd
import pytest

from corpusforge.tasks.corpus.validate import (COLUMNS, DATA_DOCS_SUBDIR, DatasetValidationError, ValidationConfig, validation_for,
                            validate_frame)

LENGTH = "expect_column_value_lengths_to_be_between"


def row(doc_id: str, text: str | None) -> dict:
    return {"doc_id": doc_id, "source": "s.txt", "locator": f"line:{doc_id}", "split": "train", "text": text,
            "n_chars": len(text or ""), "n_words": len((text or "").split()), "content_hash": f"h{doc_id}",
            "lang": None, "meta": None}


def frame(*rows: dict) -> pd.DataFrame:
    return pd.DataFrame(list(rows), columns=list(COLUMNS))


CFG = ValidationConfig(min_chars=3, max_chars=10)


def test_length_bounds_are_row_level_failures():
    texts = {"ok": "fine text", "short": "ab", "long": "x" * 11, "at_min": "abc", "at_max": "y" * 10,
             "empty": ""}
    outcome = validate_frame(frame(*(row(k, v) for k, v in texts.items())), CFG, None)
    expected = {k for k, v in texts.items() if not CFG.min_chars <= len(v) <= CFG.max_chars}
    assert expected == {"short", "long", "empty"}
    assert outcome.row_failures == {k: LENGTH for k in expected}
    assert outcome.summary["success"] is False
    assert outcome.summary["rows"] == len(texts)
    assert outcome.summary["rows_failed"] == 3
    by_name = {e["expectation"]: e for e in outcome.summary["expectations"]}
    assert by_name[LENGTH]["unexpected_count"] == 3
    assert outcome.data_docs is None


def test_null_text_is_a_row_level_failure():
    outcome = validate_frame(frame(row("a", "fine"), row("b", None)), CFG, None)
    assert outcome.row_failures == {"b": "expect_column_values_to_not_be_null"}


def test_all_rows_pass():
    outcome = validate_frame(frame(row("a", "fine"), row("b", "also fine")), CFG, None)
    assert outcome.row_failures == {}
    assert outcome.summary["success"] is True
    assert all(e["success"] for e in outcome.summary["expectations"])


def test_duplicate_doc_id_is_dataset_level():
    with pytest.raises(DatasetValidationError, match="expect_column_values_to_be_unique") as info:
        validate_frame(frame(row("same", "first"), row("same", "second"), row("other", "third")), CFG, None)
    assert "doc_id" in str(info.value)
    assert "same" in str(info.value)  # the example names the offending id


@pytest.mark.parametrize(
    "mangle",
    [
        pytest.param(lambda df: df.drop(columns=["lang"]), id="missing-column"),
        pytest.param(lambda df: df.assign(extra=1), id="extra-column"),
        pytest.param(lambda df: df[list(reversed(COLUMNS))], id="reordered"),
    ],
)
def test_wrong_column_set_is_dataset_level(mangle):
    with pytest.raises(DatasetValidationError, match="expect_table_columns_to_match_ordered_list"):
        validate_frame(mangle(frame(row("a", "fine"))), CFG, None)


def test_disabled_validation_checks_nothing():
    outcome = validate_frame(frame(row("same", "x"), row("same", "y")), ValidationConfig(enabled=False), None)
    assert outcome.row_failures == {}
    assert outcome.summary == {"enabled": False}


def test_data_docs_built_under_out_dir(tmp_path: Path):
    outcome = validate_frame(frame(row("a", "fine"), row("b", "no")), CFG, tmp_path)
    index = tmp_path / "gx" / "uncommitted" / "data_docs" / "local_site" / "index.html"
    assert DATA_DOCS_SUBDIR == "gx/uncommitted/data_docs/local_site"
    assert index.is_file()
    assert outcome.data_docs == "gx/uncommitted/data_docs/local_site/index.html"
    assert outcome.row_failures == {"b": LENGTH}
    page = index.read_text(encoding="utf-8")
    # GX's own validation-results page: every expectation of the suite, the failed one marked
    assert "Great Expectations" in page and "corpus_shard" in page
    assert "doc_id" in page and "unexpected" in page.lower()
    # one page, not a whole site with ~4 MB of static assets per shard
    assert [p.name for p in tmp_path.rglob("*") if p.is_file()] == ["index.html"]


def test_no_per_batch_fingerprint_is_computed(tmp_path: Path, monkeypatch):
    """GX would hash every cell of each shard (or pickle a frame it cannot hash) for a label on the page."""
    from great_expectations.execution_engine import pandas_execution_engine

    def fail(df):
        raise AssertionError("GX fingerprinted the batch")

    monkeypatch.setattr(pandas_execution_engine, "hash_pandas_dataframe", fail)
    outcome = validate_frame(frame(row("a", "fine"), row("b", "no")), CFG, tmp_path)
    assert outcome.row_failures == {"b": LENGTH}
    assert "pandas_data_fingerprint" not in (tmp_path / outcome.data_docs).read_text(encoding="utf-8")


def test_validation_definition_is_built_once_per_config_and_thread():
    first = validation_for(CFG)
    assert validation_for(CFG) is first
    assert validation_for(ValidationConfig(min_chars=1, max_chars=5)) is not first
    other: list = []
    worker = threading.Thread(target=lambda: other.append(validation_for(CFG)))
    worker.start()
    worker.join()
    assert other[0] is not first  # another thread has its own context and definition


def test_concurrent_validations_see_only_their_own_rows():
    """Two threads validate different frames at once (as the thread runner does with two shards): each
    result must name its own failing rows, never the other thread's."""
    def frames_for(tag: str, n_bad: int) -> pd.DataFrame:
        rows = [row(f"{tag}{i}", "fine text") for i in range(2000)]
        rows += [row(f"{tag}bad{i}", "x" * 50) for i in range(n_bad)]
        return frame(*rows)

    results: dict[str, list] = {"a": [], "b": []}

    def work(tag: str, n_bad: int) -> None:
        data = frames_for(tag, n_bad)
        for _ in range(6):
            results[tag].append(validate_frame(data, CFG, None).row_failures)

    threads = [threading.Thread(target=work, args=("a", 3)), threading.Thread(target=work, args=("b", 5))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(r == {f"abad{i}": LENGTH for i in range(3)} for r in results["a"]) and len(results["a"]) == 6
    assert all(r == {f"bbad{i}": LENGTH for i in range(5)} for r in results["b"]) and len(results["b"]) == 6


def test_no_data_docs_when_disabled_in_config(tmp_path: Path):
    cfg = ValidationConfig(min_chars=1, max_chars=10, data_docs=False)
    outcome = validate_frame(frame(row("a", "fine")), cfg, tmp_path)
    assert outcome.data_docs is None
    assert not (tmp_path / "gx").exists()


def test_run_validation_gives_what_gx_validation_definition_run_gives():
    """Our run skips GX's store checks and stored copy; the result and its meta must still be GX's own."""
    from corpusforge.tasks.corpus.validate import RESULT_FORMAT, _PER_THREAD, run_validation

    data = frame(row("a", "fine text"), row("b", "ab"), row("c", None))
    definition = validation_for(CFG)
    ours = run_validation(definition, data)
    gx_run = definition.run(batch_parameters={"dataframe": data}, result_format=RESULT_FORMAT)
    assert ours.success == gx_run.success is False
    assert ([r.to_json_dict() for r in ours.results] == [r.to_json_dict() for r in gx_run.results]
            and len(ours.results) == 5)
    assert set(ours.meta) == set(gx_run.meta)
    for key in ("validation_id", "checkpoint_id", "batch_parameters", "active_batch_definition"):
        assert ours.meta[key] == gx_run.meta[key], key
    assert ours.meta["validation_time"] == ours.meta["run_id"].run_time
    store = _PER_THREAD.context.validation_results_store
    before = len(store.list_keys())
    validate_frame(data, CFG, None)
    assert len(store.list_keys()) == before  # validate_frame leaves nothing behind in the context
