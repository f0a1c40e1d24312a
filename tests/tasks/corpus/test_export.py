"""`corpusforge export ID --format hf-datasets OUT` (issue 16, item 8) and the card in every artifact folder."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.conftest import write

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def corpus(prefect_harness, tmp_path_factory):
    """A corpus from JSONL with extra fields (meta) and a plain text file, with all three splits."""
    from corpusforge.pipeline import run_pipeline

    root = tmp_path_factory.mktemp("export")
    src = root / "src"
    write(src / "a.jsonl", "".join(json.dumps({"text": f"record number {i} of the jsonl file", "id": i,
                                               "lang_tag": "en" if i % 2 else "de"}) + "\n" for i in range(60)))
    write(src / "b.txt", "".join(f"plain line {i} here\n" for i in range(40)))
    store = root / "store"
    summary = run_pipeline({"name": "export", "tracking": {"enabled": False},
                            "corpus": {"name": "exp", "sources": [str(src)],
                                       "split": {"valid": 0.1, "test": 0.1, "seed": 0}}}, store=store)
    return store, summary["corpus"]["id"], Path(summary["corpus"]["path"])


def invoke(*args: str):
    from corpusforge.cli import app

    return CliRunner().invoke(app, list(args))


def test_export_loads_with_datasets(corpus, tmp_path):
    datasets = pytest.importorskip("datasets", reason="the datasets library (corpusforge[hf]) is not installed")
    import pyarrow.parquet as pq

    store, cid, path = corpus
    out = tmp_path / "hf"
    result = invoke("export", cid[:12], str(out), "--format", "hf-datasets", "--store", str(store), "--json")
    assert result.exit_code == 0, result.output
    summary = json.loads(result.output.strip().splitlines()[-1])
    assert summary["meta"] == "struct"
    ds = datasets.load_from_disk(str(out))
    assert set(ds) == {"train", "validation", "test"}  # the names datasets uses (ours: valid)
    for ours, theirs in (("train", "train"), ("valid", "validation"), ("test", "test")):
        table = pq.read_table(path / f"{ours}.parquet")
        assert ds[theirs].num_rows == table.num_rows == summary["splits"][theirs]
        assert ds[theirs]["doc_id"] == table.column("doc_id").to_pylist()
        assert ds[theirs]["text"] == table.column("text").to_pylist()
        for row, meta in zip(ds[theirs], table.column("meta").to_pylist()):  # meta: a struct, same values
            if meta is None:
                assert row["meta"] is None or all(v is None for v in row["meta"].values())
            else:
                assert row["meta"] == json.loads(meta)
    jsonl_rows = [r for r in ds["train"] if r["source"].endswith("a.jsonl")]
    assert jsonl_rows and isinstance(jsonl_rows[0]["meta"]["id"], int)
    card = (out / "README.md").read_text()
    assert cid in card and "load_from_disk" in card and "## Licence" in card


def test_export_refuses_bad_requests_in_one_line(corpus, tmp_path):
    store, cid, path = corpus
    busy = write(tmp_path / "busy" / "x.txt", "x")
    result = invoke("export", cid[:12], str(busy.parent), "--store", str(store))
    assert result.exit_code == 2 and "already exists and is not empty" in result.output
    shard = next((store / "corpus_shard").iterdir())
    shard_id = json.loads((shard / "manifest.json").read_text())["id"]
    result = invoke("export", shard_id[:12], str(tmp_path / "o"), "--store", str(store))
    assert result.exit_code == 2 and "takes a corpus artifact" in result.output
    result = invoke("export", "ffffffffffff", str(tmp_path / "o"), "--store", str(store))
    assert result.exit_code == 2
    result = invoke("export", cid[:12], str(tmp_path / "o"), "--format", "csv", "--store", str(store))
    assert result.exit_code == 2 and "hf-datasets" in result.output
    assert not (tmp_path / "o").exists()


def test_every_artifact_has_a_card_listed_in_its_manifest(corpus):
    """The store writes README.md into each artifact (a dataset card here), digested like every file, and
    made only of identity fields and the step's own fields, so a rebuild writes the same bytes."""
    from corpusforge.storage.cards import card

    store, cid, path = corpus
    for manifest_path in store.glob("*/*/manifest.json"):
        manifest = json.loads(manifest_path.read_text())
        assert "README.md" in manifest["files"], manifest_path
        text = (manifest_path.parent / "README.md").read_text()
        assert manifest["id"] in text and "## Inputs" in text and "## Licence" in text
        fields = {k: v for k, v in manifest.items() if k not in {"schema", "files", "timings", "created_at",
                                                                 "environment", "library_versions", "git_commit"}}
        assert card(fields) == text  # nothing but the manifest's own fields (no dates, no host)
    corpus_card = (path / "README.md").read_text()
    assert "(dataset card)" in corpus_card and "| kept |" in corpus_card


