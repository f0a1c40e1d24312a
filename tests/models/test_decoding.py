"""Greedy and beam search (corpusforge.models.decoding) for both encoder-decoder families: beam 1 is greedy, a
beam wide enough to keep every hypothesis finds the exact best translation (checked by enumerating them all and
scoring each with a teacher-forced pass), and a batch decodes as its sentences do one by one."""

from __future__ import annotations

import itertools

import pytest
import torch

from corpusforge.models import decoding
from corpusforge.models.batching import pad
from corpusforge.models.seq2seq.model import RNNSeq2Seq
from corpusforge.models.transformer.model import Transformer
from tests.models.seq2seq_fixtures import (
    BOS,
    EOS,
    PAD,
    held_out_batch,
    rnn_config,
    trained_rnn,
    trained_transformer,
    transformer_config,
)

TINY = {"vocab_size": 5}  # pad, bos, eos and two tokens: few enough hypotheses to enumerate them all


def untrained(kind: str, **overrides) -> torch.nn.Module:
    torch.manual_seed(3)
    if kind == "transformer":
        return Transformer(transformer_config(dropout=0.0, **overrides)).eval()
    return RNNSeq2Seq(rnn_config(attention=kind, n_embd=16, n_hidden=16, **overrides)).eval()


def sources(vocab: int = 13) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(5)
    rows = [torch.randint(3, vocab, (n,), generator=gen).tolist() for n in (6, 3, 1, 5)]
    return pad(rows, PAD)


@pytest.mark.parametrize("kind", ["transformer", "bahdanau", "luong-general", "none"])
def test_beam_one_is_greedy_on_untrained_models(kind):
    """Random weights give varied outputs that run to max_len or stop early: beam 1 must pick greedy's tokens."""
    model = untrained(kind)
    src, mask = sources()
    assert decoding.beam_search(model, src, mask, BOS, EOS, beam=1, max_len=12) == \
        decoding.greedy(model, src, mask, BOS, EOS, max_len=12)


@pytest.mark.parametrize("which", ["transformer", "rnn"])
@pytest.mark.learns
def test_beam_one_is_greedy_on_the_trained_models(which):
    model = trained_transformer() if which == "transformer" else trained_rnn()
    src, mask, _ = held_out_batch(60)
    assert decoding.beam_search(model, src, mask, BOS, EOS, beam=1) == decoding.greedy(model, src, mask, BOS, EOS)


def every_hypothesis(max_len: int, vocab: int) -> tuple[list[list[int]], list[bool]]:
    """Every output beam search can return with ``max_len`` steps: up to max_len - 1 non-eos tokens then the eos
    (ended), or max_len non-eos tokens cut there (not ended)."""
    tokens = [t for t in range(vocab) if t != EOS]
    hyps, ended = [], []
    for n in range(max_len):
        for seq in itertools.product(tokens, repeat=n):
            hyps.append(list(seq))
            ended.append(True)
    for seq in itertools.product(tokens, repeat=max_len):
        hyps.append(list(seq))
        ended.append(False)
    return hyps, ended


@pytest.mark.parametrize("kind", ["transformer", "bahdanau"])
@pytest.mark.parametrize("alpha", [0.0, 0.6, 2.0])
def test_a_beam_that_keeps_everything_finds_the_exact_best(kind, alpha):
    """With 4 non-eos tokens and 3 steps there are 85 outputs; a beam of 100 drops none, so its answer must be the
    argmax of log P(y|x) / lp(y) over all of them (each scored by a separate teacher-forced pass). A larger alpha
    (GNMT's length penalty) must not give shorter outputs."""
    model = untrained(kind, **TINY)
    src, mask = sources(vocab=5)
    max_len = 3
    hyps, ended = every_hypothesis(max_len, 5)
    found = decoding.beam_search(model, src, mask, BOS, EOS, beam=100, max_len=max_len, length_penalty=alpha)
    for row in range(src.shape[0]):
        one, one_mask = src[row: row + 1].expand(len(hyps), -1), mask[row: row + 1].expand(len(hyps), -1)
        scores = decoding.score(model, one, one_mask, hyps, BOS, EOS, alpha, ended)
        best = max(range(len(hyps)), key=lambda i: scores[i])
        assert found[row] == hyps[best], (row, scores[best])


def test_a_larger_length_penalty_gives_outputs_at_least_as_long():
    model = untrained("transformer", **TINY)
    src, mask = sources(vocab=5)
    lengths = [sum(map(len, decoding.beam_search(model, src, mask, BOS, EOS, beam=8, max_len=6, length_penalty=a)))
               for a in (0.0, 1.0, 3.0)]
    assert lengths == sorted(lengths)


@pytest.mark.parametrize("kind", ["transformer", "luong-dot"])
def test_a_batch_decodes_as_its_sentences_one_by_one(kind):
    """Padding a sentence into a batch changes none of its tokens (greedy and beam), nor its attention map."""
    model = untrained(kind)
    src, mask = sources()
    batch_beam = decoding.beam_search(model, src, mask, BOS, EOS, beam=3, max_len=10)
    batch_greedy, maps = decoding.greedy(model, src, mask, BOS, EOS, max_len=10, return_attention=True)
    for row in range(src.shape[0]):
        n = int(mask[row].sum())
        one, one_mask = src[row: row + 1, :n], mask[row: row + 1, :n]
        assert decoding.beam_search(model, one, one_mask, BOS, EOS, beam=3, max_len=10) == [batch_beam[row]]
        alone, alone_maps = decoding.greedy(model, one, one_mask, BOS, EOS, max_len=10, return_attention=True)
        assert alone == [batch_greedy[row]]
        assert maps[row].shape == alone_maps[0].shape
        torch.testing.assert_close(maps[row], alone_maps[0], atol=1e-5, rtol=1e-4)


