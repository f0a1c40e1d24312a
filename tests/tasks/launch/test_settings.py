"""Issue 49, the settings: train.processes (and --processes on every train command), strategy, timeout; how the
trainer splits a step over ranks. In-process: no rank is started here (tests/tasks/launch/test_processes.py)."""

from __future__ import annotations

import pytest

from corpusforge.models.configs import TrainConfig
from corpusforge.tasks.config import ConfigError, from_dict
from tests.commands import corpusforge

TRAIN_COMMANDS = (("lm", "train"), ("seq2seq", "train"), ("classify", "train"), ("tag", "train"), ("qa", "train"),
                  ("lm", "finetune"))


def test_processes_must_divide_the_steps_micro_batches():
    assert TrainConfig(processes=4, grad_accum=8).processes == 4
    assert from_dict(TrainConfig, {"processes": "auto"}, "lm.train").processes == "auto"
    with pytest.raises(ConfigError, match=r"lm.train.processes: 2 processes cannot share grad_accum 3 micro-batches "
                                          r"evenly; set train.grad_accum to a multiple of 2"):
        from_dict(TrainConfig, {"processes": 2, "grad_accum": 3}, "lm.train")
    for bad in (0, -1, "two", True):
        with pytest.raises(ConfigError, match="lm.train.processes"):
            from_dict(TrainConfig, {"processes": bad}, "lm.train")
    with pytest.raises(ConfigError, match="timeout"):
        from_dict(TrainConfig, {"timeout": 0}, "lm.train")
    with pytest.raises(ConfigError, match="strategy"):
        from_dict(TrainConfig, {"strategy": "zero3"}, "lm.train")
    assert from_dict(TrainConfig, {"strategy": "fsdp"}, "lm.train").strategy == "fsdp"


def test_processes_is_not_part_of_the_artifact_id():
    from corpusforge.tasks.config import identity

    one, two = TrainConfig(grad_accum=2), TrainConfig(grad_accum=2, processes=2, timeout=60)
    assert identity(one) == identity(two)
    assert identity(one) != identity(TrainConfig(grad_accum=4))


def test_auto_is_one_process_per_visible_gpu_and_divides_the_step():
    import torch

    from corpusforge.tasks.launch import processes

    gpus = torch.cuda.device_count()
    assert processes(TrainConfig(processes="auto", grad_accum=8)) == max(1, min(gpus, 8)) if gpus <= 8 else True
    assert processes(TrainConfig(processes="auto", device="cpu")) == 1
    assert processes(TrainConfig(processes=2, grad_accum=2)) == 2


def test_each_rank_runs_its_share_of_the_step_and_dropout_follows_the_micro_batch():
    from corpusforge.models.training import micro_seed

    seeds = {micro_seed(1337, i) for i in range(1000)}
    assert len(seeds) == 1000  # every micro-batch its own dropout stream, whichever rank runs it
    assert micro_seed(1337, 5) != micro_seed(1338, 5)


@pytest.mark.parametrize("command", TRAIN_COMMANDS, ids=lambda c: " ".join(c))
def test_every_train_command_takes_processes(command):
    ran = corpusforge(*command, "--help", code=0)
    assert "--processes" in ran.stdout and "N|auto" in ran.stdout


def test_processes_errors_are_one_line_before_any_work(tmp_path):
    text = tmp_path / "t.txt"
    text.write_text("hello world\n" * 20)
    store = tmp_path / "store"
    ran = corpusforge("lm", "train", text, "--preset", "shakespeare-char-cpu", "--processes", "two", "--store", store,
                      code=2)
    assert ran.stderr.strip().splitlines()[-1].endswith("--processes: a number >= 1 or auto, got 'two'")
    ran = corpusforge("lm", "train", text, "--preset", "shakespeare-char-cpu", "--processes", "3", "--store", store,
                      code=2)
    assert "lm.train.processes: 3 processes cannot share grad_accum" in ran.stderr
    assert not (store / "corpus").exists()  # refused before any stage ran
