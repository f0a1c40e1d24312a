"""Sampling: the filters' maths on a known distribution, and seeded repeatability."""

from __future__ import annotations

import math

import pytest
import torch

from corpusforge.models.gpt.config import GPTConfig
from corpusforge.models.gpt.model import GPT
from corpusforge.models.rnn.config import RNNConfig
from corpusforge.models.rnn.model import RNNLM
from corpusforge.models.sampling import filter_logits, generate, next_token_table
from corpusforge.models.zoo import family_of

PROBS = torch.tensor([0.5, 0.2, 0.15, 0.1, 0.05], dtype=torch.float64)


def test_top_k_keeps_the_k_best():
    out = filter_logits(PROBS.log(), top_k=2)
    assert torch.isfinite(out).tolist() == [True, True, False, False, False]


def test_top_p_keeps_the_smallest_set_reaching_p():
    # cumulative 0.5, 0.7, 0.85, 0.95, 1.0: p = 0.7 keeps {0, 1}; p = 0.71 keeps {0, 1, 2}
    assert torch.isfinite(filter_logits(PROBS.log(), top_p=0.7)).tolist() == [True, True, False, False, False]
    assert torch.isfinite(filter_logits(PROBS.log(), top_p=0.71)).tolist() == [True, True, True, False, False]
    assert torch.isfinite(filter_logits(PROBS.log(), top_p=0.3)).tolist() == [True, False, False, False, False]


def test_temperature_scales_logits():
    kept = torch.softmax(filter_logits(PROBS.log(), temperature=2.0), -1)
    expected = PROBS.sqrt() / PROBS.sqrt().sum()  # p^(1/T) renormalised
    torch.testing.assert_close(kept, expected)
    with pytest.raises(ValueError, match="temperature"):
        filter_logits(PROBS.log(), temperature=0)


def small_gpt():
    torch.manual_seed(0)
    return GPT(GPTConfig(vocab_size=17, block_size=8, n_layer=1, n_head=2, n_embd=8))


@pytest.mark.parametrize("make", [small_gpt, lambda: RNNLM(RNNConfig(vocab_size=17, n_embd=8, n_hidden=8, n_layer=1))])
def test_seeded_sampling_repeats_and_top_k_1_is_greedy(make):
    model = make()
    recurrent = family_of(model).recurrent  # an RNN reads the prompt once, then one token at a time
    a = generate(model, [1, 2, 3], 20, temperature=1.5, seed=7, recurrent=recurrent)
    b = generate(model, [1, 2, 3], 20, temperature=1.5, seed=7, recurrent=recurrent)
    assert a == b and len(a) == 20 and all(0 <= t < 17 for t in a)
    greedy = generate(model, [1, 2, 3], 12, greedy=True, recurrent=recurrent)
    assert generate(model, [1, 2, 3], 12, top_k=1, seed=1, recurrent=recurrent) == greedy
    # greedy is the argmax of the next-token table at every step
    assert next_token_table(model, [1, 2, 3], k=3, recurrent=recurrent)[0][0] == greedy[0]


def test_window_model_generates_past_its_block_and_stops():
    model = small_gpt()
    out = generate(model, [1], 30, greedy=True)
    assert len(out) == 30  # the context is cropped to block_size = 8
    first = out[0]
    assert generate(model, [1], 30, greedy=True, stop_id=first) == [first]


def test_next_token_table_is_a_distribution_head():
    table = next_token_table(small_gpt(), [4, 5], k=17)
    assert math.isclose(sum(p for _, p in table), 1.0, rel_tol=1e-5)
    assert [p for _, p in table] == sorted((p for _, p in table), reverse=True)
