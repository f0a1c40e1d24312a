"""Issue 45, item 3: a step's loss is the mean over all its terms (target tokens; examples for a per-example loss),
however they fall into micro-batches. With padded, length-bucketed batches, ``grad_accum=2`` over a micro-batch of
short examples and one of long ones must give the same update as one batch holding all of them, for seq2seq, SFT and
classification; the old arithmetic (each micro-batch's mean weighed the same, ``Batch.terms`` None) must not.

One SGD step at learning rate 1 with no clipping, decay or momentum: the change in the weights is the gradient."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from corpusforge.models.configs import TrainConfig
from corpusforge.models.training import micro_weights, train


class Picked:
    """A batcher that gives the index groups it is told (micro-batch i is ``groups[i]``)."""

    def __init__(self, groups):
        self.groups = groups

    def get(self, index):
        return self.groups[index], False


def with_groups(objective, groups, old: bool = False):
    """``objective`` with its training batches made of the given example groups (by its own batch()); ``old``: the
    batches declare no terms, so each micro-batch weighs the same (the arithmetic before issue 45)."""
    setup, batch = objective.setup, objective.batch

    def picked_setup(model, batch_size, rank=0, world=1):
        setup(model, batch_size, rank, world)
        objective.batches = Picked(groups)

    def stripped(index, gen):
        b = batch(index, gen)
        return dataclasses.replace(b, terms=None) if old else b

    objective.setup, objective.batch = picked_setup, stripped
    return objective


def gradient(make_model, make_objective, groups, old: bool = False) -> dict[str, torch.Tensor]:
    torch.manual_seed(0)
    model = make_model()
    before = {k: v.detach().clone() for k, v in model.named_parameters()}
    cfg = TrainConfig(max_iters=1, batch_size=4, grad_accum=len(groups), optimizer="sgd", lr=1.0, min_lr=1.0,
                      lr_schedule="constant", warmup_iters=0, weight_decay=0.0, grad_clip=0.0, eval_interval=1,
                      eval_iters=1, log_interval=1, keep_best=False, device="cpu", cpu_threads=1)
    train(model, with_groups(make_objective(), groups, old), cfg)
    return {k: before[k] - v.detach() for k, v in model.named_parameters()}


def close(a: dict, b: dict) -> bool:
    return all(torch.allclose(a[k], b[k], rtol=1e-4, atol=1e-6) for k in a)


def check(make_model, make_objective, whole, split):
    one = gradient(make_model, make_objective, [whole])
    accumulated = gradient(make_model, make_objective, split)
    assert any(v.abs().max() > 1e-4 for v in one.values())  # the step did move the weights
    assert close(one, accumulated), max(float((one[k] - accumulated[k]).abs().max()) for k in one)
    assert not close(one, gradient(make_model, make_objective, split, old=True))  # the test can tell the two apart


class BagOfEmbeddings(torch.nn.Module):
    """Mean of the unpadded tokens' embeddings -> class logits: padding changes nothing."""

    def __init__(self, vocab: int = 20, classes: int = 2):
        super().__init__()
        self.emb, self.out = torch.nn.Embedding(vocab, 8), torch.nn.Linear(8, classes)

    def forward(self, ids, mask):
        m = mask.unsqueeze(-1).float()
        return self.out((self.emb(ids) * m).sum(1) / m.sum(1).clamp_min(1.0))


def test_classification_averages_over_the_steps_examples():
    from corpusforge.models.objectives import Classification

    seqs = [[3, 4], [5, 6, 7, 8, 9, 10, 11], [12, 13, 14, 15, 16, 17], [2, 18, 19, 5, 6]]
    labels = [0, 1, 1, 0]
    splits = {"train": (seqs, labels), "valid": (seqs, labels)}
    # one example, then three: each micro-batch's mean weighed the same would count the first three times over
    check(BagOfEmbeddings, lambda: Classification(splits, pad_id=0), [0, 1, 2, 3], [[0], [1, 2, 3]])


