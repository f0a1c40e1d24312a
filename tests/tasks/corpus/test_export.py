"""`corpusforge export ID --format hf-datasets OUT` (issue 16, item 8) and the card in every artifact folder."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.conftest import write

pytestmark = pytest.mark.slow


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
