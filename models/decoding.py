"""Decoding an encoder-decoder: greedy and beam search, batched, for every family with the ``translate`` capability.

A translate model gives (corpusforge.models.seq2seq, corpusforge.models.transformer):

- ``encode(src, src_mask) -> memory``: a tensor, or a (named) tuple / list / dict of tensors, batch first (beam
  search repeats each row once per beam);
- ``decode_step(memory, src_mask, prev_ids (B, t), cache, return_attention) -> (logits (B, V), cache, attention
  (B, heads, S) or None)``: the next token after the prefix; ``cache=None`` reads the whole prefix, a cache only
  its last token;
- ``reorder_cache(cache, index)``: keep the rows ``index`` (each surviving hypothesis continues its parent's);
  ``index`` only moves rows among the beams of one source, so what depends on the source alone may stay as it is.

Hypotheses start with bos; a hypothesis ends at eos (the eos is scored, not returned) or after ``max_len``
tokens. Beam search keeps ``beam`` hypotheses per sentence and ranks finished ones by
``log P(y | x) / lp(y)`` with GNMT's length penalty ``lp(y) = ((5 + |y|) / 6) ** alpha`` (Wu et al. 2016;
``|y|`` counts the eos; ``alpha = 0``: the raw log-probability, which favours short outputs). As in fairseq, an eos
ends a hypothesis only when it ranks among the ``beam`` best candidates of its sentence, and a sentence is done
once ``beam`` hypotheses have ended; so ``beam=1`` picks exactly greedy's tokens.

:func:`plot_alignment` draws a source-by-target attention heatmap (Bahdanau et al. 2014, figure 3).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F

from corpusforge.models.batching import pad
from corpusforge.models.objectives import IGNORE, evaluating


def gnmt_penalty(length: int, alpha: float) -> float:
    """GNMT's ``((5 + length) / 6) ** alpha``: dividing a (negative) log-probability by it favours longer outputs."""
    return ((5.0 + length) / 6.0) ** alpha


def map_batch(obj: Any, fn: Callable[[torch.Tensor], torch.Tensor]) -> Any:
    """``fn`` applied to every tensor of a (nested) tuple, named tuple, list or dict; None stays None."""
    if obj is None:
        return None
    if isinstance(obj, torch.Tensor):
        return fn(obj)
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):
        return type(obj)(*(map_batch(o, fn) for o in obj))
    if isinstance(obj, (tuple, list)):
        return type(obj)(map_batch(o, fn) for o in obj)
    if isinstance(obj, dict):
        return {k: map_batch(v, fn) for k, v in obj.items()}
    raise TypeError(f"cannot batch a {type(obj).__name__}")


@contextlib.contextmanager
def _evaluating(model: nn.Module) -> Iterator[None]:
    with evaluating(model):
        with torch.no_grad():
            yield


def _max_len(model: nn.Module, max_len: int | None) -> int:
    return int(max_len if max_len is not None else model.cfg.max_len)


def _until_eos(row: Sequence[int], eos_id: int) -> list[int]:
    return list(row[: row.index(eos_id)]) if eos_id in row else list(row)


def _crop(attention: torch.Tensor, steps: int, src_len: int) -> torch.Tensor:
    """A hypothesis' attention (steps, heads, S) cut to its steps and its real source positions, on the CPU."""
    return attention[:steps, :, :src_len].float().cpu()


