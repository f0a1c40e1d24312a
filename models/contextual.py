"""Contextual word vectors from a trained encoder, the point the texts make against static embeddings: "bank" gets
one vector from word2vec whatever the sentence, but a different one from an encoder in "the river bank" and in "the
bank account", because every layer mixes in the words around it.

A word's vector is the mean of the encoder's last-layer states (``model.hidden_states``) over the tokens that
cover the word's characters, found for any tokenizer by decoding growing prefixes of the sentence's ids (token k
covers the characters that decoding ids[:k + 1] adds to decoding ids[:k]).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import torch

from corpusforge.models.objectives import evaluating


def token_spans(tokenizer: Any, ids: Sequence[int]) -> tuple[str, list[tuple[int, int]]]:
    """The decoded text of ``ids`` and each token's [start, end) character span in it. A ValueError when a
    prefix does not decode to a prefix of the whole (then no span can be given)."""
    text = tokenizer.decode(list(ids))
    spans, previous = [], 0
    for k in range(1, len(ids) + 1):
        prefix = tokenizer.decode(list(ids[:k]))
        if not text.startswith(prefix):
            raise ValueError("the tokenizer does not decode a prefix of the ids to a prefix of the text, so tokens "
                             "cannot be matched to characters")
        spans.append((previous, len(prefix)))
        previous = len(prefix)
    return text, spans


def word_tokens(tokenizer: Any, sentence: str, word: str) -> tuple[list[int], list[int]]:
    """(the sentence's ids, the positions of the tokens that cover ``word``'s first whole-word occurrence)."""
    ids = tokenizer.encode(sentence)
    text, spans = token_spans(tokenizer, ids)
    found = re.search(rf"(?<!\w){re.escape(word)}(?!\w)", text)
    if found is None:
        raise ValueError(f"{word!r} is not a word of {sentence!r}")
    start, end = found.span()
    positions = [k for k, (a, b) in enumerate(spans) if a < end and b > start]
    if not positions:
        raise ValueError(f"no token of {sentence!r} covers {word!r}")
    return ids, positions


def word_vector(model: torch.nn.Module, tokenizer: Any, sentence: str, word: str) -> tuple[torch.Tensor, list[str]]:
    """``word``'s contextual vector in ``sentence`` (the mean of its tokens' last-layer states) and those tokens."""
    ids, positions = word_tokens(tokenizer, sentence, word)
    with evaluating(model):
        with torch.no_grad():
            states = model.hidden_states(torch.tensor([ids], dtype=torch.long))[0]
    return states[positions].float().mean(0), [tokenizer.decode([ids[k]]) for k in positions]


def cosine(a: Any, b: Any) -> float:
    a, b = torch.as_tensor(a, dtype=torch.float64), torch.as_tensor(b, dtype=torch.float64)
    return float(torch.dot(a, b) / (a.norm() * b.norm()).clamp_min(1e-300))
