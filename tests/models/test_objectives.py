"""Objectives (corpusforge.models.objectives) and starting from another model's weights (zoo.load_weights)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from corpusforge.models.configs import TrainConfig
from corpusforge.models.encoder.config import EncoderConfig
from corpusforge.models.encoder.model import TransformerEncoder
from corpusforge.models.gpt.config import GPTConfig
from corpusforge.models.gpt.model import GPT
from corpusforge.models.objectives import IGNORE, CausalLM, MaskedLM, TruncatedBPTT
from corpusforge.models.rnn.config import RNNConfig
from corpusforge.models.rnn.model import RNNLM
from corpusforge.models.training import train
from corpusforge.models.zoo import load_weights, objective_for


def masked(mask_prob: float = 0.15) -> MaskedLM:
    return MaskedLM({"train": np.arange(100) % 11}, block=16, vocab_size=12, mask_id=11, mask_prob=mask_prob)


def test_masking_follows_bert_80_10_10():
    objective = masked(0.15)
    x = torch.randint(0, 11, (400, 16), generator=torch.Generator().manual_seed(4))
    inputs, targets = objective.mask(x, torch.Generator().manual_seed(5))
    chosen = targets != IGNORE
    assert torch.equal(targets[chosen], x[chosen])  # targets are the original tokens
    assert torch.equal(inputs[~chosen], x[~chosen])  # nothing else is touched
    assert chosen.any(dim=1).all()
    n = chosen.sum().item()
    assert 0.13 < n / x.numel() < 0.17
    replaced = (inputs == 11) & chosen
    assert 0.76 < replaced.sum().item() / n < 0.84
    kept = (inputs == x) & chosen  # 10% kept, plus random draws that hit the same id (1/12 of 10%)
    assert 0.07 < kept.sum().item() / n < 0.14
    again = objective.mask(x, torch.Generator().manual_seed(5))
    assert torch.equal(again[0], inputs) and torch.equal(again[1], targets)


def test_a_row_with_nothing_chosen_still_gets_one_target():
    x = torch.randint(0, 11, (64, 4), generator=torch.Generator().manual_seed(6))
    _, targets = masked(0.01).mask(x, torch.Generator().manual_seed(7))
    assert ((targets != IGNORE).sum(dim=1) >= 1).all()


def test_a_masked_lm_needs_the_tokenizers_mask_id():
    with pytest.raises(ValueError, match="mask token id"):
        MaskedLM({"train": np.arange(50)}, block=8, vocab_size=12, mask_id=None)


def test_each_family_gets_its_objective_and_the_batches_are_what_the_trainer_expects():
    data = {"train": (np.arange(400) % 7).astype(np.uint16), "valid": (np.arange(100) % 7).astype(np.uint16)}
    gen = torch.Generator().manual_seed(0)
    gpt = GPT(GPTConfig(vocab_size=7, block_size=8, n_layer=1, n_head=2, n_embd=8))
    rnn = RNNLM(RNNConfig(vocab_size=7, block_size=5, n_embd=4, n_hidden=4, n_layer=1))
    enc = TransformerEncoder(EncoderConfig(vocab_size=8, block_size=8, n_layer=1, n_head=2, n_embd=8, mask_id=7))
    for model, kind in ((gpt, CausalLM), (rnn, TruncatedBPTT), (enc, MaskedLM)):
        objective = objective_for(model, data)
        assert type(objective) is kind
        objective.setup(model, batch_size=3)
        batch = objective.batch(0, gen)
        assert batch.tokens == 3 * model.cfg.block_size and len(batch.tensors) == 2
    stream = objective_for(rnn, data)
    stream.setup(rnn, batch_size=3)
    first, second = stream.batch(0, gen), stream.batch(1, gen)
    assert first.fresh and not second.fresh  # a pass starts afresh, then the state flows on
    assert torch.equal(second.tensors[0][:, 0], first.tensors[1][:, -1])  # row b continues row b


def test_init_starts_exactly_where_the_parent_ended_and_reports_a_new_head():
    """init: a child built from the parent's weights has the parent's loss on the same batch at step 0; a
    model with another head gets every backbone weight, and the head's keys are reported (fresh init)."""
    data = {"train": (np.arange(2000) % 7).astype(np.uint16), "valid": (np.arange(300) % 7).astype(np.uint16)}
    torch.manual_seed(0)
    parent = GPT(GPTConfig(vocab_size=7, block_size=8, n_layer=1, n_head=2, n_embd=16))
    train(parent, objective_for(parent, data), TrainConfig(max_iters=20, batch_size=4, warmup_iters=0, lr=1e-2,
                                                          eval_interval=20, eval_iters=2, log_interval=10))
    torch.manual_seed(123)  # another init: only the loaded weights make the two agree
    child = GPT(GPTConfig(vocab_size=7, block_size=8, n_layer=1, n_head=2, n_embd=16))
    report = load_weights(child, parent.state_dict())
    assert report["missing"] == [] and report["unexpected"] == [] and report["mismatched"] == []
    objective = objective_for(parent, data)
    objective.setup(parent, batch_size=4)
    batch = objective.batch(0, torch.Generator().manual_seed(9))
    parent.eval(), child.eval()
    loss = objective.loss_module(parent)(*batch.tensors)[0]
    assert torch.equal(objective.loss_module(child)(*batch.tensors)[0], loss)

    # the same backbone under another head: an untied 5-way output instead of the 7-token one
    torch.manual_seed(1)
    other = GPT(GPTConfig(vocab_size=7, block_size=8, n_layer=1, n_head=2, n_embd=16, tie_weights=False))
    other.lm_head = torch.nn.Linear(16, 5, bias=True)
    other.head_bias_only = torch.nn.Parameter(torch.zeros(5))
    report = load_weights(other, parent.state_dict())
    assert "head_bias_only" in report["missing"] and "lm_head.bias" in report["missing"]
    assert report["mismatched"] == ["lm_head.weight (7, 16) -> (5, 16)"]
    assert torch.equal(other.blocks[0].attn.c_attn.weight, parent.blocks[0].attn.c_attn.weight)
    assert torch.equal(other.wte.weight, parent.wte.weight)
    with pytest.raises(ValueError, match="none of the"):
        load_weights(RNNLM(RNNConfig(vocab_size=3, n_embd=2, n_hidden=2, n_layer=1)), parent.state_dict())


