"""End-to-end: the real pipeline flow (real Prefect API, real MLflow on sqlite, real GX) on a tiny corpus."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

from tests.conftest import write

pytestmark = pytest.mark.e2e


def make_corpus(root: Path) -> Path:
    corpus = root / "tiny"
    write(corpus / "a.txt", "the cat sat on the mat\nthe dog sat on the log\n\nthe cat sat on the mat\n")
    write(corpus / "b.jsonl", '{"text": "a bird sang", "lang": "en"}\n{"text": broken\n{"text": "the dog sat on the log"}\n')
    write(corpus / "c.txt", "colourless green ideas\nsleep furiously\n")
    return corpus


def config(corpus: Path, **extra) -> dict:
    return {
        "name": "e2e",
        "corpus": {"name": "tiny", "sources": [str(corpus)], "reader": {"txt_mode": "line"},
                   "validate": {"min_chars": 1, "max_chars": 1000}, **extra},
        "runner": {"kind": "threads", "workers": 2},
    }


def mlflow_client(store: Path):
    from mlflow import MlflowClient

    return MlflowClient(tracking_uri=f"sqlite:///{store / 'mlflow.db'}")


def child_runs(client, summary: dict):
    return client.search_runs(
        [summary["mlflow_experiment_id"]], filter_string=f"tags.mlflow.parentRunId = '{summary['mlflow_run_id']}'"
    )


@pytest.fixture(scope="module")
def first_run(prefect_harness, tmp_path_factory):
    from corpusforge.pipeline import run_pipeline

    root = tmp_path_factory.mktemp("e2e")
    corpus, store = make_corpus(root), root / "store"
    summary = run_pipeline(config(corpus), store=store)
    return corpus, store, summary


def test_pipeline_publishes_corpus_with_exact_accounting(first_run):
    corpus, store, summary = first_run
    # the three small files are packed into one shard (corpus.shard_mb), then the merge
    assert summary["steps_computed"] == 2 and summary["steps_reused"] == 0
    (shard,) = [s for s in summary["steps"] if s["step"] == "corpus_shard"]
    assert shard["name"] == "tiny__a.txt_and_2_more"
    c = summary["corpus"]
    acc = c["accounting"]
    # Independent count of records: lines in a.txt (4, incl. one blank), b.jsonl (3), c.txt (2).
    assert acc["records_read"] == 4 + 3 + 2
    assert acc["per_source"]["tiny/a.txt"]["records_read"] == 4
    assert acc["kept"] + sum(acc["quarantined"].values()) + sum(acc["filtered"].values()) + sum(
        acc["deduplicated"].values()) == acc["records_read"]
    assert acc["quarantined"] == {"invalid_json": 1}
    assert acc["filtered"] == {"empty": 1}
    # within a.txt one duplicate line; across files "the dog sat on the log" appears in a.txt then b.jsonl
    assert acc["deduplicated"] == {"exact": 2}
    assert acc["kept"] == 5
    path = Path(c["path"])
    kept = pl.concat([pl.read_parquet(path / f"{s}.parquet") for s in ("train", "valid", "test")])
    assert kept.height == 5 and kept["doc_id"].n_unique() == 5
    assert sorted(kept["text"]) == sorted(["the cat sat on the mat", "the dog sat on the log", "a bird sang",
                                           "colourless green ideas", "sleep furiously"])
    meta = kept.filter(pl.col("text") == "a bird sang")["meta"][0]
    assert json.loads(meta) == {"lang": "en"}
    assert (path / "doc_lengths.png").stat().st_size > 1000
    assert "Data Docs" in (path / "data_docs.html").read_text()


def test_mlflow_has_parent_and_nested_runs_with_lineage_tags(first_run):
    _, store, summary = first_run
    client = mlflow_client(store)
    parent = client.get_run(summary["mlflow_run_id"])
    assert parent.info.status == "FINISHED"
    assert parent.data.tags["corpusforge.pipeline"] == "e2e"
    children = child_runs(client, summary)
    by_id = {r.data.tags["corpusforge.artifact_id"]: r for r in children}
    assert set(by_id) == {s["id"] for s in summary["steps"]}
    corpus_run = by_id[summary["corpus"]["id"]]
    tags = corpus_run.data.tags
    assert tags["corpusforge.step"] == "corpus"
    shard_ids = [s["id"] for s in summary["steps"] if s["step"] == "corpus_shard"]
    assert tags["corpusforge.inputs"].split(",") == shard_ids
    assert tags["corpusforge.uri"].startswith("file://") and tags["corpusforge.uri"].endswith(summary["corpus"]["id"][:12])
    assert len(tags["corpusforge.config_hash"]) == 64
    assert corpus_run.data.metrics["records_read"] == 9
    # log_inputs carries our content digests, not MLflow's
    digests = {d.dataset.digest for d in corpus_run.inputs.dataset_inputs}
    assert digests == {sid[:32] for sid in shard_ids}
    logged = {a.path for a in client.list_artifacts(corpus_run.info.run_id)}
    assert {"doc_lengths.png", "data_docs.html", "manifest.json"} <= logged
    shard_run = by_id[shard_ids[0]]
    assert "data_docs" in {a.path for a in client.list_artifacts(shard_run.info.run_id)}
    assert shard_run.data.tags["corpusforge.data_docs"].endswith("index.html")


def test_rerun_recomputes_nothing_and_reuse_is_visible(first_run):
    from prefect.artifacts import Artifact

    from corpusforge.pipeline import run_pipeline

    corpus, store, summary = first_run
    again = run_pipeline(config(corpus), store=store)
    assert again["steps_computed"] == 0
    assert [s["id"] for s in again["steps"]] == [s["id"] for s in summary["steps"]]
    assert all(s["reused"] for s in again["steps"])
    assert child_runs(mlflow_client(store), again) == []  # no nested run for reused steps
    markdown = Artifact.get("corpusforge-steps").data
    assert markdown.count("**reused**") == 2


def test_changing_one_of_three_files_changes_exactly_one_shard(prefect_harness, tmp_path):
    from corpusforge.pipeline import run_pipeline

    corpus, store = make_corpus(tmp_path), tmp_path / "store"
    per_file = config(corpus, shard_mb=0)  # one shard per file (small files would share one)
    before = run_pipeline(per_file, store=store)
    write(corpus / "c.txt", "colourless green ideas\nsleep furiously\nand a new line\n")
    after = run_pipeline(per_file, store=store)
    shards_before = {s["name"]: s["id"] for s in before["steps"] if s["step"] == "corpus_shard"}
    shards_after = {s["name"]: s["id"] for s in after["steps"] if s["step"] == "corpus_shard"}
    changed = {name for name in shards_before if shards_before[name] != shards_after[name]}
    assert changed == {"tiny__c.txt"}
    assert after["steps_computed"] == 2  # the changed shard and the merge
    assert after["corpus"]["id"] != before["corpus"]["id"]
    assert after["corpus"]["accounting"]["records_read"] == before["corpus"]["accounting"]["records_read"] + 1


def test_bad_config_names_the_field(tmp_path):
    from corpusforge.pipeline import run_pipeline
    from corpusforge.tasks.config import ConfigError

    with pytest.raises(ConfigError, match=r"corpus\.reader\.txt_mode.*'line', 'paragraph', 'file'"):
        run_pipeline({"name": "x", "corpus": {"sources": ["."], "reader": {"txt_mode": "lines"}}}, store=tmp_path)
    with pytest.raises(ConfigError, match=r"corpus: the pipeline needs a corpus section"):
        run_pipeline({"name": "x"}, store=tmp_path)


def test_lm_without_encoded_shards_is_a_config_error(tmp_path):
    from corpusforge.pipeline_config import pipeline_config_from_dict
    from corpusforge.tasks.config import ConfigError

    base = {"corpus": {"sources": ["."]}, "lm": {"family": "gpt"}}
    with pytest.raises(ConfigError, match="lm: needs a tokenizer section"):
        pipeline_config_from_dict(base)
    with pytest.raises(ConfigError, match="tokenizer.encode: true"):
        pipeline_config_from_dict({**base, "tokenizer": {"kind": "char", "encode": False}})
