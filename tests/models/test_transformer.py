"""The encoder-decoder Transformer (corpusforge.models.transformer): learning, masks, the KV cache, attention maps."""

from __future__ import annotations

import pytest
import torch

from corpusforge.models import decoding
from corpusforge.models.transformer.config import TransformerConfig
from corpusforge.models.transformer.model import Transformer
from tests.models.seq2seq_fixtures import (
    BOS,
    EOS,
    IDS,
    PAD,
    exact_match,
    held_out_batch,
    trained_transformer,
    transformer_config,
)

VARIANTS = [{"norm": n, "positional": p} for n in ("post", "pre") for p in ("sinusoidal", "learned")]


def small(**kw) -> Transformer:
    torch.manual_seed(0)
    return Transformer(transformer_config(**{"d_model": 16, "n_head": 2, "d_ff": 32, **kw})).eval()


def padded_batch(gen: torch.Generator) -> tuple[torch.Tensor, ...]:
    """Sources of lengths 7, 4 and 1 (padded to 7); targets of 6 tokens, the last row padded after 3."""
    src = torch.randint(3, 13, (3, 7), generator=gen)
    src_mask = torch.arange(7)[None, :] < torch.tensor([[7], [4], [1]])
    src[~src_mask] = PAD
    tgt_in = torch.cat([torch.full((3, 1), BOS), torch.randint(3, 13, (3, 5), generator=gen)], dim=1)
    tgt_mask = torch.arange(6)[None, :] < torch.tensor([[6], [6], [3]])
    tgt_in[~tgt_mask] = PAD
    return src, src_mask, tgt_in, tgt_mask


@pytest.mark.learns
def test_the_transformer_learns_to_reverse_digits():
    """Trained through models.training.train with the Seq2Seq objective: >= 95% of held-out sequences reversed
    exactly by greedy decoding."""
    src, src_mask, references = held_out_batch()
    assert exact_match(decoding.greedy(trained_transformer(), src, src_mask, BOS, EOS), references) >= 0.95


@pytest.mark.learns
def test_the_kv_cache_gives_the_tokens_and_logits_of_recomputing_the_prefix():
    """A cached step computes one position; the uncached one recomputes the whole prefix: same logits (1e-5),
    same greedy tokens, and the cache grows by one position per step."""
    model = trained_transformer()
    src, src_mask, _ = held_out_batch(32)
    cached = decoding.greedy(model, src, src_mask, BOS, EOS)
    assert decoding.greedy(model, src, src_mask, BOS, EOS, use_cache=False) == cached
    with torch.no_grad():
        memory, cache = model.encode(src, src_mask), None
        prefix = torch.full((32, 1), BOS)
        for t in range(8):
            step, cache, _ = model.decode_step(memory, src_mask, prefix, cache)
            whole, _, _ = model.decode_step(memory, src_mask, prefix, None)
            assert (step - whole).abs().max() < 1e-5
            assert cache[0][0].shape == (32, 2, t + 1, 32) and cache[0][2].shape == (32, 2, src.shape[1], 32)
            prefix = torch.cat([prefix, step.argmax(-1, keepdim=True)], dim=1)


@pytest.mark.parametrize("variant", VARIANTS)
def test_cached_steps_match_the_teacher_forced_pass(variant):
    model = small(**variant)
    src, src_mask, tgt_in, tgt_mask = padded_batch(torch.Generator().manual_seed(1))
    with torch.no_grad():
        logits = model(src, src_mask, tgt_in, tgt_mask)
        memory, cache = model.encode(src, src_mask), None
        for t in range(tgt_in.shape[1]):
            step, cache, _ = model.decode_step(memory, src_mask, tgt_in[:, : t + 1], cache)
            torch.testing.assert_close(step, logits[:, t], atol=1e-5, rtol=0)


@pytest.mark.parametrize("variant", VARIANTS)
def test_padding_is_invisible(variant):
    """Encoder self-attention and cross-attention are masked: changing a padded source id, or padding further,
    changes no logit; and target position t never sees later positions (the causal mask)."""
    model = small(**variant)
    src, src_mask, tgt_in, tgt_mask = padded_batch(torch.Generator().manual_seed(2))
    with torch.no_grad():
        logits = model(src, src_mask, tgt_in, tgt_mask)
        changed = src.clone()
        changed[~src_mask] = 11
        assert torch.equal(model(changed, src_mask, tgt_in, tgt_mask), logits)
        wider = torch.nn.functional.pad(src, (0, 3), value=PAD), torch.nn.functional.pad(src_mask, (0, 3), value=False)
        torch.testing.assert_close(model(*wider, tgt_in, tgt_mask), logits, atol=1e-5, rtol=0)
        assert not torch.allclose(model(changed, torch.ones_like(src_mask), tgt_in, tgt_mask)[1:], logits[1:], atol=1e-4)
        later = tgt_in.clone()
        later[:, 4:] = 12
        torch.testing.assert_close(model(src, src_mask, later, tgt_mask)[:, :4], logits[:, :4], atol=1e-6, rtol=0)


