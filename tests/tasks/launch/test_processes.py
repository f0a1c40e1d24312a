"""Issue 49: every training stage on N processes through its Prefect task (corpusforge.tasks.launch).

Two gloo ranks on CPU, started by torch's elastic launch from the stage's task, must end with the weights one
process reaches with the same config (the step's grad_accum micro-batches split over the ranks; dropout seeded per
micro-batch): within float rounding, for lm, seq2seq and classify. The artifact id is the same; the manifest
records the processes."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import torch

from corpusforge.tasks.step import StepResult

pytestmark = pytest.mark.e2e


def run_task(task, upstream: StepResult, section: dict, store: Path, processes: int, reports: list | None = None):
    """The stage's Prefect task in a flow (what the pipeline runs), with ``train.processes``."""
    from prefect import flow

    config = copy.deepcopy(section)
    config["train"]["processes"] = processes

    @flow(name="issue-49")
    def one():
        return task(upstream.to_dict(), config, str(store),
                    on_metrics=(lambda s, m: reports.append((s, dict(m)))) if reports is not None else None)

    out = one()
    return out[-1] if isinstance(out, list) else out


def weights(result: dict) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(str(Path(result["path"]) / "model.safetensors"))


def assert_same_model(one: dict, two: dict) -> None:
    a, b = weights(one), weights(two)
    assert a.keys() == b.keys()
    worst = max(float((a[k].float() - b[k].float()).abs().max()) for k in a)
    assert worst < 1e-4, worst
    assert one["id"] == two["id"]  # the id does not depend on the processes
    m1 = json.loads((Path(one["path"]) / "manifest.json").read_text())["metrics"]
    m2 = json.loads((Path(two["path"]) / "manifest.json").read_text())["metrics"]
    assert m1.get("processes", 1.0) == 1.0 and m2["processes"] == 2.0
    spec = json.loads((Path(two["path"]) / "config.json").read_text())
    assert spec["train"]["processes"] == 2




LM = {"name": "tiny", "family": "gpt",
      "model": {"n_layer": 1, "n_head": 2, "n_embd": 16, "block_size": 16, "dropout": 0.1},
      "train": {"max_iters": 12, "batch_size": 8, "grad_accum": 2, "lr": 1e-2, "warmup_iters": 2, "eval_interval": 6,
                "eval_iters": 2, "log_interval": 3, "cpu_threads": 1},
      "sample": {"max_new_tokens": 0}}


@pytest.fixture(scope="module")
def lm_runs(tmp_path_factory, prefect_harness):
    """LM on one process and on two gloo ranks (elastic launch), for the test below and the Ray test's reference."""
    from corpusforge.tasks.lm.train import lm_task
    from tests.tasks.lm.lm_fixtures import write_char_shards

    root = tmp_path_factory.mktemp("lm-runs")
    upstream = write_char_shards(root / "fx")
    reports: list = []
    one = run_task(lm_task, upstream, LM, root / "one", 1)
    two = run_task(lm_task, upstream, LM, root / "two", 2, reports)
    return {"upstream": upstream, "one": one, "two": two, "reports": reports, "root": root}


def test_lm_on_two_gloo_ranks_is_the_model_of_one_process(lm_runs):
    one, two, reports, tmp_path = lm_runs["one"], lm_runs["two"], lm_runs["reports"], lm_runs["root"]
    assert_same_model(one, two)
    # rank 0's reports reached the task's callback (the MLflow run, the progress bar) as it trained
    assert [s for s, m in reports if "train_loss" in m] == [3, 6, 9, 12]
    assert [s for s, m in reports if "val_loss" in m] == [6, 12]
    assert not (tmp_path / "two" / ".scratch" / "lm").exists() or not any((tmp_path / "two" / ".scratch" / "lm").iterdir())