def _constrained(logp: torch.Tensor, ids: torch.Tensor, eos_id: int, min_len: int, no_repeat_ngram_size: int
                 ) -> torch.Tensor:
    """``logp`` (R, V) for the token after ``ids`` (R, 1 + t: bos, then t tokens) with what the options forbid set to
    -inf: eos while fewer than ``min_len`` tokens are out; with ``no_repeat_ngram_size`` n, any token that would
    repeat an n-gram the row already holds (bos not counted; fairseq's and HF's option). On the device, no loop."""
    t = ids.shape[1] - 1
    if t < min_len:
        logp = logp.clone()
        logp[:, eos_id] = float("-inf")
    n = no_repeat_ngram_size
    if n > 0 and t >= n:  # t - n + 1 earlier n-grams; the next completes one whose n - 1 first tokens end the row
        out = ids[:, 1:]
        grams = out.unfold(1, n, 1)  # (R, t - n + 1, n)
        same = (grams[:, :, :-1] == out[:, t - n + 1:].unsqueeze(1)).all(-1)  # n = 1: all() of nothing is True
        rows, which = same.nonzero(as_tuple=True)
        if rows.numel():
            logp = logp.clone()
            logp[rows, grams[rows, which, -1]] = float("-inf")
    return logp


def _check_options(min_len: int, no_repeat_ngram_size: int) -> None:
    if min_len < 0:
        raise ValueError(f"min_len: must be >= 0, got {min_len}")
    if no_repeat_ngram_size < 0:
        raise ValueError(f"no_repeat_ngram_size: must be >= 0 (0: off), got {no_repeat_ngram_size}")


def greedy(model: nn.Module, src: torch.Tensor, src_mask: torch.Tensor, bos_id: int, eos_id: int,
           max_len: int | None = None, return_attention: bool = False, use_cache: bool = True,
           min_len: int = 0, no_repeat_ngram_size: int = 0):
    """The most likely next token at every step, for a batch of sources. Returns the token lists (no bos/eos);
    with ``return_attention`` also, per sentence, the attention of each step (steps, heads, src_len): one row per
    returned token, plus the eos's row when it ended (None for a model without attention). ``use_cache=False``
    recomputes the whole prefix at every step (to measure what the cache saves). ``min_len``: no eos before that
    many tokens; ``no_repeat_ngram_size`` n > 0: no n-gram twice in an output."""
    _check_options(min_len, no_repeat_ngram_size)
    max_len = _max_len(model, max_len)
    with _evaluating(model):
        memory = model.encode(src, src_mask)
        B = src.shape[0]
        ids = torch.full((B, 1), bos_id, dtype=torch.long, device=src.device)
        done = torch.zeros(B, dtype=torch.bool, device=src.device)
        cache, steps = None, []
        for _ in range(max_len):
            logits, new_cache, attention = model.decode_step(memory, src_mask, ids, cache, return_attention)
            cache = new_cache if use_cache else None
            logp = F.log_softmax(logits.float(), dim=-1)
            if min_len or no_repeat_ngram_size:
                logp = _constrained(logp, ids, eos_id, min_len, no_repeat_ngram_size)
            token = logp.argmax(-1)
            token = token.masked_fill(done, eos_id)  # a finished row idles on eos
            ids = torch.cat([ids, token[:, None]], dim=1)
            steps.append(attention)
            done |= token == eos_id
            if bool(done.all()):
                break
    rows = ids[:, 1:].tolist()
    tokens = [_until_eos(row, eos_id) for row in rows]
    if not return_attention:
        return tokens
    if steps[0] is None:
        return tokens, [None] * B
    maps = torch.stack(steps, dim=1)  # (B, steps, heads, S)
    lengths = src_mask.sum(1).tolist()
    ended = [eos_id in row for row in rows]
    return tokens, [_crop(maps[i], len(t) + int(e), int(n)) for i, (t, e, n) in enumerate(zip(tokens, ended, lengths))]


