"""The same pipeline on every task runner: threads, a real local Dask cluster (2 worker processes) and a local Ray
instance give the same artifact ids, the same file bytes (except files a step declares nondeterministic) and the
same accounting. Each runner writes into its own store, so every step is computed on it, none reused."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from tests.conftest import write

pytestmark = pytest.mark.server

WORDS = ("the cat dog bird sat ran sang on under a mat log tree green red small big old new and then it was "
         "not here there some".split())


def make_corpus(root: Path) -> Path:
    """Three sources (so three shards) with duplicates, a broken JSON record and an empty line."""
    rng = random.Random(15)
    lines = [" ".join(rng.choices(WORDS, k=rng.randint(3, 12))) for _ in range(240)]
    corpus = root / "tiny"
    write(corpus / "a.txt", "\n".join(lines[:120]) + "\n\n" + lines[0] + "\n")
    write(corpus / "b.jsonl", "".join(json.dumps({"text": t, "n": i}) + "\n" for i, t in enumerate(lines[120:200]))
          + '{"text": broken\n' + json.dumps({"text": lines[5]}) + "\n")
    write(corpus / "c.txt", "\n".join(lines[200:]) + "\n")
    return corpus


def corpus_config(corpus: Path, runner: dict) -> dict:
    return {"name": "runners", "tracking": {"enabled": False}, "runner": runner,
            "corpus": {"name": "tiny", "sources": [str(corpus)], "reader": {"txt_mode": "line"},
                       "shard_mb": 0,  # one shard per file, so the runners have three tasks to spread
                       "split": {"valid": 0.1, "test": 0.1, "seed": 0},
                       "validate": {"min_chars": 1, "max_chars": 1000}}}


def pipeline_config(corpus: Path, runner: dict) -> dict:
    return {**corpus_config(corpus, runner),
            "tokenizer": {"name": "tiny-bpe", "kind": "byte-bpe", "vocab_size": 300, "encode": True},
            "ngram": {"order": 3, "smoothing": "modified-kneser-ney", "sentence": "line", "threads": 1}}


def fingerprint(summary: dict) -> dict:
    """Per step, in run order: id, step, name, the sha256 of every deterministic file, and any accounting."""
    out = []
    for s in summary["steps"]:
        manifest = json.loads((Path(s["path"]) / "manifest.json").read_text())
        skip = set(manifest.get("nondeterministic") or {})
        out.append({"id": s["id"], "step": s["step"], "name": s["name"],
                    "files": {f: d["sha256"] for f, d in manifest["files"].items() if f not in skip},
                    "accounting": manifest.get("accounting")})
    return out


def run(config: dict, store: Path) -> dict:
    from corpusforge.pipeline import run_pipeline

    summary = run_pipeline(config, store=store)
    assert summary["steps_computed"] == len(summary["steps"]), "every step computed in a fresh store"
    return summary


def assert_same(summary: dict, baseline: dict) -> None:
    got, want = fingerprint(summary), fingerprint(baseline)
    assert [s["id"] for s in got] == [s["id"] for s in want]
    for g, w in zip(got, want):
        assert g["files"] == w["files"], f"{g['step']} {g['name']}: file digests differ"
        assert g["accounting"] == w["accounting"], f"{g['step']} {g['name']}: accounting differs"
    assert summary["corpus"]["accounting"] == baseline["corpus"]["accounting"]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return make_corpus(tmp_path_factory.mktemp("runners"))


@pytest.fixture(scope="module")
def baseline(prefect_harness, data, tmp_path_factory):
    """The thread runner's results: the corpus stage alone, and corpus + tokenizer + ngram."""
    root = tmp_path_factory.mktemp("threads")
    runner = {"kind": "threads", "workers": 2}
    corpus = run(corpus_config(data, runner), root / "corpus-store")
    acc = corpus["corpus"]["accounting"]
    assert acc["records_read"] == 122 + 82 + 40 and acc["quarantined"] == {"invalid_json": 1}
    assert [s["step"] for s in corpus["steps"]] == ["corpus_shard"] * 3 + ["corpus"]
    whole = run(pipeline_config(data, runner), root / "pipeline-store")
    assert {"corpus", "tokenizer", "ngram"} <= {s["step"] for s in whole["steps"]}
    return {"corpus": corpus, "pipeline": whole}