def test_seq2seq_on_two_gloo_ranks_is_the_model_of_one_process(tmp_path, prefect_harness):
    from corpusforge.storage.store import ArtifactStore
    from corpusforge.tasks.seq2seq.build import seq2seq_task
    from tests.tasks.seq2seq.pairs_fixtures import GRU, digit_pairs, encoded, pipeline, reverse

    section = {"name": "rev", **GRU, "decode": {"beam": 1, "max_len": 12},
               "train": {"max_iters": 10, "batch_size": 8, "grad_accum": 2, "lr": 5e-3, "warmup_iters": 2,
                         "eval_interval": 5, "eval_iters": 2, "log_interval": 5, "cpu_threads": 1}}
    section["model"] = {**section["model"], "dropout": 0.1}
    cfg = pipeline(tmp_path / "pairs", {"train": digit_pairs(64, reverse, 1), "valid": digit_pairs(8, reverse, 2)},
                   section)
    upstream = encoded(cfg, ArtifactStore(tmp_path / "prep"))
    one = run_task(seq2seq_task, upstream, section, tmp_path / "one", 1)
    two = run_task(seq2seq_task, upstream, section, tmp_path / "two", 2)
    assert_same_model(one, two)


def test_classify_on_two_gloo_ranks_is_the_model_of_one_process(tmp_path, prefect_harness):
    from corpusforge.storage.store import ArtifactStore
    from corpusforge.tasks.classify.build import classify_task
    from corpusforge.tasks.corpus.merge import build_corpus, resolve_packs
    from corpusforge.tasks.corpus.shard import build_corpus_shard
    from corpusforge.tasks.tokenizer.train import run_tokenizer_stage
    from tests.tasks.classify.test_classify import config

    section = {"name": "reviews", "family": "rnn_classifier", "model": {"n_hidden": 16, "dropout": 0.1},
               "train": {"max_iters": 10, "batch_size": 8, "grad_accum": 4, "lr": 5e-3, "warmup_iters": 2,
                         "eval_interval": 5, "eval_iters": 0, "log_interval": 5, "cpu_threads": 1}}
    cfg = config(section)
    store = ArtifactStore(tmp_path / "prep")
    corpus = build_corpus([build_corpus_shard(p, cfg.corpus, store) for p in resolve_packs(cfg.corpus)], cfg.corpus,
                          store)
    upstream = run_tokenizer_stage(corpus, cfg.tokenizer, store)[-1]
    one = run_task(classify_task, upstream, section, tmp_path / "one", 1)
    two = run_task(classify_task, upstream, section, tmp_path / "two", 2)
    assert_same_model(one, two)
    scores = [json.loads((Path(r["path"]) / "evaluation.json").read_text())["splits"]["valid"]["accuracy"]
              for r in (one, two)]
    assert scores[0] == scores[1]  # scored by the task's process, from the same weights


def test_lm_sharded_with_fsdp2_through_the_task_is_the_model_of_one_process(tmp_path, prefect_harness):
    """train.strategy fsdp: the ranks shard the GPT's blocks; the task still publishes whole weights (gathered) that
    load in one process and equal one process's."""
    from corpusforge.models.zoo import load_model
    from corpusforge.tasks.lm.train import lm_task
    from tests.tasks.lm.lm_fixtures import write_char_shards

    upstream = write_char_shards(tmp_path / "fx")
    section = copy.deepcopy(LM)
    section["model"]["n_layer"] = 2
    section["train"]["strategy"] = "fsdp"
    one = run_task(lm_task, upstream, section, tmp_path / "one", 1)
    two = run_task(lm_task, upstream, section, tmp_path / "two", 2)
    assert_same_model(one, two)
    model = load_model(Path(two["path"]))  # whole tensors, in one process
    assert sum(p.numel() for p in model.parameters()) > 0


SLOW_LM = {**LM, "model": {"n_layer": 2, "n_head": 2, "n_embd": 32, "block_size": 32, "dropout": 0.0},
           "train": {**LM["train"], "max_iters": 400, "batch_size": 16, "lr": 3e-3, "eval_interval": 20,
                     "log_interval": 20, "timeout": 60}}


def rank_processes() -> dict[int, int]:
    """rank -> pid of the training ranks this test process started (through the launcher)."""
    import psutil

    found = {}
    for child in psutil.Process().children(recursive=True):
        try:
            if "corpusforge.tasks.launch" in " ".join(child.cmdline()):
                found[int(child.environ()["RANK"])] = child.pid
        except (psutil.Error, KeyError):
            continue
    return found