@pytest.fixture(scope="module")
def uneven_corpus(prefect_harness, tmp_path_factory):
    """A corpus whose splits carry different meta: train records have keys id and lang_tag, the validation split
    has plain lines only (no meta at all), test records have id and a nested note. Each split is one source."""
    from corpusforge.pipeline import run_pipeline

    root = tmp_path_factory.mktemp("uneven")
    src = root / "src"
    write(src / "tr.jsonl", "".join(json.dumps({"text": f"train record {i} of the file", "id": i,
                                                "lang_tag": "en"}) + "\n" for i in range(12)))
    write(src / "va.txt", "".join(f"plain validation line {i}\n" for i in range(5)))
    write(src / "te.jsonl", "".join(json.dumps({"text": f"test record {i} here", "id": 100 + i,
                                                "note": {"by": "hand", "n": i}}) + "\n" for i in range(4)))
    store = root / "store"
    summary = run_pipeline({"name": "uneven", "tracking": {"enabled": False},
                            "corpus": {"name": "uneven", "sources": [str(src)],
                                       "split": {"by_source": {"*tr.jsonl": "train", "*va.txt": "valid",
                                                               "*te.jsonl": "test"}}}}, store=store)
    return store, summary["corpus"]["id"], Path(summary["corpus"]["path"])


def test_export_has_one_schema_for_every_split_and_loads_with_load_dataset(uneven_corpus, tmp_path, monkeypatch):
    """Issue 35, item 4: meta was a struct in train and a string in validation (and another struct in test), so
    ``load_dataset(OUT)`` and ``concatenate_datasets`` refused the export. Now one schema: load_dataset opens it
    (offline), the splits concatenate, and the result round-trips through Parquet."""
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    datasets = pytest.importorskip("datasets", reason="the datasets library (corpusforge[hf]) is not installed")
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True, raising=False)
    import pyarrow.parquet as pq

    store, cid, path = uneven_corpus
    stored = {s: pq.read_table(path / f"{s}.parquet").column("meta").to_pylist() for s in ("train", "valid", "test")}
    assert stored["valid"] and all(m is None for m in stored["valid"])  # the case: a split without any meta
    assert stored["train"][0] and stored["test"][0]
    out = tmp_path / "hf"
    result = invoke("export", cid[:12], str(out), "--format", "hf-datasets", "--store", str(store), "--json")
    assert result.exit_code == 0, result.output
    summary = json.loads(result.output.strip().splitlines()[-1])
    assert summary["meta"] == "struct" and summary["splits"] == {"train": 12, "validation": 5, "test": 4}

    ds = datasets.load_dataset(str(out), cache_dir=str(tmp_path / "hf-cache"))
    assert set(ds) == {"train", "validation", "test"}
    features = ds["train"].features
    assert all(ds[s].features == features for s in ds), {s: ds[s].features for s in ds}
    assert set(features["meta"]) == {"id", "lang_tag", "note"}  # every key any record has
    for split, ours in (("train", "train"), ("validation", "valid"), ("test", "test")):
        assert ds[split].num_rows == summary["splits"][split]
        for row, meta in zip(ds[split], stored[ours]):  # the same values; None where a record lacks a key
            want = json.loads(meta) if meta is not None else {}
            got = {k: v for k, v in (row["meta"] or {}).items() if v is not None}
            assert got == want
    assert ds["test"][0]["meta"]["note"] == {"by": "hand", "n": 0}

    everything = datasets.concatenate_datasets([ds["train"], ds["validation"], ds["test"]])
    assert everything.num_rows == 21
    parquet = tmp_path / "all.parquet"
    everything.to_parquet(str(parquet))
    back = datasets.Dataset.from_parquet(str(parquet), cache_dir=str(tmp_path / "hf-cache"))
    assert back.features == everything.features and back.to_list() == everything.to_list()
    on_disk = datasets.load_from_disk(str(out))  # the folder still opens as before
    assert all(on_disk[s].features == features for s in on_disk)
