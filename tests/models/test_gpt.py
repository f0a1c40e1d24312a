"""GPT decoder: no causal leakage for any positional scheme, SDPA agrees with the readable path,
and the positional schemes have the properties that define them."""

from __future__ import annotations


import pytest
import torch

from corpusforge.models.gpt.config import GPTConfig
from corpusforge.models.gpt.model import GPT, alibi_slopes, apply_rope, rope_tables

SCHEMES = ["learned", "sinusoidal", "rope", "alibi"]


def tiny(**kw) -> GPT:
    torch.manual_seed(0)
    cfg = dict(vocab_size=11, block_size=16, n_layer=2, n_head=2, n_embd=16, dropout=0.0)
    cfg.update(kw)
    return GPT(GPTConfig(**cfg)).eval()


@pytest.mark.parametrize("norm", ["pre", "post"])
@pytest.mark.parametrize("positional", SCHEMES)
def test_changing_a_future_token_never_changes_earlier_logits(positional, norm):
    model = tiny(positional=positional, norm=norm)
    idx = torch.randint(0, 11, (2, 12), generator=torch.Generator().manual_seed(1))
    base, _ = model(idx)
    for t in (0, 5, 11):
        changed = idx.clone()
        changed[:, t] = (changed[:, t] + 3) % 11
        logits, _ = model(changed)
        assert torch.equal(logits[:, :t], base[:, :t]), f"position {t} leaked into earlier logits"
        assert not torch.allclose(logits[:, t:], base[:, t:])  # and it does change its own and later ones


@pytest.mark.parametrize("positional", SCHEMES)
def test_sdpa_path_matches_explicit_attention(positional):
    model = tiny(positional=positional)
    idx = torch.randint(0, 11, (3, 10), generator=torch.Generator().manual_seed(2))
    fast, _ = model(idx)
    slow, maps = model(idx, return_attention=True)
    torch.testing.assert_close(fast, slow, atol=1e-5, rtol=1e-5)
    assert len(maps) == 2 and maps[0].shape == (3, 2, 10, 10)
    torch.testing.assert_close(maps[1].sum(-1), torch.ones(3, 2, 10))
    assert torch.all(maps[0].triu(1) == 0)


def test_every_scheme_makes_word_order_matter():
    # one layer, no positions: the last token's attention over {a, b, c} is a weighted set sum, so
    # swapping the first two tokens cannot change its logits; each positional scheme breaks that symmetry
    for positional in SCHEMES:
        model = tiny(positional=positional, n_layer=1)
        a, _ = model(torch.tensor([[1, 2, 7]]))
        b, _ = model(torch.tensor([[2, 1, 7]]))
        assert not torch.allclose(a[0, -1], b[0, -1], atol=1e-6), positional


def test_alibi_slopes_follow_press_et_al():
    assert alibi_slopes(8).tolist() == pytest.approx([2 ** -(i + 1) for i in range(8)])
    assert alibi_slopes(4).tolist() == pytest.approx([2 ** -(2 * (i + 1)) for i in range(4)])
    assert len(alibi_slopes(6)) == 6


def test_rope_scores_depend_only_on_relative_offset():
    torch.manual_seed(3)
    cos, sin = rope_tables(32, 8, 10000.0)
    q, k = torch.randn(8, dtype=torch.float64), torch.randn(8, dtype=torch.float64)

    def at(v, pos):
        x = v.view(1, 1, 1, 8).expand(1, 1, 32, 8)
        return apply_rope(x, cos.double(), sin.double())[0, 0, pos]

    s1 = at(q, 7) @ at(k, 3)
    s2 = at(q, 20) @ at(k, 16)
    assert s1.item() == pytest.approx(s2.item(), abs=1e-6)  # tables are float32
    assert at(q, 5).norm().item() == pytest.approx(q.norm().item(), abs=1e-6)  # a rotation keeps length


def test_weight_tying_and_options():
    model = tiny(tie_weights=True)
    assert model.lm_head.weight is model.wte.weight
    untied = tiny(tie_weights=False)
    assert untied.lm_head.weight is not untied.wte.weight
    relu = tiny(activation="relu")
    assert isinstance(relu.blocks[0].mlp.act, torch.nn.ReLU)
    assert isinstance(tiny(norm="post").ln_f, torch.nn.Identity)


@pytest.mark.parametrize("positional", ["learned", "rope"])
def test_flops_per_token_is_what_torch_counts_for_a_training_step(positional):
    """MFU's numerator, measured rather than restated: torch's FlopCounterMode counts the matmuls of one forward
    and backward pass (the explicit attention path, whose score and value matmuls it can see; it does not count
    the fused SDPA kernel on CPU). PaLM's 6N + 12·L·C·T counts every parameter but the position table, so it
    differs from the count by exactly the LayerNorm gains, which are no matmul (6 FLOPs each per token)."""
    from torch.utils.flop_counter import FlopCounterMode

    model = tiny(vocab_size=50, positional=positional).train()
    x = torch.randint(0, 50, (3, 16), generator=torch.Generator().manual_seed(0))
    with FlopCounterMode(display=False) as counter:
        logits, _ = model(x, return_attention=True)
        logits.sum().backward()
    norms = sum(p.numel() for name, p in model.named_parameters() if ".ln_" in name or name.startswith("ln_f"))
    assert counter.get_total_flops() / x.numel() == model.flops_per_token(16) - 6 * norms


def test_config_validation():
    with pytest.raises(ValueError, match="n_head"):
        GPTConfig(n_embd=10, n_head=3)
    with pytest.raises(ValueError, match="dropout"):
        GPTConfig(dropout=1.5)
    with pytest.raises(ValueError, match="block_size"):
        tiny()(torch.zeros(1, 17, dtype=torch.long))
