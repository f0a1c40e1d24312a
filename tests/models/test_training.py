"""The trainer: exact resume on CPU, schedule, early stopping, callbacks, checkpoints without pickle."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from corpusforge.models.checkpoint import read_checkpoint
from corpusforge.models.configs import TrainConfig
from corpusforge.models.gpt.config import GPTConfig
from corpusforge.models.gpt.model import GPT
from corpusforge.models.nplm.config import NPLMConfig
from corpusforge.models.nplm.model import NPLM
from corpusforge.models.rnn.config import RNNConfig
from corpusforge.models.rnn.model import RNNLM
from corpusforge.models.training import learning_rate, train
from corpusforge.models.zoo import load_model, objective_for, save_model, unique_state_dict


def fit(model, data, val, cfg, **kwargs):
    """Train on a token stream with the model's family's own objective."""
    return train(model, objective_for(model, {"train": data, "valid": val}), cfg, **kwargs)


def pattern_tokens(n: int, vocab: int = 7, seed: int = 0) -> np.ndarray:
    """A noisy repeating pattern: learnable, so the loss must fall well below ln(vocab)."""
    rng = np.random.default_rng(seed)
    base = np.tile(np.arange(vocab), n // vocab + 1)[:n]
    noise = rng.random(n) < 0.05
    return np.where(noise, rng.integers(0, vocab, n), base).astype(np.uint16)


def make(family: str):
    torch.manual_seed(0)
    if family == "gpt":
        return GPT(GPTConfig(vocab_size=7, block_size=8, n_layer=1, n_head=2, n_embd=16, dropout=0.1))
    if family == "lstm":
        return RNNLM(RNNConfig(cell="lstm", vocab_size=7, block_size=6, n_embd=8, n_hidden=8, n_layer=2, dropout=0.1))
    return NPLM(NPLMConfig(vocab_size=7, context=3, n_embd=4, n_hidden=8, block_size=8, dropout=0.1))


CFG = dict(max_iters=12, batch_size=4, grad_accum=2, lr=3e-3, min_lr=3e-4, warmup_iters=3, eval_interval=4,
           eval_iters=2, log_interval=2, seed=5, keep_best=False)


@pytest.mark.parametrize("family", ["gpt", "lstm", "nplm"])
def test_resumed_run_ends_with_identical_weights(family, tmp_path):
    data, val = pattern_tokens(3000), pattern_tokens(400, seed=1)
    cfg = TrainConfig(**CFG)
    straight = make(family)
    full = fit(straight, data, val, cfg)

    interrupted = make(family)
    ckpt = tmp_path / "ckpt.safetensors"
    part = fit(interrupted, data, val, cfg, checkpoint_path=ckpt, stop_after=7)  # 7: not an eval step
    assert part.step == 7 and read_checkpoint(ckpt)[1]["step"] == 7

    resumed = make(family)
    torch.manual_seed(999)  # whatever the process did before must not matter
    end = fit(resumed, data, val, cfg, checkpoint_path=ckpt, resume_from=ckpt)
    assert end.step == full.step == 12
    a, b = unique_state_dict(straight), unique_state_dict(resumed)
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k
    assert [h["val_loss"] for h in end.history] == [h["val_loss"] for h in full.history]


def test_training_learns_and_reports_through_callbacks(tmp_path):
    data, val = pattern_tokens(4000), pattern_tokens(500, seed=1)
    seen, ckpts = [], []
    model = make("gpt")
    before = objective_for(model, {"train": data, "valid": val}).evaluate(model, "valid", 8)["loss"]
    result = fit(model, data, val, TrainConfig(max_iters=60, batch_size=8, lr=1e-2, warmup_iters=5, eval_interval=30,
                                                 eval_iters=0, log_interval=10),
                   on_metrics=lambda s, m: seen.append((s, m)), on_checkpoint=ckpts.append,
                   checkpoint_path=tmp_path / "c.safetensors")
    assert before > math.log(7) - 0.3
    assert result.metrics["val_loss"] < 0.8 * before
    assert result.metrics["val_ppl"] == pytest.approx(math.exp(result.metrics["val_loss"]))
    assert result.metrics["val_bpt"] == pytest.approx(result.metrics["val_loss"] / math.log(2))
    assert [s for s, m in seen if "val_loss" in m] == [30, 60]
    assert [s for s, m in seen if "lr" in m] == [10, 20, 30, 40, 50, 60]
    assert [s for s, m in seen if "train_loss" in m] == [10, 20, 30, 40, 50, 60]  # once per step, not again at evals
    assert all(m["tokens_per_s"] > 0 for s, m in seen if "tokens_per_s" in m)
    assert len(ckpts) == 2 and ckpts[0].exists()
    # the checkpoint is plain safetensors: weights + optimizer + RNG, readable without pickle
    tensors, meta = read_checkpoint(ckpts[-1])
    assert meta["step"] == 60 and "rng.torch" in tensors and any(k.startswith("optim.") for k in tensors)
    assert not any(k == "model.lm_head.weight" for k in tensors)  # tied: stored once


def test_early_stopping_stops(tmp_path):
    data = pattern_tokens(2000)
    val = np.random.default_rng(3).integers(0, 7, 300).astype(np.uint16)  # unlearnable: val stops improving
    cfg = TrainConfig(max_iters=400, batch_size=4, lr=3e-2, warmup_iters=0, eval_interval=5, eval_iters=2,
                      log_interval=5, early_stopping_patience=2, lr_schedule="constant")
    result = fit(make("gpt"), data, val, cfg)
    assert result.stopped_early and result.step < 400
    assert result.metrics["val_loss"] == pytest.approx(result.best_val_loss)  # keep_best: the best weights


def test_learning_rate_schedule():
    cfg = TrainConfig(max_iters=100, lr=1.0, min_lr=0.1, warmup_iters=10)
    assert learning_rate(0, cfg) == pytest.approx(1 / 11)
    assert learning_rate(10, cfg) == pytest.approx(1.0)
    assert learning_rate(55, cfg) == pytest.approx(0.55)  # halfway through the cosine: (1 + 0.1) / 2
    assert learning_rate(100, cfg) == pytest.approx(0.1)
    step = TrainConfig(max_iters=100, lr=1.0, min_lr=0.0, warmup_iters=0, lr_schedule="step", step_decay_start=40,
                       step_decay_every=10, step_decay_factor=0.5)
    assert [learning_rate(i, step) for i in (39, 40, 49, 50)] == [1.0, 0.5, 0.5, 0.25]


def test_save_and_load_lm_round_trip(tmp_path):
    model = make("gpt").eval()
    save_model(model, tmp_path / "m")
    loaded = load_model(tmp_path / "m")
    idx = torch.randint(0, 7, (2, 8))
    torch.testing.assert_close(loaded(idx)[0], model(idx)[0])
    assert loaded.lm_head.weight is loaded.wte.weight


def test_config_validation():
    with pytest.raises(ValueError, match="max_iters"):
        TrainConfig(max_iters=0)
    with pytest.raises(ValueError, match="lr"):
        TrainConfig(lr=1e-3, min_lr=1e-2)


@pytest.mark.e2e
def test_ddp_under_torchrun_keeps_ranks_in_sync(tmp_path):
    """Two CPU processes (gloo) through torchrun: gradients are averaged, so both ranks end identical,
    and only rank 0 reports."""
    import subprocess
    import sys
    from pathlib import Path

    torchrun = Path(sys.executable).parent / "torchrun"
    worker = Path(__file__).parent / "ddp_worker.py"
    res = subprocess.run([str(torchrun), "--standalone", "--nproc_per_node=2", str(worker), str(tmp_path)],
                         capture_output=True, text=True, timeout=300,
                         env={**__import__("os").environ, "OMP_NUM_THREADS": "1"})
    assert res.returncode == 0, res.stderr[-3000:]
    from safetensors.torch import load_file

    a = load_file(str(tmp_path / "rank0.safetensors"))
    b = load_file(str(tmp_path / "rank1.safetensors"))
    assert all(torch.equal(a[k], b[k]) for k in a)
    torch.manual_seed(0)  # the workers' initial weights
    fresh = GPT(GPTConfig(vocab_size=7, block_size=8, n_layer=1, n_head=2, n_embd=16))
    assert not torch.equal(fresh.state_dict()["wte.weight"], a["wte.weight"])  # it did train
    assert (tmp_path / "rank0.metrics").read_text() != "0" and (tmp_path / "rank1.metrics").read_text() == "0"


@pytest.mark.e2e
def test_fsdp2_on_two_gloo_ranks_trains_the_one_process_model_and_resumes(tmp_path):
    """train.strategy fsdp (FSDP2: the GPT's blocks sharded, the rest whole) on 2 CPU ranks under torchrun: the same
    weights as one process with the same config (dropout on: seeded per micro-batch), and a run stopped at step 6
    (its checkpoint gathered to whole tensors) and resumed (sharded again) ends with them too, as does a DDP run
    stopped on 2 ranks and resumed on one process (another N: handled, not refused)."""
    import subprocess
    import sys
    from pathlib import Path

    from safetensors.torch import load_file

    torchrun, worker = Path(sys.executable).parent / "torchrun", Path(__file__).parent / "fsdp_worker.py"
    env = {**__import__("os").environ, "OMP_NUM_THREADS": "1"}

    def run(*args: str, ranks: int = 2) -> None:
        command = ([str(torchrun), "--standalone", f"--nproc_per_node={ranks}"] if ranks > 1 else [sys.executable])
        res = subprocess.run([*command, str(worker), str(tmp_path), *args], capture_output=True, text=True,
                             timeout=300, env=env)
        assert res.returncode == 0, res.stderr[-3000:]

    run("ddp", "one", ranks=1)
    run("fsdp", "sharded")
    run("fsdp", "resumed", "6")
    assert (tmp_path / "resumed.checkpoint.safetensors").is_file()
    run("fsdp", "resumed")
    run("ddp", "moved", "6")  # stopped on 2 ranks, resumed on 1 process: the same micro-batches and dropout follow
    run("ddp", "moved", ranks=1)
    names = ("one", "sharded", "resumed", "moved")
    one, sharded, resumed, moved = (load_file(str(tmp_path / f"{n}.safetensors")) for n in names)
    assert one.keys() == sharded.keys() == resumed.keys() == moved.keys()
    for other in (sharded, resumed, moved):
        assert max(float((one[k] - other[k]).abs().max()) for k in one) < 1e-5
    torch.manual_seed(0)
    fresh = GPT(GPTConfig(vocab_size=7, block_size=8, n_layer=2, n_head=2, n_embd=16))
    assert not torch.equal(fresh.state_dict()["wte.weight"], one["wte.weight"])  # it did train


@pytest.mark.e2e
def test_contrastive_negatives_gathered_across_two_ranks_are_one_batch_of_all_pairs(tmp_path):
    """objective.gather_across_ranks: 2 gloo ranks holding 2 and 4 of 6 pairs, each scored against all 6 partners:
    the ranks' weighted mean loss and the averaged gradients equal one process's in-batch loss over the 6 pairs."""
    import subprocess
    import sys
    from pathlib import Path

    from safetensors.torch import load_file

    from corpusforge.models.objectives.contrastive import in_batch_loss
    from tests.models.gather_worker import batch

    out = tmp_path / "gathered.safetensors"
    res = subprocess.run([str(Path(sys.executable).parent / "torchrun"), "--standalone", "--nproc_per_node=2",
                          str(Path(__file__).parent / "gather_worker.py"), str(out)], capture_output=True, text=True,
                         timeout=300, env={**__import__("os").environ, "OMP_NUM_THREADS": "1"})
    assert res.returncode == 0, res.stderr[-3000:]
    got = load_file(str(out))
    ea, eb = (t.requires_grad_() for t in batch())
    loss = in_batch_loss(ea, eb, 20.0, True)
    loss.backward()
    assert torch.allclose(got["loss"][0], loss.detach(), atol=1e-5)
    assert torch.allclose(got["ga"], ea.grad, atol=1e-5) and torch.allclose(got["gb"], eb.grad, atol=1e-5)
    alone = in_batch_loss(ea[:2].detach(), eb[:2].detach(), 20.0, True)  # rank 0's pairs against its own only
    assert not torch.isclose(alone, loss.detach(), atol=1e-3)


def _flatten_like_cudnn(rnn: torch.nn.Module) -> None:
    """What cuDNN's flatten_parameters does on GPU: every weight becomes a view into one flat buffer."""
    flat = torch.cat([w.detach().flatten() for w in rnn._flat_weights])
    at = 0
    with torch.no_grad():
        for name in rnn._flat_weights_names:
            w = getattr(rnn, name)
            w.data = flat[at:at + w.numel()].view_as(w)
            at += w.numel()
    assert len({getattr(rnn, n).untyped_storage().data_ptr() for n in rnn._flat_weights_names}) == 1


def test_weights_that_share_one_buffer_are_all_kept_and_tied_ones_once(tmp_path):
    """On an H100 the ptb-lstm-medium run trained 39 epochs and then failed to restore its best weights: the
    state dict was deduplicated by storage, and cuDNN keeps a fused LSTM's weights in one buffer, so all but one
    were dropped (keep_best, checkpoints, saved models alike). Tied weights (one tensor, two names) still go once."""
    torch.manual_seed(0)
    lstm = RNNLM(RNNConfig(cell="lstm", vocab_size=11, n_layer=2, n_embd=6, n_hidden=6, block_size=4))
    _flatten_like_cudnn(lstm.rnn)
    kept = unique_state_dict(lstm)
    assert set(kept) == set(lstm.state_dict())
    save_model(lstm, tmp_path / "lstm")
    again = load_model(tmp_path / "lstm")
    for name, tensor in lstm.state_dict().items():
        assert torch.equal(again.state_dict()[name], tensor), name
    gpt = GPT(GPTConfig(vocab_size=7, block_size=8, n_layer=1, n_head=2, n_embd=16, tie_weights=True))
    assert gpt.lm_head.weight is gpt.wte.weight
    assert len(unique_state_dict(gpt)) == len(gpt.state_dict()) - 1


@pytest.mark.gpu
def test_compiled_model_and_loss_train_like_the_eager_ones():
    """compile=True compiles the model and its loss as one graph (the objective's loss module): the loss is fused
    into the head on the GPU; on CPU without dropout the run must follow the eager one."""
    data = pattern_tokens(3000)
    cfg = {**CFG, "grad_accum": 1, "max_iters": 6, "eval_interval": 6}
    results = {}
    for name, compiled in (("eager", False), ("compiled", True)):
        torch.manual_seed(0)
        model = GPT(GPTConfig(vocab_size=7, block_size=8, n_layer=1, n_head=2, n_embd=16, dropout=0.0))
        results[name] = fit(model, data, data[:400], TrainConfig(**cfg, compile=compiled)).best_val_loss
    assert results["eager"] < math.log(7)
    assert results["compiled"] == pytest.approx(results["eager"], rel=1e-4)


def test_compile_smoke_traces_the_model_and_its_loss_as_one_graph(monkeypatch):
    """The compile path on any machine, in seconds: torch.compile with the aot_eager backend traces the model and
    its loss module (dynamo + AOT autograd, the graph inductor would be given) without generating C++ or Triton
    code, which is what makes the full test above take ~100 s on a 2-core CPU; it runs there on a GPU (marked gpu).
    No graph break: the loss is in the one graph, and training follows the eager run."""
    import functools

    import torch._dynamo

    real = torch.compile
    monkeypatch.setattr(torch, "compile", functools.partial(real, backend="aot_eager", fullgraph=True))
    torch._dynamo.reset()
    data = pattern_tokens(3000)
    cfg = {**CFG, "grad_accum": 1, "max_iters": 3, "eval_interval": 3}
    results = {}
    for name, compiled in (("eager", False), ("compiled", True)):
        torch.manual_seed(0)
        model = GPT(GPTConfig(vocab_size=7, block_size=8, n_layer=1, n_head=2, n_embd=16, dropout=0.0))
        results[name] = fit(model, data, data[:400], TrainConfig(**cfg, compile=compiled)).best_val_loss
    assert results["compiled"] == pytest.approx(results["eager"], rel=1e-5)
    torch._dynamo.reset()


def test_noam_schedule_warms_up_then_falls_as_the_inverse_square_root():
    cfg = TrainConfig(max_iters=10_000, lr=1.0, min_lr=0.0, warmup_iters=100, lr_schedule="noam")
    assert learning_rate(0, cfg) == pytest.approx(1 / 101)
    assert learning_rate(99, cfg) == pytest.approx(100 / 101)
    assert learning_rate(399, cfg) == pytest.approx(0.5)  # sqrt(100 / 400)
    assert learning_rate(9999, cfg) == pytest.approx(0.1)
    # Vaswani et al.: lr = d^-0.5 * min(step^-0.5, step * warmup^-1.5); with lr = d^-0.5 * warmup^-0.5 the same
    d, w = 512, 4000
    paper = TrainConfig(max_iters=100_000, lr=d ** -0.5 * w ** -0.5, min_lr=0.0, warmup_iters=w, lr_schedule="noam")
    for step in (4001, 10_000, 50_000):  # after the warmup (ours ends at (w - 1) / w of the peak, the paper's at it)
        assert learning_rate(step - 1, paper) == pytest.approx(d ** -0.5 * min(step ** -0.5, step * w ** -1.5))
    assert learning_rate(w - 1, paper) == pytest.approx(d ** -0.5 * w ** -0.5, rel=1e-3)

