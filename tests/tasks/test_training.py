"""The training stages' shared glue (corpusforge.tasks.training): scratch, metrics.json, curves, reporting."""

from __future__ import annotations

import json
import logging
from pathlib import Path

from corpusforge.storage.store import ArtifactStore
from corpusforge.tasks.training import MetricsLog, training_report, training_scratch


def test_training_progress_bar_draws_on_a_terminal_and_is_silent_otherwise(capsys):
    import os
    import pty
    import sys

    from corpusforge.tasks.training import training_progress

    with training_progress("lm x", 10) as advance:  # pytest's stderr is not a terminal
        advance(5, {"train_loss": 1.0})
    assert capsys.readouterr().err == ""
    code = ("from corpusforge.tasks.training import training_progress\n"
            "with training_progress('lm demo', 100) as adv:\n"
            "    adv(50, {'val_loss': 2.5, 'val_ppl': 12.18})\n"
            "    adv(100, {'train_loss': 2.0, 'lr': 1e-3, 'tokens_per_s': 1234.0})\n")
    pid, fd = pty.fork()
    if pid == 0:  # the child: stderr is the pseudo-terminal
        os.chdir(str(Path(__file__).resolve().parents[2]))
        os.execv(sys.executable, [sys.executable, "-c", code])
    drawn = b""
    while True:
        try:
            chunk = os.read(fd, 4096)
        except OSError:
            break
        if not chunk:
            break
        drawn += chunk
    os.waitpid(pid, 0)
    text = drawn.decode(errors="replace")
    assert "100/100" in text and "loss 2.000" in text and "val 2.500 (ppl 12.2)" in text and "1,234 tok/s" in text


def test_metrics_log_forwards_keeps_the_history_and_writes_no_timings(tmp_path):
    seen = []
    log = MetricsLog(lambda step, m: seen.append(step))
    log(10, {"train_loss": 2.0, "lr": 1e-3, "tokens_per_s": 99.0})
    log(20, {"val_loss": 1.5, "val_ppl": 4.48})
    log.write(tmp_path, {"val_loss": 1.5, "train_seconds": 3.0, "mfu": 0.4})
    data = json.loads((tmp_path / "metrics.json").read_text())
    assert seen == [10, 20] and data["final"] == {"val_loss": 1.5}
    assert data["history"] == [{"step": 10, "train_loss": 2.0, "lr": 1e-3}, {"step": 20, "val_loss": 1.5, "val_ppl": 4.48}]
    assert (tmp_path / "loss_curve.png").stat().st_size > 1000


def test_training_scratch_is_keyed_by_what_the_id_is_made_of_and_removed_after(tmp_path, caplog):
    store = ArtifactStore(tmp_path)
    with training_scratch(store, "lm", 4, {"a": 1}, ["f" * 64]) as one:
        (one / "checkpoint.safetensors").write_bytes(b"x")
        with training_scratch(store, "lm", 4, {"a": 1}, ["f" * 64]) as same:
            assert same == one and (same / "checkpoint.safetensors").is_file()  # a rerun finds the checkpoint
        with training_scratch(store, "lm", 4, {"a": 2}, ["f" * 64]) as other:
            assert other != one
    assert not one.exists()
    try:
        with training_scratch(store, "lm", 4, {"a": 1}, ["f" * 64]) as kept:
            (kept / "checkpoint.safetensors").write_bytes(b"x")
            raise KeyboardInterrupt
    except KeyboardInterrupt:
        pass
    assert (kept / "checkpoint.safetensors").is_file()  # interrupted: kept for the resume
    caplog.set_level(logging.INFO)
    with training_report("lm x", 10, logging.getLogger("t")) as report:
        report(5, {"val_loss": 1.25, "val_ppl": 3.49, "val_accuracy": 0.5})
    assert "step 5: val loss 1.2500 (ppl 3.49, accuracy 0.5)" in caplog.text


def test_refuse_non_finite_names_what_and_what_to_change_in_one_line():
    # issue 35 (defect 3): the rule every training step applies before it publishes
    import math

    import numpy as np
    import pytest
    import torch

    from corpusforge.tasks.training import TrainingDiverged, refuse_non_finite

    finite = {"w": torch.ones(3, 2), "steps": torch.tensor([5]), "v": np.zeros(4, dtype=np.float32)}
    refuse_non_finite("lm a", change="lower lm.train.lr", metrics={"val_loss": 2.5, "val_ppl": math.inf},
                      weights=finite)  # a perplexity may overflow to inf; only losses and weights are checked
    weights = {**finite, "w": torch.tensor([[1.0, math.nan], [math.inf, 2.0], [0.0, 0.0]]),
               "v": np.array([np.nan, 1, 2, 3], dtype=np.float32), "ids": np.array([1, 2])}
    with pytest.raises(TrainingDiverged) as caught:
        refuse_non_finite("lm a", change="lower lm.train.lr (now 10)",
                          metrics={"train_loss": math.nan, "best_val_loss": math.inf, "val_loss": 3.0},
                          weights=weights)
    assert isinstance(caught.value, ValueError)
    assert str(caught.value) == ("lm a: training diverged (train_loss is nan; best_val_loss is inf; 3 of 13 weight "
                                 "values are NaN or infinite), so nothing was published; lower lm.train.lr (now 10)")


def test_the_loss_curve_names_what_the_loss_is_a_mean_over(tmp_path, monkeypatch):
    """Issue 50, item 12: the classifier's loss curve said "nats/token" for a loss averaged over examples. Each
    objective says what its loss is a mean over (``loss_unit``), and fit's MetricsLog draws that on the axis."""
    from matplotlib.axes import Axes

    from corpusforge.models.objectives import DPO, SFT, CausalLM, Classification, Contrastive

    assert (CausalLM.loss_unit, SFT.loss_unit) == ("nats/token", "nats/token")
    assert (Classification.loss_unit, Contrastive.loss_unit, DPO.loss_unit) == \
        ("nats/example", "nats/pair", "nats/preference pair")
    labels = []
    monkeypatch.setattr(Axes, "set_ylabel", lambda self, label, *a, **k: labels.append(label))
    log = MetricsLog(unit=Classification.loss_unit)
    log(10, {"train_loss": 0.7, "lr": 1e-3})
    log(10, {"val_loss": 0.6})
    log.write(tmp_path, {"val_loss": 0.6})
    assert labels == ["cross-entropy (nats/example)"] and (tmp_path / "loss_curve.png").stat().st_size > 1000
