"""Retrieval-augmented generation (tasks/qa/generate.py): passages enter the prompt best first while the prompt and
the answer fit the model's block, the rest are counted as left out (never cut), a model that cannot generate is
refused, and the answer is the greedy continuation with its mean log-probability."""

from __future__ import annotations

import math

import pytest
import torch

from corpusforge.models.tokenization import make_tokenizer
from corpusforge.models.zoo import build_model
from corpusforge.tasks.qa.generate import PROMPT, generative_answer

PASSAGES = ["paris is the capital of france", "berlin is the capital of germany and its largest city by far",
            "rome"]


@pytest.fixture(scope="module")
def tok():
    t = make_tokenizer("word", unk_token="<unk>", eot_token="<|endoftext|>")
    t.train(PASSAGES + ["context : question : answer : what is the capital of france ?"], vocab_size=200)
    return t


def test_passages_fill_the_block_best_first_and_the_rest_is_counted(tok):
    torch.manual_seed(0)
    q = "what is the capital of france ?"
    first = len(tok.encode(PROMPT.format(context=PASSAGES[0], question=q)))
    block = first + 6  # room for the first passage, a 4-token answer and a word more: not for the second
    model = build_model("gpt", {"vocab_size": tok.vocab_size, "n_layer": 1, "n_head": 2, "n_embd": 16,
                                "block_size": block, "dropout": 0.0})
    found = generative_answer(model, tok, q, PASSAGES, tok.eot_id, max_new_tokens=4)
    assert found["passages_read"] == 2 and found["passages_left_out"] == 1  # "rome" still fits after the long one
    assert PASSAGES[0] in found["prompt"] and PASSAGES[1] not in found["prompt"] and "rome" in found["prompt"]
    assert found["prompt"].endswith("Answer:")
    assert found["score"] is None or (math.isfinite(found["score"]) and found["score"] <= 0.0)
    if found["passage"] is not None:
        assert found["answer"].casefold() in PASSAGES[found["passage"]]
    again = generative_answer(model, tok, q, PASSAGES, tok.eot_id, max_new_tokens=4)
    assert again["answer"] == found["answer"]  # greedy
    with pytest.raises(ValueError, match="leaving no room"):
        generative_answer(model, tok, q * 3, PASSAGES, tok.eot_id, max_new_tokens=4)


def test_a_model_that_cannot_generate_is_refused(tok):
    model = build_model("bert", {"vocab_size": tok.vocab_size, "n_layer": 1, "n_head": 2, "n_embd": 16,
                                 "block_size": 32, "mask_id": 1, "cls_id": 2, "sep_id": 3, "pad_id": 0, "eot_id": 4})
    with pytest.raises(ValueError, match="cannot generate an answer"):
        generative_answer(model, tok, "q", PASSAGES, None)