@pytest.fixture(scope="module")
def dask_address():
    """A local Dask cluster started exactly as `runner.kind: dask` without an address starts one (2 worker
    processes, all on 127.0.0.1); the runs join it with runner.address, so its start is paid once."""
    pytest.importorskip("prefect_dask", reason="corpusforge[dask] is not installed")
    import os

    from corpusforge.pipeline import make_task_runner
    from corpusforge.pipeline_config import RunnerConfig

    with make_task_runner(RunnerConfig(kind="dask", workers=2)) as runner:
        client = runner.client  # creates the LocalCluster
        pids = set(client.run(os.getpid).values())
        assert len(pids) == 2 and os.getpid() not in pids, "two worker processes besides this one"
        address = client.scheduler.address
        assert address.startswith("tcp://127.0.0.1:")
        yield address


@pytest.fixture(scope="module")
def local_ray():
    """A local Ray instance started exactly as `runner.kind: ray` without an address starts one (2 CPUs, no
    dashboard); the runs' Ray task runners find it initialized and use it."""
    pytest.importorskip("prefect_ray", reason="corpusforge[ray] is not installed")
    ray = pytest.importorskip("ray", reason="corpusforge[ray] is not installed")

    from corpusforge.pipeline import make_task_runner
    from corpusforge.pipeline_config import RunnerConfig

    with make_task_runner(RunnerConfig(kind="ray", workers=2)):
        assert ray.cluster_resources()["CPU"] == 2
        yield ray


def shard_tasks_finished(address: str) -> int:
    """How many corpus_shard tasks the Dask scheduler has seen finish on its workers so far."""
    from distributed import Client

    with Client(address, set_as_default=False) as client:
        counts = client.run_on_scheduler(lambda dask_scheduler: {
            name: dict(p.state_counts) for name, p in dask_scheduler.task_prefixes.items()})
    return counts.get("corpus_shard_task", {}).get("memory", 0)


@pytest.mark.parametrize("stage", ["corpus", "pipeline"])
def test_same_artifacts_on_dask(stage, baseline, data, dask_address, tmp_path):
    make = corpus_config if stage == "corpus" else pipeline_config
    before = shard_tasks_finished(dask_address)
    summary = run(make(data, {"kind": "dask", "address": dask_address}), tmp_path / "store")
    assert_same(summary, baseline[stage])
    assert shard_tasks_finished(dask_address) - before == 3  # one per source, run by the cluster's workers


@pytest.mark.parametrize("stage", ["corpus", "pipeline"])
def test_same_artifacts_on_ray(stage, baseline, data, local_ray, tmp_path):
    make = corpus_config if stage == "corpus" else pipeline_config
    summary = run(make(data, {"kind": "ray", "workers": 2}), tmp_path / "store")
    assert_same(summary, baseline[stage])


def test_runner_address_is_checked():
    from corpusforge.pipeline import make_task_runner
    from corpusforge.pipeline_config import pipeline_config_from_dict
    from corpusforge.tasks.config import ConfigError

    base = {"corpus": {"sources": ["."]}}
    with pytest.raises(ConfigError, match="runner.address: joins a dask or ray cluster"):
        pipeline_config_from_dict({**base, "runner": {"kind": "threads", "address": "tcp://127.0.0.1:8786"}})
    with pytest.raises(ConfigError, match="runner.address: 'ray://h:10001' is not a Dask scheduler address"):
        pipeline_config_from_dict({**base, "runner": {"kind": "dask", "address": "ray://h:10001"}})
    with pytest.raises(ConfigError, match="runner.address: 'tcp://h:8786' is not a Ray address"):
        pipeline_config_from_dict({**base, "runner": {"kind": "ray", "address": "tcp://h:8786"}})
    cfg = pipeline_config_from_dict({**base, "runner": {"kind": "dask", "address": " tcp://10.0.0.5:8786 "}})
    assert cfg.runner.address == "tcp://10.0.0.5:8786"
    pytest.importorskip("prefect_dask", reason="corpusforge[dask] is not installed")
    assert make_task_runner(cfg.runner).address == "tcp://10.0.0.5:8786"