@pytest.mark.learns
def test_beam_search_on_the_trained_transformer_is_at_least_as_likely_as_greedy():
    """On the reversal task the model is sure of itself: beam 4's outputs score no worse than greedy's under the
    model (summed over the batch, the quantity beam search maximises per sentence)."""
    model = trained_transformer()
    src, mask, references = held_out_batch(40)
    greedy_out = decoding.greedy(model, src, mask, BOS, EOS)
    beam_out = decoding.beam_search(model, src, mask, BOS, EOS, beam=4, length_penalty=0.0)
    greedy_scores = decoding.score(model, src, mask, greedy_out, BOS, EOS)
    beam_scores = decoding.score(model, src, mask, beam_out, BOS, EOS)
    assert sum(beam_scores) >= sum(greedy_scores) - 1e-4
    assert sum(b == r for b, r in zip(beam_out, references)) >= 0.95 * len(references)


def test_bad_beam_sizes_are_refused():
    model = untrained("transformer")
    src, mask = sources()
    with pytest.raises(ValueError, match="beam: must be >= 1"):
        decoding.beam_search(model, src, mask, BOS, EOS, beam=0)


def test_the_transformer_reorders_its_self_attention_cache_and_keeps_the_cross_attention_one():
    """Issue 51 item 3: beam search moves rows only among one source's beams, whose cross-attention keys and values
    are equal, so the reorder keeps those tensors as they are (no copy) and moves the self-attention ones."""
    model = untrained("transformer")
    src, src_mask = sources()
    K = 3
    memory = model.encode(src, src_mask).repeat_interleave(K, dim=0)
    mask = src_mask.repeat_interleave(K, dim=0)
    prev = torch.randint(3, 13, (src.shape[0] * K, 2))
    _, cache, _ = model.decode_step(memory, mask, prev, None)
    index = torch.arange(src.shape[0] * K).view(-1, K).flip(1).reshape(-1)  # each source's beams in reverse
    moved = model.reorder_cache(cache, index)
    for (k, v, ck, cv), (k2, v2, ck2, cv2) in zip(cache, moved, strict=True):
        assert ck2 is ck and cv2 is cv
        assert torch.equal(k2, k[index]) and torch.equal(v2, v[index])
        assert torch.equal(ck2, ck[index]) and torch.equal(cv2, cv[index])  # what a copy would have held


def ngrams(tokens: list[int], n: int) -> list[tuple[int, ...]]:
    return [tuple(tokens[i:i + n]) for i in range(len(tokens) - n + 1)]


class EosEager(torch.nn.Module):
    """A real model whose eos logit is raised by ``boost``: it ends early, so a minimum length has work to do."""

    def __init__(self, inner: torch.nn.Module, boost: float):
        super().__init__()
        self.inner, self.boost, self.cfg = inner, boost, inner.cfg

    def encode(self, src, src_mask):
        return self.inner.encode(src, src_mask)

    def decode_step(self, *args):
        logits, cache, attention = self.inner.decode_step(*args)
        logits = logits.clone()
        logits[:, EOS] += self.boost
        return logits, cache, attention

    def reorder_cache(self, cache, index):
        return self.inner.reorder_cache(cache, index)


@pytest.mark.parametrize("kind", ["transformer", "bahdanau"])
def test_no_repeated_ngram_and_a_minimum_length(kind):
    """Issue 47 item 1: ``no_repeat_ngram_size`` n leaves no n-gram twice in an output, ``min_len`` no output shorter
    (eos is held back), in greedy and beam search alike; beam 1 is still greedy with both options."""
    model = untrained(kind)
    src, src_mask = sources()
    L = 15
    plain = decoding.greedy(model, src, src_mask, BOS, EOS, max_len=L)
    repeats = [len(ngrams(t, 2)) - len(set(ngrams(t, 2))) for t in plain]
    assert sum(repeats) > 0  # this untrained model repeats itself: the option has something to remove
    for n in (1, 2, 3):
        for decode in (lambda **kw: decoding.greedy(model, src, src_mask, BOS, EOS, max_len=L, **kw),
                       lambda **kw: decoding.beam_search(model, src, src_mask, BOS, EOS, beam=3, max_len=L, **kw)):
            for tokens in decode(no_repeat_ngram_size=n):
                assert len(set(ngrams(tokens, n))) == len(ngrams(tokens, n)), (n, tokens)
    eager = EosEager(model, boost=8.0)
    wanted = 5
    for decode in (lambda **kw: decoding.greedy(eager, src, src_mask, BOS, EOS, max_len=L, **kw),
                   lambda **kw: decoding.beam_search(eager, src, src_mask, BOS, EOS, beam=3, max_len=L, **kw)):
        assert min(len(t) for t in decode()) < wanted  # without the option some output is shorter
        assert all(len(t) >= wanted for t in decode(min_len=wanted))
    options = {"min_len": 4, "no_repeat_ngram_size": 2}
    for m in (model, eager):
        assert decoding.beam_search(m, src, src_mask, BOS, EOS, beam=1, max_len=L, length_penalty=0.0,
                                    **options) == decoding.greedy(m, src, src_mask, BOS, EOS, max_len=L, **options)
    with pytest.raises(ValueError, match="min_len"):
        decoding.greedy(model, src, src_mask, BOS, EOS, min_len=-1)
    with pytest.raises(ValueError, match="no_repeat_ngram_size"):
        decoding.beam_search(model, src, src_mask, BOS, EOS, no_repeat_ngram_size=-2)
