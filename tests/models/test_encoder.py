"""The Transformer encoder (corpusforge.models.encoder): bidirectional attention and the masked-LM objective."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from corpusforge.models.encoder import IGNORE, EncoderConfig, TransformerEncoder
from corpusforge.models.gpt import GPT, GPTConfig
from corpusforge.models.sampling import generate
from corpusforge.models.training import TrainConfig, evaluate, train
from corpusforge.models.zoo import load_lm, model_config_dict, save_lm

SCHEMES = ["learned", "sinusoidal", "rope", "alibi"]
SHAPE = dict(vocab_size=11, block_size=16, n_layer=2, n_head=2, n_embd=16)


def tiny(**kw) -> TransformerEncoder:
    torch.manual_seed(0)
    return TransformerEncoder(EncoderConfig(**{**SHAPE, **kw})).eval()


@pytest.mark.parametrize("positional", SCHEMES)
def test_every_position_sees_the_future(positional):
    # the converse of the GPT leakage test: changing a later token must change earlier outputs
    model = tiny(positional=positional)
    idx = torch.randint(0, 11, (2, 12), generator=torch.Generator().manual_seed(1))
    base, _ = model(idx)
    changed = idx.clone()
    changed[:, 11] = (changed[:, 11] + 3) % 11
    logits, _ = model(changed)
    assert not torch.allclose(logits[:, :11], base[:, :11], atol=1e-6)
    assert logits.shape == (2, 12, 11)  # [MASK] is an input id only, never a prediction


@pytest.mark.parametrize("positional", SCHEMES)
def test_sdpa_path_matches_explicit_attention_and_maps_are_full(positional):
    model = tiny(positional=positional)
    idx = torch.randint(0, 12, (3, 10), generator=torch.Generator().manual_seed(2))  # 11 = [MASK] included
    fast, _ = model(idx)
    slow, maps = model(idx, return_attention=True)
    torch.testing.assert_close(fast, slow, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(maps[0].sum(-1), torch.ones(3, 2, 10))
    assert torch.all(maps[0] > 0)  # every key gets weight: no causal triangle


def test_same_weights_causal_vs_bidirectional_differ_only_in_the_mask():
    # one layer, identical weights: a GPT and an encoder agree on the last position (which sees every token in
    # both) and nowhere else (with more layers the last position reads earlier positions' differing states)
    enc = tiny(n_layer=1)
    gpt = GPT(GPTConfig(**{**SHAPE, "n_layer": 1}), extra_tokens=1).eval()
    gpt.load_state_dict(enc.state_dict())
    idx = torch.randint(0, 11, (2, 9), generator=torch.Generator().manual_seed(3))
    a, _ = enc(idx)
    b, _ = gpt(idx)
    torch.testing.assert_close(a[:, -1], b[:, -1], atol=1e-5, rtol=1e-5)
    assert not torch.allclose(a[:, 0], b[:, 0])


def test_mask_batch_follows_bert_80_10_10():
    model = tiny(mask_prob=0.15)
    x = torch.randint(0, 11, (400, 16), generator=torch.Generator().manual_seed(4))
    inputs, targets = model.mask_batch(x, torch.Generator().manual_seed(5))
    chosen = targets != IGNORE
    assert torch.equal(targets[chosen], x[chosen])  # targets are the original tokens
    assert torch.equal(inputs[~chosen], x[~chosen])  # nothing else is touched
    assert chosen.any(dim=1).all()
    n = chosen.sum().item()
    assert 0.13 < n / x.numel() < 0.17
    masked = (inputs == model.mask_id) & chosen
    assert 0.76 < masked.sum().item() / n < 0.84
    kept = (inputs == x) & chosen  # 10% kept, plus random draws that hit the same id (1/11 of 10%)
    assert 0.07 < kept.sum().item() / n < 0.14
    again = model.mask_batch(x, torch.Generator().manual_seed(5))
    assert torch.equal(again[0], inputs) and torch.equal(again[1], targets)


def test_a_row_with_nothing_chosen_still_gets_one_target():
    model = tiny(mask_prob=0.01)
    x = torch.randint(0, 11, (64, 4), generator=torch.Generator().manual_seed(6))
    _, targets = model.mask_batch(x, torch.Generator().manual_seed(7))
    assert ((targets != IGNORE).sum(dim=1) >= 1).all()


def test_trains_on_masked_tokens_resumes_exactly_and_round_trips(tmp_path):
    rng = np.random.default_rng(0)
    data = np.tile(np.arange(7), 600).astype(np.uint16)
    data = np.where(rng.random(len(data)) < 0.05, rng.integers(0, 7, len(data)), data).astype(np.uint16)
    val = np.tile(np.arange(7), 60).astype(np.uint16)
    cfg = TrainConfig(max_iters=200, batch_size=16, lr=1e-2, warmup_iters=5, eval_interval=100, eval_iters=4,
                      log_interval=10, seed=1, keep_best=False)

    def make():
        torch.manual_seed(0)
        return TransformerEncoder(EncoderConfig(vocab_size=7, block_size=8, n_layer=1, n_head=2, n_embd=16,
                                                mask_prob=0.3))

    model = make()
    result = train(model, data, val, cfg)
    assert result.metrics["val_loss"] < 0.5 * math.log(7)  # a periodic sequence is easy to fill in
    assert result.metrics["val_loss"] == pytest.approx(evaluate(model, val, 8, 16, 4))  # deterministic masks

    ckpt = tmp_path / "ckpt.safetensors"
    train(make(), data, val, cfg, checkpoint_path=ckpt, stop_after=117)
    resumed = make()
    train(resumed, data, val, cfg, checkpoint_path=ckpt, resume_from=ckpt)
    for k, v in model.state_dict().items():
        assert torch.equal(v, resumed.state_dict()[k]), k

    save_lm(model, tmp_path / "lm")
    assert model_config_dict(model)["family"] == "encoder"
    loaded = load_lm(tmp_path / "lm")
    assert isinstance(loaded, TransformerEncoder) and loaded.cfg.mask_prob == 0.3
    with pytest.raises(ValueError, match="cannot generate"):
        generate(loaded, [1, 2], 3)


def test_config_validation():
    with pytest.raises(ValueError, match="mask_prob"):
        EncoderConfig(mask_prob=0.0)
    with pytest.raises(ValueError, match="n_head"):
        EncoderConfig(n_embd=10, n_head=3)