def test_cross_attention_maps_are_distributions_over_the_real_source(tmp_path):
    """Per decoder layer (B, heads, T_tgt, T_src); rows sum to 1, zero on padding; the explicit path gives the
    fast path's logits; one heatmap panel per head."""
    model = small(n_dec_layer=2)
    src, src_mask, tgt_in, tgt_mask = padded_batch(torch.Generator().manual_seed(3))
    with torch.no_grad():
        logits, maps = model(src, src_mask, tgt_in, tgt_mask, return_attention=True)
        torch.testing.assert_close(logits, model(src, src_mask, tgt_in, tgt_mask), atol=1e-5, rtol=0)
    assert len(maps) == 2
    for weights in maps:
        assert weights.shape == (3, 2, 6, 7)
        torch.testing.assert_close(weights.sum(-1), torch.ones(3, 2, 6))
        assert (weights.masked_select(~src_mask[:, None, None, :].expand_as(weights)) == 0).all()
    tokens, steps = decoding.greedy(model, src, src_mask, BOS, EOS, max_len=5, return_attention=True)
    assert steps[1].shape[1:] == (2, 4)  # (steps, heads, the 4 real source tokens)
    path = decoding.plot_alignment(maps[-1][0], [str(i) for i in src[0].tolist()], [str(i) for i in tgt_in[0].tolist()],
                                   tmp_path / "cross.png")
    assert path.read_bytes()[:4] == b"\x89PNG"
    with pytest.raises(ValueError, match="source tokens"):
        decoding.plot_alignment(maps[-1][0], ["a"], [str(i) for i in tgt_in[0].tolist()], tmp_path / "x.png")


def test_embeddings_are_shared_and_tied_as_configured():
    shared = small()
    assert shared.tgt_embed is shared.src_embed and shared.head.weight is shared.tgt_embed.weight
    separate = small(share_embeddings=False, tie_output=False)
    assert separate.tgt_embed is not separate.src_embed and separate.head.weight is not separate.tgt_embed.weight
    n = sum(p.numel() for p in shared.parameters())
    assert sum(p.numel() for p in separate.parameters()) == n + 2 * 13 * 16
    assert not any(isinstance(m, torch.nn.LayerNorm) for m in (shared.enc_norm, shared.dec_norm))  # post-LN
    assert all(isinstance(m, torch.nn.LayerNorm) for m in (small(norm="pre").enc_norm, small(norm="pre").dec_norm))


def test_an_empty_source_and_a_too_long_sequence():
    model = small()
    src, src_mask = torch.full((1, 1), PAD), torch.zeros(1, 1, dtype=torch.bool)
    logits = model(src, src_mask, torch.full((1, 1), BOS), torch.ones(1, 1, dtype=torch.bool))
    assert torch.isfinite(logits).all()
    with pytest.raises(ValueError, match="max_len 16"):
        model(torch.full((1, 17), 5), torch.ones(1, 17, dtype=torch.bool), torch.full((1, 1), BOS), None)


def test_config_checks():
    with pytest.raises(ValueError, match="n_head"):
        TransformerConfig(**IDS, d_model=10, n_head=3)
    with pytest.raises(ValueError, match="pad_id"):
        TransformerConfig(**{**IDS, "pad_id": -1})
    from corpusforge.models.family import family
    from corpusforge.models.objectives import default_settings

    assert TransformerConfig().norm == "post"
    # the paper's label smoothing is the family's default objective setting (the seq2seq kind's own default is 0)
    assert default_settings(family("transformer")).label_smoothing == 0.1
    assert default_settings(family("seq2seq")).label_smoothing == 0.0


def test_a_four_head_heatmap_lays_out_panels_big_enough_to_read(tmp_path):
    """Issue 50, item 12: four heads in one row shrank each panel to a quarter of the report's width. Two panels a
    row (a 2 x 2 grid for four heads) and ~0.4 in per token at 100 dpi."""
    from PIL import Image

    weights = torch.softmax(torch.randn(4, 6, 9), -1)
    path = decoding.plot_alignment(weights, [f"s{i}" for i in range(9)], [f"t{i}" for i in range(6)],
                                   tmp_path / "heads.png")
    width, height = Image.open(path).size
    assert width / 2 >= 400 and height / 2 >= 300, (width, height)