def signal_rank_1_after_a_checkpoint(upstream, section: dict, store: Path, sig: int) -> tuple[str, int, float]:
    """Run the lm task on 2 ranks in a thread, send ``sig`` to rank 1 once a checkpoint exists; returns (the task's
    error message, rank 1's pid, when the signal was sent)."""
    import os
    import threading
    import time

    from corpusforge.tasks.lm.train import lm_task

    outcome: dict = {}

    def go() -> None:
        try:
            outcome["result"] = run_task(lm_task, upstream, section, store, 2)
        except Exception as exc:  # noqa: BLE001 - what the test looks at
            outcome["error"] = exc

    thread = threading.Thread(target=go)
    thread.start()
    deadline, sent = time.monotonic() + 240, None
    while time.monotonic() < deadline and sent is None and thread.is_alive():
        if any(store.glob(".scratch/lm/*/checkpoint.safetensors")):
            ranks = rank_processes()
            if 1 in ranks:
                os.kill(ranks[1], sig)
                sent = ranks[1], time.monotonic()
        time.sleep(0.02)
    thread.join(240)
    assert sent is not None, "the run ended before rank 1 could be signalled"
    return str(outcome.get("error")), sent[0], sent[1]


def test_a_killed_rank_fails_the_step_in_one_line_and_the_rerun_resumes(tmp_path, prefect_harness):
    """The drill: SIGKILL rank 1 once a checkpoint exists; the step fails naming the rank, publishes nothing; the same
    call again resumes from the checkpoint and ends with the weights of a run never interrupted."""
    import signal

    from corpusforge.storage.store import ArtifactStore
    from corpusforge.tasks.lm.config import lm_config_from_dict
    from corpusforge.tasks.lm.train import build_lm, lm_task
    from tests.tasks.lm.lm_fixtures import write_char_shards

    upstream = write_char_shards(tmp_path / "fx")
    store = tmp_path / "store"
    message, _, _ = signal_rank_1_after_a_checkpoint(upstream, SLOW_LM, store, signal.SIGKILL)
    assert "rank 1 of 2 failed (killed by SIGKILL)" in message and "\n" not in message, message
    assert "resume from its last checkpoint" in message
    assert not list(store.glob("lm/*/model.safetensors"))  # nothing published
    assert list(store.glob(".scratch/lm/*/checkpoint.safetensors"))  # the checkpoint is kept

    again = run_task(lm_task, upstream, SLOW_LM, store, 2)
    metrics = json.loads((Path(again["path"]) / "manifest.json").read_text())["metrics"]
    assert metrics["resumed_from_step"] >= 20 and metrics["processes"] == 2.0
    section = copy.deepcopy(SLOW_LM)
    clean = build_lm(upstream, lm_config_from_dict(section), ArtifactStore(tmp_path / "clean"))[-1]
    assert clean.id == again["id"]
    a, b = weights(again), weights(clean.to_dict())
    worst = max(float((a[k] - b[k]).abs().max()) for k in a)
    assert worst < 1e-3, worst


@pytest.mark.server
def test_under_ray_the_ranks_are_ray_train_workers_and_give_the_same_model(lm_runs, tmp_path, monkeypatch):
    """A local Ray (2 CPUs): the task sees Ray set up, so Ray Train's TorchTrainer starts the 2 ranks; the artifact
    is the elastic launch's (same id, same weights within float rounding: the elastic run is the module's)."""
    ray = pytest.importorskip("ray")
    pytest.importorskip("ray.train.torch")
    from corpusforge.tasks.lm.train import lm_task

    upstream, elastic = lm_runs["upstream"], lm_runs["two"]
    from corpusforge.tasks import launch

    launched, real = [], launch._ray_launch  # a spy: the real launch runs, and the test sees that it did

    def spy(*args, **kwargs):
        launched.append(args[1])
        return real(*args, **kwargs)

    monkeypatch.setattr(launch, "_ray_launch", spy)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        on_ray = run_task(lm_task, upstream, LM, tmp_path / "ray", 2)
    finally:
        ray.shutdown()
    assert launched == [2]
    a, b = weights(elastic), weights(on_ray)
    assert max(float((a[k] - b[k]).abs().max()) for k in a) < 1e-4
    assert elastic["id"] == on_ray["id"]
    logs = json.loads((Path(on_ray["path"]) / "manifest.json").read_text())["metrics"]
    assert logs["processes"] == 2.0