class BagOfEmbeddings(torch.nn.Module):
    """A classifier for the test: mean of the token embeddings under the mask, then a linear layer."""

    def __init__(self, vocab: int, classes: int):
        super().__init__()
        self.emb, self.out = torch.nn.Embedding(vocab, 8), torch.nn.Linear(8, classes)

    def forward(self, ids, mask):
        m = mask.unsqueeze(-1).float()
        return self.out((self.emb(ids) * m).sum(1) / m.sum(1).clamp_min(1.0))


def test_classification_pads_buckets_learns_and_resumes_exactly(tmp_path):
    """Token 1 anywhere in a sequence means class 1: a bag of embeddings learns it; the padding (id 0) never
    changes an answer; a run stopped and resumed ends with the same weights."""
    from corpusforge.models.objectives import Classification

    gen = np.random.default_rng(0)
    seqs = [list(gen.integers(2, 20, gen.integers(3, 15))) for _ in range(400)]
    labels = [int(i % 2) for i in range(400)]
    for s, y in zip(seqs, labels):
        if y:
            s[int(gen.integers(len(s)))] = 1
    splits = {"train": (seqs[:320], labels[:320]), "valid": (seqs[320:], labels[320:])}
    cfg = TrainConfig(max_iters=150, batch_size=16, lr=5e-2, warmup_iters=0, eval_interval=75, eval_iters=0,
                      log_interval=10, keep_best=False, seed=3)

    def fit(**kwargs):
        torch.manual_seed(0)
        model = BagOfEmbeddings(20, 2)
        return model, train(model, Classification(splits, pad_id=0), cfg, **kwargs)

    model, result = fit()
    assert result.metrics["val_accuracy"] >= 0.95 and "val_loss" in result.metrics
    objective = Classification(splits, pad_id=0)
    objective.setup(model, 16)
    batches = [objective.batch(k, torch.Generator()) for k in range(20)]
    batch = next(b for b in batches if not b.tensors[1].all())  # one with padding (buckets keep it rare)
    ids, mask, _ = batch.tensors
    assert batch.tokens == int(mask.sum()) < ids.numel() and (ids[~mask] == 0).all()
    assert sum(int(b.tensors[1].sum()) for b in batches) > 0.8 * sum(b.tensors[1].numel() for b in batches)
    model.eval()
    wider = torch.nn.functional.pad(ids, (0, 5), value=0), torch.nn.functional.pad(mask, (0, 5), value=False)
    assert torch.allclose(model(ids, mask), model(*wider), atol=1e-6)  # padding changes nothing
    ckpt = tmp_path / "c.safetensors"
    fit(checkpoint_path=ckpt, stop_after=97)
    resumed, _ = fit(checkpoint_path=ckpt, resume_from=ckpt)
    for k, v in model.state_dict().items():
        assert torch.equal(v, resumed.state_dict()[k]), k