def beam_search(model: nn.Module, src: torch.Tensor, src_mask: torch.Tensor, bos_id: int, eos_id: int,
                beam: int = 4, max_len: int | None = None, length_penalty: float = 0.6,
                return_attention: bool = False, min_len: int = 0, no_repeat_ngram_size: int = 0):
    """The best of ``beam`` hypotheses per sentence, ranked by log-probability over GNMT's length penalty
    (``length_penalty`` is its alpha). Returns what :func:`greedy` returns; ``min_len`` and
    ``no_repeat_ngram_size`` constrain every hypothesis as they do greedy's output."""
    if beam < 1:
        raise ValueError(f"beam: must be >= 1, got {beam}")
    _check_options(min_len, no_repeat_ngram_size)
    max_len, K = _max_len(model, max_len), beam
    B = src.shape[0]
    lengths = src_mask.sum(1).tolist()
    finished: list[list[tuple[float, list[int], torch.Tensor | None]]] = [[] for _ in range(B)]
    done = [False] * B
    device = src.device
    n_finished = [0] * B
    with _evaluating(model):
        memory = map_batch(model.encode(src, src_mask), lambda t: t.repeat_interleave(K, dim=0))
        mask = src_mask.repeat_interleave(K, dim=0)
        ids = torch.full((B * K, 1), bos_id, dtype=torch.long, device=device)
        scores = torch.zeros(B, K, device=device)
        scores[:, 1:] = float("-inf")  # the K beams start as one hypothesis: expand only the first
        first_row = torch.arange(B, device=device).unsqueeze(1) * K  # (B, 1): each sentence's first beam row
        live = torch.ones(B, 1, dtype=torch.bool, device=device)  # sentences still searched
        cache, history = None, None  # history: the attention of every step (B * K, t, heads, S)
        for t in range(max_len):
            logits, cache, attention = model.decode_step(memory, mask, ids, cache, return_attention)
            if attention is not None:
                step = attention.unsqueeze(1)
                history = step if history is None else torch.cat([history, step], dim=1)
            logp = F.log_softmax(logits.float(), dim=-1)
            if min_len or no_repeat_ngram_size:
                logp = _constrained(logp, ids, eos_id, min_len, no_repeat_ngram_size)
            V = logp.shape[-1]
            candidates = (scores.unsqueeze(-1) + logp.view(B, K, V)).view(B, K * V)
            # 2K candidates: K continuations survive even if K of the best end here. Every sentence at once, on
            # the device (fairseq's way): no Python loop over the candidates, one host sync per step.
            C = min(2 * K, K * V)
            top, where = candidates.topk(C, dim=1)  # (B, C), best first
            rows, tokens = first_row + torch.div(where, V, rounding_mode="floor"), where % V
            rank = torch.arange(C, device=device).unsqueeze(0)
            usable = live & (top > float("-inf"))
            is_eos = tokens == eos_id
            ends = usable & is_eos & (rank < K)  # an eos outside the K best is not taken (fairseq)
            goes_on = usable & ~is_eos
            keep = goes_on & (goes_on.cumsum(1) <= K)  # the K best continuations, in rank order
            chosen = torch.where(keep, rank, rank + C).argsort(dim=1)[:, :K]  # kept first, each in rank order
            kept = keep.gather(1, chosen)
            # a finished sentence's rows idle on its first row (never expanded again)
            next_rows = torch.where(kept, rows.gather(1, chosen), first_row)
            next_tokens = torch.where(kept, tokens.gather(1, chosen), eos_id)
            next_scores = torch.where(kept, top.gather(1, chosen), float("-inf"))
            last = t == max_len - 1
            if last or bool(ends.any()):
                penalty = gnmt_penalty(t + 1, length_penalty)
                for b, c in ends.nonzero().tolist():  # row-major: each sentence's in rank order
                    row = int(rows[b, c])
                    finished[b].append((float(top[b, c]) / penalty, ids[row, 1:].tolist(),
                                        history[row] if history is not None else None))
                    n_finished[b] += 1
                if last:  # out of room: the live hypotheses end here, without eos
                    for b, k in kept.nonzero().tolist():
                        row = int(next_rows[b, k])
                        finished[b].append((float(next_scores[b, k]) / penalty,
                                            ids[row, 1:].tolist() + [int(next_tokens[b, k])],
                                            history[row] if history is not None else None))
                for b in range(B):
                    if n_finished[b] >= K or last:
                        done[b] = True
                if all(done):
                    break
                live = torch.tensor([not d for d in done], device=device).unsqueeze(1)
            index = next_rows.view(-1)
            ids = torch.cat([ids.index_select(0, index), next_tokens.view(-1, 1)], dim=1)
            scores = next_scores
            cache = model.reorder_cache(cache, index)
            if history is not None:
                history = history.index_select(0, index)
    best = [max(f, key=lambda h: h[0]) for f in finished]
    tokens_out = [_until_eos(h[1], eos_id) for h in best]
    if not return_attention:
        return tokens_out
    return tokens_out, [None if h[2] is None else _crop(h[2], h[2].shape[0], int(n)) for h, n in zip(best, lengths)]