def test_a_hung_rank_times_out_in_one_line(tmp_path, prefect_harness):
    """SIGSTOP rank 1 (a hang, not a death): rank 0 waits train.timeout seconds at its next collective, then the step
    fails in one line saying so; the stopped rank is cleaned up."""
    import signal
    import time

    from tests.tasks.lm.lm_fixtures import write_char_shards

    upstream = write_char_shards(tmp_path / "fx")
    section = copy.deepcopy(SLOW_LM)
    section["train"]["timeout"] = 8
    message, stopped, when = signal_rank_1_after_a_checkpoint(upstream, section, tmp_path / "store", signal.SIGSTOP)
    waited = time.monotonic() - when
    assert "rank 0 of 2 failed" in message and "train.timeout (8 s)" in message and "\n" not in message, message
    assert waited >= 8
    import psutil

    assert not psutil.pid_exists(stopped) or psutil.Process(stopped).status() == psutil.STATUS_ZOMBIE


def test_tag_on_two_gloo_ranks_is_the_model_of_one_process(tmp_path, prefect_harness):
    from corpusforge.storage.store import ArtifactStore
    from corpusforge.tasks.corpus.merge import build_corpus, resolve_packs
    from corpusforge.tasks.corpus.shard import build_corpus_shard
    from corpusforge.tasks.tag.build import tag_task
    from tests.tasks.tag.test_tag import SECTION, config

    section = copy.deepcopy(SECTION)
    section["train"] = {**section["train"], "max_iters": 10, "grad_accum": 2, "eval_interval": 5, "log_interval": 5}
    section["model"] = {**section["model"], "dropout": 0.2}
    cfg = config(section)
    store = ArtifactStore(tmp_path / "prep")
    corpus = build_corpus([build_corpus_shard(p, cfg.corpus, store) for p in resolve_packs(cfg.corpus)], cfg.corpus,
                          store)
    one = run_task(tag_task, corpus, section, tmp_path / "one", 1)
    two = run_task(tag_task, corpus, section, tmp_path / "two", 2)
    assert_same_model(one, two)


def test_qa_cross_validation_on_two_ranks_trains_each_fold_and_scores_as_one_process(tmp_path, prefect_harness,
                                                                                   monkeypatch):
    """The reader trains k folds and then the published model: k + 1 launches, and from the second on each rank
    repeats the build through the earlier folds, taking their trained weights from the step's scratch. The
    cross-validated answers equal one process's (same models within float rounding)."""
    import shutil

    import corpusforge as cf
    from tests.flows.cli.test_qa import QUICK, SAMPLE, sample_sentences

    monkeypatch.setenv("PREFECT_API_URL", prefect_harness)
    monkeypatch.setenv("CORPUSFORGE_LOCAL_SERVER", "off")
    text = sample_sentences(tmp_path / "sentences.txt")
    bert = tmp_path / "bert.yaml"
    bert.write_text(json.dumps({
        "corpus": {"reader": {"txt_mode": "line"}, "split": {"valid": 0.1, "test": 0.0, "seed": 0}},
        "tokenizer": {"kind": "bpe", "vocab_size": 300, "normalizers": ["nfc", "lowercase"], "pre_tokenizer": "bert",
                      "unk_token": "[UNK]", "roles": {"cls": "[CLS]", "sep": "[SEP]", "mask": "[MASK]", "pad": "[PAD]"}},
        "lm": {"name": "tiny-bert", "family": "bert", "sample": {"max_new_tokens": 0},
               "model": {"n_layer": 1, "n_head": 2, "n_embd": 32, "block_size": 64, "dropout": 0.0},
               "train": {"max_iters": 4, "eval_interval": 4, "batch_size": 8, "cpu_threads": 1,
                         "log_interval": 2, "eval_iters": 2}}}), encoding="utf-8")
    pre = cf.lm.train([text], str(bert), store=tmp_path / "one")
    shutil.copytree(tmp_path / "one", tmp_path / "two")  # the same pre-trained BERT in a second store
    quick = [*QUICK, "train.grad_accum=2"]
    one = cf.qa.train(SAMPLE, "xquad-reader-cpu", init=pre.id, overrides=quick, store=tmp_path / "one")
    two = cf.qa.train(SAMPLE, "xquad-reader-cpu", init=pre.id, overrides=[*quick, "train.processes=2"],
                      store=tmp_path / "two")
    assert one.id == two.id and two.metrics["processes"] == 2.0
    answers = [json.loads((Path(r.path) / "predictions.json").read_text())["cross_validated"] for r in (one, two)]
    assert answers[0] == answers[1] and len(answers[0]) == 69
    assert_same_model({"id": one.id, "path": str(one.path)}, {"id": two.id, "path": str(two.path)})
