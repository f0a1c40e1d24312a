"""A run whose every step is published is answered from the store: same ids, no Prefect or MLflow run, no heavy import."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import write

CLI = str(Path(sys.executable).parent / "corpusforge")


def pipeline_yaml(root: Path) -> Path:
    write(root / "docs" / "a.txt", "the cat sat on the mat\nthe dog sat on the log\n")
    write(root / "docs" / "b.txt", "a bird sang\nthe cat sat on the mat\n")
    return write(root / "p.yaml", "name: planned\n"
                                  "corpus: {name: small, sources: [docs], reader: {txt_mode: line}}\n"
                                  "ngram: {order: 2, eval_splits: []}\n")


def cli(args: list[str], api_url: str | None, **env: str) -> subprocess.CompletedProcess:
    full = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
    if api_url:
        full["PREFECT_API_URL"] = api_url
    full.update(env)
    return subprocess.run([CLI, *args], capture_output=True, text=True, env=full, timeout=600)


def here(args: list[str], api_url: str, **env: str):
    """The same command in this process (tests/commands.py): for the runs whose imports are not what is checked."""
    from tests.commands import corpusforge

    return corpusforge(*args, env={"PREFECT_API_URL": api_url, **env})


def test_lookup_only_finds_published_steps_and_never_builds(store_root):
    from corpusforge.storage.store import ArtifactStore
    from corpusforge.tasks.step import NotPublished, lookup_only, run_step

    store = ArtifactStore(store_root)
    built = []

    def build(out: Path):
        built.append(out)
        (out / "x.txt").write_text("x")
        return {}

    kwargs = dict(step="demo", version=1, name="d", config={"k": 1}, inputs=[{"id": "abc"}], build=build)
    with lookup_only(), pytest.raises(NotPublished) as missing:
        run_step(store, **kwargs)
    assert built == [] and not (store_root / "demo").exists()
    published = run_step(store, **kwargs)
    assert len(built) == 1 and missing.value.artifact_id == published.id
    with lookup_only():
        found = run_step(store, **kwargs)
    assert len(built) == 1 and found.reused and (found.id, found.path) == (published.id, published.path)


@pytest.mark.e2e
def test_fully_published_run_is_answered_from_the_store(prefect_harness, tmp_path):
    from mlflow import MlflowClient
    from prefect.client.orchestration import get_client

    config = pipeline_yaml(tmp_path)
    store = tmp_path / "store"
    first = here(["run", str(config), "--store", str(store), "--json"], prefect_harness)
    assert first.returncode == 0, first.stderr[-3000:]
    computed = json.loads(first.stdout.strip().splitlines()[-1])
    assert computed["steps_computed"] == 3 and computed["mlflow_run_id"]  # a shard (2 small files), merge, ngram

    client = MlflowClient(tracking_uri=f"sqlite:///{store / 'mlflow.db'}")
    runs_before = client.search_runs([computed["mlflow_experiment_id"]])
    with get_client(sync_client=True) as prefect:
        flow_runs_before = len(prefect.read_flow_runs())

    # -X importtime lists every module the command imported: the answer must need neither Prefect nor MLflow
    # (nor GX, nor torch).
    again = cli(["run", str(config), "--store", str(store), "--json"], prefect_harness, PYTHONPROFILEIMPORTTIME="1")
    assert again.returncode == 0, again.stderr[-3000:]
    answer = json.loads(again.stdout.strip().splitlines()[-1])
    assert answer["answered_from_store"] is True
    assert answer["steps_computed"] == 0 and answer["steps_reused"] == 3 and answer["mlflow_run_id"] is None
    assert [s["id"] for s in answer["steps"]] == [s["id"] for s in computed["steps"]]
    assert answer["stages"]["ngram"]["metrics"] == computed["stages"]["ngram"]["metrics"]
    assert answer["corpus"]["accounting"] == computed["corpus"]["accounting"]
    imported = {line.split("|")[-1].strip() for line in again.stderr.splitlines() if line.startswith("import time:")}
    assert imported, "no import trace"
    for heavy in ("prefect", "mlflow", "great_expectations", "torch"):
        assert heavy not in imported, f"{heavy} was imported to answer from the store"

    assert len(client.search_runs([computed["mlflow_experiment_id"]])) == len(runs_before)
    with get_client(sync_client=True) as prefect:
        assert len(prefect.read_flow_runs()) == flow_runs_before

    human = here(["run", str(config), "--store", str(store)], prefect_harness, COLUMNS="200")
    assert human.returncode == 0 and "answered from the store" in human.stdout

    # a new source file: the run goes through the flow again and recomputes only what it touches
    write(tmp_path / "docs" / "c.txt", "colourless green ideas\n")
    third = here(["run", str(config), "--store", str(store), "--json"], prefect_harness)
    assert third.returncode == 0, third.stderr[-3000:]
    result = json.loads(third.stdout.strip().splitlines()[-1])
    assert "answered_from_store" not in result and result["mlflow_run_id"]
    # the new small file joins the shard of the two others (a pack is at most ~shard_mb of work), merge, ngram
    assert result["steps_computed"] == 3 and result["steps_reused"] == 0
    (shard,) = [s for s in result["steps"] if s["step"] == "corpus_shard"]
    assert shard["name"].endswith("_and_2_more")


def test_missing_source_is_refused_before_anything_starts(tmp_path):
    config = write(tmp_path / "p.yaml", "name: x\ncorpus: {sources: [no/such/dir]}\n")
    res = cli(["run", str(config), "--store", str(tmp_path / "s")], None, PYTHONPROFILEIMPORTTIME="1")
    assert res.returncode == 2
    assert "no/such/dir" in res.stderr
    imported = {line.split("|")[-1].strip() for line in res.stderr.splitlines() if line.startswith("import time:")}
    assert "prefect" not in imported and "mlflow" not in imported
    assert not (tmp_path / "s" / "mlflow.db").exists()


DEMOS = ["demo.yaml", "demo-translation.yaml", "demo-classification.yaml", "demo-tagging.yaml", "demo-qa.yaml"]


@pytest.mark.parametrize("name", DEMOS)
def test_every_stage_that_evaluates_on_a_held_out_split_is_checked_before_the_run(name):
    """Issue 35, item 7, for every stage that evaluates on a held-out split (lm, seq2seq, classify,
    sentence_embeddings, post_training declare Stage.needs_split): the demo configs as shipped pass the check; with
    nothing held out, the check names the first such stage and how to give it a split, before any work."""
    import yaml

    from corpusforge.pipeline_config import pipeline_config_from_dict
    from corpusforge.plan import check_held_out_splits
    from corpusforge.stages import STAGES
    from corpusforge.tasks.config import ConfigError
    from corpusforge.tasks.corpus.merge import discover

    path = Path(__file__).resolve().parents[2] / "configs" / name
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    cfg = pipeline_config_from_dict(data)
    refs, _ = discover(cfg.corpus, path.parent)
    check_held_out_splits(cfg, [r.name for r in refs])  # as shipped: fine

    data["corpus"]["split"] = {"valid": 0, "test": 0, "by_source": {}}
    needing = [s for s in STAGES if s.needs_split and data.get(s.section) is not None]
    assert needing, f"{name} has no stage that needs a held-out split"
    with pytest.raises(ConfigError, match=rf"^{needing[0].section}: needs a {needing[0].needs_split[0]}") as err:
        check_held_out_splits(pipeline_config_from_dict(data), [r.name for r in refs])
    assert needing[0].needs_split_hint in str(err.value)


def test_the_training_stages_declare_the_split_they_evaluate_on():
    from corpusforge.stages import stage_for

    for section in ("lm", "seq2seq", "classify", "sentence_embeddings", "post_training", "tag"):
        stage = stage_for(section)
        assert stage.needs_split and stage.needs_split_hint, section