def test_seq2seq_averages_over_the_steps_target_tokens():
    from corpusforge.models.objectives.seq2seq import seq2seq
    from corpusforge.models.transformer.model import Transformer
    from tests.models.seq2seq_fixtures import transformer_config

    sources = [[3, 4, 5], [6, 7, 8], [3, 4, 5, 6, 7, 8, 9, 10], [10, 9, 8, 7, 6, 5, 4, 3]]
    targets = [[5], [8, 7], [10, 9, 8, 7, 6, 5, 4, 3], [3, 4, 5, 6, 7, 8, 9, 10, 11, 12]]
    splits = {"train": (sources, targets), "valid": (sources, targets)}
    cfg = transformer_config(d_model=16, n_head=2, n_enc_layer=1, n_dec_layer=1, d_ff=32)
    # 2 + 3 target tokens (with eos) in the first micro-batch, 9 + 11 in the second
    check(lambda: Transformer(cfg), lambda: seq2seq(cfg, splits), [0, 1, 2, 3], [[0, 1], [2, 3]])


PAIRS = [([5, 6], [7]), ([8, 9, 10], [11]), ([12], [13, 14, 15, 16, 17, 18, 19]), ([20, 21], [22, 23, 24, 25, 26])]


def make_gpt():
    from corpusforge.models.gpt.config import GPTConfig
    from corpusforge.models.gpt.model import GPT

    return GPT(GPTConfig(vocab_size=30, block_size=16, n_layer=1, n_head=2, n_embd=16, dropout=0.0))


def sft():
    from corpusforge.models.objectives import SFT

    return SFT({"train": PAIRS, "valid": PAIRS}, pad_id=0, block_size=16, pack=False)


def one_step(make_model, groups, old: bool = False) -> dict[str, torch.Tensor]:
    """The weights after one SGD step of SFT on ``groups`` (for ddp_tokens_worker.py, one rank's share)."""
    built = []
    gradient(lambda: built.append(make_model()) or built[0], sft, groups, old)
    return {k: v.detach() for k, v in built[0].named_parameters()}


def test_sft_averages_over_the_steps_response_tokens():
    # 1 + 1 response tokens in the first micro-batch, 7 + 5 in the second
    check(make_gpt, sft, [0, 1, 2, 3], [[0, 1], [2, 3]])


@pytest.mark.e2e
def test_two_gloo_ranks_equal_one_rank_with_twice_the_accumulation(tmp_path):
    """torchrun, 2 CPU processes: the step's two micro-batches (short examples, then long ones) split over the ranks,
    rank 0 running the first and rank 1 the second; the step's mean is over the response tokens of both ranks, as
    one process accumulating both micro-batches."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    from safetensors.torch import load_file

    torchrun, worker = Path(sys.executable).parent / "torchrun", Path(__file__).parent / "ddp_tokens_worker.py"
    ranks = {}
    for name, extra in (("new", []), ("old", ["old"])):
        out = tmp_path / f"{name}.safetensors"
        res = subprocess.run([str(torchrun), "--standalone", "--nproc_per_node=2", str(worker), str(out), *extra],
                             capture_output=True, text=True, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"})
        assert res.returncode == 0, res.stderr[-3000:]
        ranks[name] = load_file(str(out))
    single = one_step(make_gpt, [[0, 1], [2, 3]])
    assert close(single, ranks["new"])
    assert not close(single, ranks["old"])  # each rank's mean weighed the same: not the step's mean


def test_the_weights():
    assert micro_weights([10, 30]) == [0.5, 1.5]  # with the trainer's / 2: 10/40 and 30/40
    assert micro_weights([64, 64, 64]) == [1.0, 1.0, 1.0]  # fixed windows: exactly as before
    assert micro_weights([5, None]) == [1.0, 1.0] and micro_weights([0, 0]) == [1.0, 1.0]
