"""Contextual word vectors (corpusforge.models.contextual): a word's tokens are found by their characters for any
tokenizer, its vector is the mean of the encoder's last-layer states over them, and one word gets different vectors
in two sentences while a static embedding's lookup gives it one."""

from __future__ import annotations

import pytest
import torch

from corpusforge.models.contextual import cosine, token_spans, word_tokens, word_vector
from corpusforge.models.encoder.config import EncoderConfig
from corpusforge.models.encoder.model import TransformerEncoder
from corpusforge.models.gpt.config import GPTConfig
from corpusforge.models.gpt.model import GPT
from corpusforge.models.tokenization import make_tokenizer

TEXTS = ["the river bank was muddy", "she opened a bank account", "a bank of the river", "money in the bank"] * 5


@pytest.fixture(scope="module", params=["char", "byte-bpe", "bpe", "word"])
def tokenizer(request):
    tok = make_tokenizer(request.param)
    tok.train(TEXTS, vocab_size=300) if request.param != "char" else tok.train(TEXTS)
    return tok


def test_token_spans_tile_the_decoded_text(tokenizer):
    ids = tokenizer.encode("the river bank was muddy")
    text, spans = token_spans(tokenizer, ids)
    assert len(spans) == len(ids) and spans[0][0] == 0 and spans[-1][1] == len(text)
    assert all(a[1] == b[0] for a, b in zip(spans, spans[1:]))  # contiguous, in order
    ids, positions = word_tokens(tokenizer, "the river bank was muddy", "bank")
    covered = "".join(tokenizer.decode([ids[k]]) for k in positions).strip()
    assert covered == "bank"


def test_a_word_that_is_not_there_is_one_clear_error(tokenizer):
    with pytest.raises(ValueError, match="'ban' is not a word of"):
        word_tokens(tokenizer, "the river bank", "ban")  # a whole word, not a piece of one


def encoder(vocab: int) -> TransformerEncoder:
    torch.manual_seed(0)
    return TransformerEncoder(EncoderConfig(vocab_size=vocab, block_size=32, n_layer=2, n_head=2, n_embd=32,
                                            mask_id=0)).eval()


def test_one_word_two_sentences_two_vectors_and_one_static_vector(tokenizer):
    model = encoder(tokenizer.vocab_size)
    river, river_tokens = word_vector(model, tokenizer, "the river bank was muddy", "bank")
    account, _ = word_vector(model, tokenizer, "she opened a bank account", "bank")
    again, _ = word_vector(model, tokenizer, "the river bank was muddy", "bank")
    assert "".join(river_tokens).strip() == "bank"
    assert cosine(river, account) < 0.999  # the context changed the vector
    assert cosine(river, again) == pytest.approx(1.0, abs=1e-9)  # the same context gives the same vector
    static = model.wte.weight[tokenizer.encode("bank")].float().mean(0)  # a lookup: no context at all
    assert cosine(static, static) == pytest.approx(1.0, abs=1e-12)


def test_the_hidden_states_are_what_the_head_reads():
    torch.manual_seed(1)
    for model in (GPT(GPTConfig(vocab_size=50, block_size=16, n_layer=2, n_head=2, n_embd=16)), encoder(50)):
        idx = torch.randint(0, 50, (3, 12))
        logits, _ = model(idx)
        assert torch.equal(model.lm_head(model.hidden_states(idx)), logits)