def score(model: nn.Module, src: torch.Tensor, src_mask: torch.Tensor, hypotheses: Sequence[Sequence[int]],
          bos_id: int, eos_id: int, length_penalty: float = 0.0, ended: Sequence[bool] | None = None) -> list[float]:
    """Each hypothesis' log-probability given its source (teacher forced; with its eos where ``ended``, default
    all), divided by GNMT's length penalty with this alpha: the figure beam search ranks by."""
    ended = [True] * len(hypotheses) if ended is None else list(ended)
    with _evaluating(model):
        # the filler after a row's end is read only by later filler positions (causal), which carry no score
        tgt_in, tgt_mask = pad([[bos_id, *h] if e else [bos_id, *h[:-1]] for h, e in zip(hypotheses, ended)], eos_id)
        target, _ = pad([[*h, eos_id] if e else list(h) for h, e in zip(hypotheses, ended)], IGNORE)
        tgt_in, tgt_mask, target = (t.to(src.device) for t in (tgt_in, tgt_mask, target))
        logp = F.log_softmax(model(src, src_mask, tgt_in, tgt_mask).float(), dim=-1)
        picked = logp.gather(-1, target.clamp_min(0).unsqueeze(-1)).squeeze(-1) * (target != IGNORE)
        sums = picked.sum(1).tolist()
    return [s / gnmt_penalty(int((target[i] != IGNORE).sum()), length_penalty)
            for i, s in enumerate(sums)]


def plot_alignment(weights: Any, src_tokens: Sequence[str], tgt_tokens: Sequence[str], path: Path | str,
                   title: str = "") -> Path:
    """A source-by-target attention heatmap, one panel per head: ``weights`` (T_tgt, T_src) or (heads, T_tgt,
    T_src), rows the target tokens (what was emitted at that step, the eos included), columns the source
    tokens. Returns the PNG's path."""
    import math

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    w = weights.detach().float().cpu().numpy() if isinstance(weights, torch.Tensor) else np.asarray(weights, float)
    if w.ndim == 2:
        w = w[None]
    heads, T, S = w.shape
    if (T, S) != (len(tgt_tokens), len(src_tokens)):
        raise ValueError(f"weights are {T} x {S} but there are {len(tgt_tokens)} target and {len(src_tokens)} "
                         "source tokens")
    # two panels a row at most, and cells big enough to read the tokens: four heads in one row shrank each panel to
    # a quarter of the report's width, where the labels could not be read (issue 50)
    cols = min(heads, 2)
    rows = math.ceil(heads / cols)
    width, height = max(3.0, 0.4 * S + 1.2), max(2.5, 0.4 * T + 1.2)
    fig, axes = plt.subplots(rows, cols, figsize=(width * cols, height * rows), squeeze=False, dpi=100)
    for h in range(rows * cols):
        ax = axes[h // cols][h % cols]
        if h >= heads:
            ax.axis("off")
            continue
        ax.imshow(w[h], cmap="gray_r", vmin=0.0, vmax=1.0, aspect="auto")
        if heads > 1:
            ax.set_title(f"head {h}", fontsize=9)
        ax.set_xticks(range(S), list(src_tokens), rotation=90, fontsize=9)
        ax.set_yticks(range(T), list(tgt_tokens), fontsize=9)
        ax.set_xlabel("source")
        ax.set_ylabel("target")
    fig.suptitle(title or "alignment: row = target token, column = source token it attended to", fontsize=9)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path
