"""The Transformer encoder (corpusforge.models.encoder): bidirectional attention, trained with the masked-LM objective
(corpusforge.models.objectives.MaskedLM, whose masking is tested in test_objectives.py)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from corpusforge.models.configs import TrainConfig
from corpusforge.models.encoder.config import EncoderConfig
from corpusforge.models.encoder.model import TransformerEncoder
from corpusforge.models.gpt.config import GPTConfig
from corpusforge.models.gpt.model import GPT
from corpusforge.models.objectives import MaskedSettings, recorded
from corpusforge.models.training import train
from corpusforge.models.zoo import family_of, load_model, model_config_dict, objective_for, save_model

SCHEMES = ["learned", "sinusoidal", "rope", "alibi"]
SHAPE = dict(vocab_size=11, block_size=16, n_layer=2, n_head=2, n_embd=16, mask_id=10)  # id 10: the [MASK] token


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
    assert logits.shape == (2, 12, 11)  # the tokenizer's vocabulary, [MASK] included: no id past it


@pytest.mark.parametrize("positional", SCHEMES)
def test_sdpa_path_matches_explicit_attention_and_maps_are_full(positional):
    model = tiny(positional=positional)
    idx = torch.randint(0, 11, (3, 10), generator=torch.Generator().manual_seed(2))  # 10 = [MASK] included
    fast, _ = model(idx)
    slow, maps = model(idx, return_attention=True)
    torch.testing.assert_close(fast, slow, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(maps[0].sum(-1), torch.ones(3, 2, 10))
    assert torch.all(maps[0] > 0)  # every key gets weight: no causal triangle


def test_same_weights_causal_vs_bidirectional_differ_only_in_the_mask():
    # one layer, identical weights: a GPT and an encoder agree on the last position (which sees every token in
    # both) and nowhere else (with more layers the last position reads earlier positions' differing states)
    enc = tiny(n_layer=1)
    gpt = GPT(GPTConfig(**{**{k: v for k, v in SHAPE.items() if k != "mask_id"}, "n_layer": 1})).eval()
    gpt.load_state_dict(enc.state_dict())
    idx = torch.randint(0, 11, (2, 9), generator=torch.Generator().manual_seed(3))
    a, _ = enc(idx)
    b, _ = gpt(idx)
    torch.testing.assert_close(a[:, -1], b[:, -1], atol=1e-5, rtol=1e-5)
    assert not torch.allclose(a[:, 0], b[:, 0])


def test_trains_on_masked_tokens_resumes_exactly_and_round_trips(tmp_path):
    rng = np.random.default_rng(0)
    data = np.tile(np.arange(7), 600).astype(np.uint16)
    data = np.where(rng.random(len(data)) < 0.05, rng.integers(0, 7, len(data)), data).astype(np.uint16)
    val = np.tile(np.arange(7), 60).astype(np.uint16)
    cfg = TrainConfig(max_iters=200, batch_size=16, lr=1e-2, warmup_iters=5, eval_interval=100, eval_iters=4,
                      log_interval=10, seed=1, keep_best=False)

    def make():
        torch.manual_seed(0)
        return TransformerEncoder(EncoderConfig(vocab_size=8, block_size=8, n_layer=1, n_head=2, n_embd=16,
                                                mask_id=7))

    settings = MaskedSettings(kind="masked_lm", mask_prob=0.3)

    def fit(model, **kwargs):
        return train(model, objective_for(model, {"train": data, "valid": val}, settings), cfg, **kwargs)

    model = make()
    result = fit(model)
    assert result.metrics["val_loss"] < 0.5 * math.log(7)  # a periodic sequence is easy to fill in
    again = objective_for(model, {"train": data, "valid": val}, settings).evaluate(model, "valid", 16, 4)["loss"]
    assert result.metrics["val_loss"] == pytest.approx(again)  # deterministic masks

    ckpt = tmp_path / "ckpt.safetensors"
    fit(make(), checkpoint_path=ckpt, stop_after=117)
    resumed = make()
    fit(resumed, checkpoint_path=ckpt, resume_from=ckpt)
    for k, v in model.state_dict().items():
        assert torch.equal(v, resumed.state_dict()[k]), k

    save_model(model, tmp_path / "lm")
    assert model_config_dict(model)["family"] == "encoder"
    loaded = load_model(tmp_path / "lm")
    assert isinstance(loaded, TransformerEncoder) and loaded.cfg.mask_id == 7
    # a model saved before objectives were configuration had mask_prob in its model config: it still loads, and
    # what it was trained with is read from there
    saved = json.loads((tmp_path / "lm" / "config.json").read_text())
    saved["model"]["mask_prob"] = 0.3
    (tmp_path / "lm" / "config.json").write_text(json.dumps(saved))
    assert load_model(tmp_path / "lm").cfg == loaded.cfg
    assert recorded(family_of(loaded), saved) == settings
    assert recorded(family_of(loaded), {**saved, "objective": {"kind": "masked_lm", "mask_prob": 0.2}}).mask_prob == 0.2
    assert not family_of(loaded).can("generate") and family_of(loaded).can("fill_mask")


def test_config_validation():
    with pytest.raises(ValueError, match="mask_prob"):
        MaskedSettings(mask_prob=0.0)
    with pytest.raises(ValueError, match="n_head"):
        EncoderConfig(n_embd=10, n_head=3)
    with pytest.raises(ValueError, match="mask_id"):
        EncoderConfig(vocab_size=5, mask_id=5)
    with pytest.raises(ValueError, match="mask token"):
        TransformerEncoder(EncoderConfig(vocab_size=5))  # no mask id: the tokenizer has no mask role
