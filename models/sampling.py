"""Generation from any of our LMs: greedy, temperature, top-k and top-p (nucleus), seeded.

``filter_logits`` is the pure part (what may be sampled, with what weight); ``generate`` runs the model
autoregressively: window models (GPT, NPLM) re-read the last ``block_size`` tokens each step, ``recurrent`` ones
(a family trait, corpusforge.models.family) read the prompt once and then feed one token at a time with their
state. Only families that declare the ``generate`` capability are sampled from; the callers check it.
"""

from __future__ import annotations

import torch
import torch.nn as nn

from corpusforge.models.objectives import evaluating


def filter_logits(logits: torch.Tensor, temperature: float = 1.0, top_k: int | None = None,
                  top_p: float | None = None) -> torch.Tensor:
    """Scale by 1/temperature, keep the k best and/or the smallest set whose probability reaches p;
    everything else becomes -inf. logits: (..., V)."""
    if temperature <= 0:
        raise ValueError("temperature: must be > 0 (use greedy=True for argmax decoding)")
    logits = logits / temperature
    if top_k is not None and top_k > 0:
        kth = torch.topk(logits, min(top_k, logits.shape[-1]), dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p is not None and 0 < top_p < 1:
        sorted_logits, order = torch.sort(logits, descending=True, dim=-1)
        cumulative = torch.softmax(sorted_logits, dim=-1).cumsum(dim=-1)
        # drop a token when the tokens ranked above it already reach p (the first token always stays)
        drop_sorted = (cumulative - torch.softmax(sorted_logits, dim=-1)) >= top_p
        drop = drop_sorted.scatter(-1, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    return logits


@torch.no_grad()
def generate(model: nn.Module, prompt: list[int], max_new_tokens: int, *, greedy: bool = False,
             temperature: float = 1.0, top_k: int | None = None, top_p: float | None = None,
             seed: int | None = None, stop_id: int | None = None, recurrent: bool = False) -> list[int]:
    """Continue ``prompt`` (token ids) by up to ``max_new_tokens``; returns only the new ids."""
    if not prompt:
        raise ValueError("prompt: needs at least one token")
    device = next(model.parameters()).device
    gen = torch.Generator(device=device)
    gen.manual_seed(seed if seed is not None else torch.seed())
    block = model.cfg.block_size
    stateful = recurrent
    out: list[int] = []
    with evaluating(model):
        if stateful:
            logits, state = model(torch.tensor([prompt], device=device))
        context = list(prompt)
        for _ in range(max_new_tokens):
            if not stateful:
                logits, _ = model(torch.tensor([context[-block:]], device=device))
            last = logits[0, -1].float()
            if greedy:
                nxt = int(torch.argmax(last))
            else:
                probs = torch.softmax(filter_logits(last, temperature, top_k, top_p), dim=-1)
                nxt = int(torch.multinomial(probs, 1, generator=gen))
            out.append(nxt)
            if stop_id is not None and nxt == stop_id:
                break
            context.append(nxt)
            if stateful:
                logits, state = model(torch.tensor([[nxt]], device=device), state)
    return out


@torch.no_grad()
def next_token_table(model: nn.Module, prompt: list[int], k: int = 10, recurrent: bool = False,
                     ) -> list[tuple[int, float]]:
    """The k most probable tokens at the last position of ``prompt`` with their probabilities, best first."""
    model.eval()
    device = next(model.parameters()).device
    context = prompt if recurrent else prompt[-model.cfg.block_size:]
    logits, _ = model(torch.tensor([context], device=device))
    probs = torch.softmax(logits[0, -1].float(), dim=-1)
    top = torch.topk(probs, min(k, probs.numel()))
    return [(int(i), float(p)) for p, i in zip(top.values, top.indices)]
