"""Supervised fine-tuning of a causal LM on (prompt, response) records: :class:`SFT`, scored on the response tokens
only (the prompt's targets are ``IGNORE``), rows packed or padded.

Post-training's objectives (this one and :mod:`.preference`) read records, ``{split: [record, ...]}`` with each
record a tuple of token-id lists. The model is any causal LM whose ``forward(idx)`` returns ``(logits (B, T, V),
state)`` (the GPT family), padded on the right (a causal model's real positions never see the padding after them).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Mapping, Sequence
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F

from corpusforge.models.contracts import hook
from corpusforge.models.objectives.base import IGNORE, Batch, Objective, evaluating
from corpusforge.models.objectives.lm import NextTokenLoss


def _ids(seq: Any) -> list[int]:
    return [int(t) for t in seq]


def records_of(splits: Mapping[str, Any], fields: Sequence[str]) -> dict[str, list[tuple[list[int], ...]]]:
    """``{split: [record, ...]}``, each record a tuple of ``len(fields)`` token-id sequences (the first the
    prompt); empty and None splits dropped; a record of another arity or with an empty field is an error."""
    out = {}
    for name, rows in splits.items():
        if rows is None or not len(rows):
            continue
        records = []
        for k, row in enumerate(rows):
            if len(row) != len(fields):
                raise ValueError(f"split {name}, record {k}: expected {len(fields)} fields ({', '.join(fields)}), "
                                 f"got {len(row)}")
            record = tuple(_ids(s) for s in row)
            empty = [f for f, s in zip(fields, record) if not s]
            if empty:
                raise ValueError(f"split {name}, record {k}: empty {', '.join(empty)} (a prompt needs at least a bos "
                                 "or template token, a response at least one token)")
            records.append(record)
        out[name] = records
    if "train" not in out:
        raise ValueError("the train split is empty: nothing to train on")
    return out


def model_device(model: nn.Module) -> torch.device:
    p = next(model.parameters(), None)
    return p.device if p is not None else torch.device("cpu")


# --- supervised fine-tuning -------------------------------------------------------------------------------------

def sft_targets(prompt_ids: Sequence[int], response_ids: Sequence[int]) -> tuple[list[int], list[int]]:
    """``(input_ids, target_ids)`` of one example, shifted as the trainer's next-token loss reads them: the
    sequence s = prompt + response, ``input_ids = s[:-1]``, ``target_ids[t] = s[t + 1]`` where s[t + 1] is a
    response token and ``IGNORE`` where it is a prompt token (the first len(prompt) - 1 positions). So the loss
    is on exactly the response tokens, each predicted from everything before it. The prompt must not be empty
    (the first response token needs something to be predicted from: a bos or a template token)."""
    prompt, response = _ids(prompt_ids), _ids(response_ids)
    if not prompt:
        raise ValueError("sft_targets: an empty prompt (start it with a bos or template token)")
    if not response:
        raise ValueError("sft_targets: an empty response (nothing to learn)")
    seq = prompt + response
    return seq[:-1], [IGNORE] * (len(prompt) - 1) + response


def fit_prompt(prompt: list[int], response: list[int], limit: int) -> tuple[list[int], list[int], bool]:
    """Cut ``prompt + response`` to at most ``limit`` tokens: prompt tokens go from the left first (one is kept),
    then the response loses its end. Returns (prompt, response, whether anything was cut)."""
    over = len(prompt) + len(response) - limit
    if over <= 0:
        return prompt, response, False
    drop = min(over, len(prompt) - 1)
    prompt = prompt[drop:]
    over -= drop
    if over > 0:
        response = response[: len(response) - over]
    return prompt, response, True


class SFT(Objective):
    """Supervised fine-tuning on (prompt, response) pairs: each split is a list of records ``(prompt_ids,
    response_ids)`` (the prompt already in its chat template, the response ending in its eos if it should learn
    to stop). The loss is the mean cross-entropy over the batch's response tokens (:func:`sft_targets`).

    An example whose prompt + response is longer than ``block_size + 1`` tokens (the model reads one fewer than
    the sequence) loses prompt tokens from its left (then, if still too long, response tokens from its end);
    ``truncated[split]`` counts them. With ``pack``, training rows are filled with whole examples, in order, up
    to ``block_size`` input positions (never splitting one; a row holds one example or more), so little compute
    goes to padding; a packed example attends to the examples before it in its row (no per-document attention
    mask) and sits at other positions than alone, the usual trade of packing. Without ``pack`` each example is
    a row. Rows are length-bucketed and padded (inputs with ``pad_id``, targets with ``IGNORE``), reshuffled
    every epoch, found again by number (exact resume). Evaluation never packs: each example alone, padded;
    ``loss`` is nats per response token, ``ppl`` its exp, ``response_tokens`` how many were scored."""

    def __init__(self, splits: Mapping[str, Sequence[tuple[Any, Any]]], pad_id: int, block_size: int, pack: bool = True,
                 seed: int = 0):
        if pad_id is None:
            raise ValueError("pad_id: SFT pads rows and needs the tokenizer's pad id (any id works: it is never scored)")
        if block_size < 2:
            raise ValueError(f"block_size: must be >= 2, got {block_size}")
        self.pad_id, self.block_size, self.pack, self.seed = pad_id, block_size, pack, seed
        self.splits: dict[str, list[tuple[list[int], list[int]]]] = {}
        self.truncated: dict[str, int] = {}
        for name, records in records_of(splits, ("prompt", "response")).items():
            examples, cut = [], 0
            for p, r in records:
                p, r, was_cut = fit_prompt(p, r, block_size + 1)
                cut += was_cut
                examples.append(sft_targets(p, r))
            self.splits[name], self.truncated[name] = examples, cut

    def has_split(self, split: str) -> bool:
        return split in self.splits

    def rows(self, split: str = "train") -> list[tuple[list[int], list[int], list[int]]]:
        """The training rows: ``(inputs, targets, example indices)``; with ``pack`` whole examples concatenated
        in order while they fit ``block_size``, else one example a row."""
        out: list[tuple[list[int], list[int], list[int]]] = []
        for i, (x, y) in enumerate(self.splits[split]):
            if self.pack and out and len(out[-1][0]) + len(x) <= self.block_size:
                out[-1][0].extend(x)
                out[-1][1].extend(y)
                out[-1][2].append(i)
            else:
                out.append((list(x), list(y), [i]))
        return out

    def setup(self, model, batch_size, rank=0, world=1) -> None:
        from corpusforge.models.batching import EpochBatches

        self._rows = self.rows("train")
        self.batches = EpochBatches([len(r[0]) for r in self._rows], batch_size, self.seed, rank, world)

    def collate(self, rows: Sequence[tuple[list[int], list[int]]]) -> tuple[torch.Tensor, torch.Tensor]:
        from corpusforge.models.batching import pad

        x, _ = pad([r[0] for r in rows], self.pad_id)
        y, _ = pad([r[1] for r in rows], IGNORE)
        return x, y

    def batch(self, index: int, gen: torch.Generator) -> Batch:
        indices, _ = self.batches.get(index)
        rows = [self._rows[i] for i in indices]
        x, y = self.collate(rows)
        return Batch((x, y), sum(len(r[0]) for r in rows), terms=int((y != IGNORE).sum()))  # response tokens

    def loss_module(self, model: nn.Module) -> nn.Module:
        return NextTokenLoss(model)  # cross-entropy ignores IGNORE: the mean is over the response tokens

    def flops_per_token(self, model: nn.Module) -> float:
        flops = hook(model, "flops_per_token")
        return flops(self.block_size) if flops else 0.0

    def evaluate(self, model, split, batch_size, max_batches=0, device="cpu", autocast=contextlib.nullcontext):
        """The first ``max_batches * batch_size`` examples (all with 0), each alone, batched by length.

        ``loss`` (nats per response token) is what training minimises, but it is a poor guide to whether answers
        are right: a response is several tokens of which most are fixed by the format (" positive" is 4-8
        byte-level tokens plus the end token, and only the first one decides), so a model at chance on the
        decision (ln 2 = 0.69 nats) and sure of the rest shows a per-token loss of 0.69 / 8 = 0.09. Beside it:
        ``response_nll``, nats per whole response (the sum over its tokens, averaged over responses: 0.69 for a
        coin flip between two answers); ``token_accuracy``, the fraction of response tokens that are the model's
        argmax; and ``exact_match``, the fraction of responses whose every token is the argmax given the gold
        tokens before it, which is exactly when greedy decoding of the same prompt reproduces the response (so it
        agrees with the stage's greedy ``answer_accuracy`` on the same prompts, up to argmax ties)."""
        examples = self.splits[split]
        n = len(examples) if not max_batches else min(len(examples), max_batches * batch_size)
        order = sorted(range(n), key=lambda i: (len(examples[i][0]), i))
        total, count, right, exact = 0.0, 0, 0, 0
        with evaluating(model), torch.no_grad():
            for start in range(0, n, batch_size):
                x, y = (t.to(device) for t in self.collate([examples[i] for i in order[start: start + batch_size]]))
                with autocast():
                    logits, _ = model(x)
                scored = y != IGNORE
                total += F.cross_entropy(logits.float().flatten(0, 1), y.flatten(), ignore_index=IGNORE,
                                         reduction="sum").item()
                count += int(scored.sum())
                hit = (logits.argmax(-1) == y) & scored
                right += int(hit.sum())
                exact += int((hit | ~scored).all(dim=1).sum())
        loss = total / count
        return {"loss": loss, "ppl": math.exp(min(loss, 700.0)), "response_nll": total / max(n, 1),
                "token_accuracy": right / count, "exact_match": exact / max(n, 1), "response_tokens": float(count),
                "responses": float(n)}


def sft(model_cfg: Any, splits: Mapping[str, Any], settings: Any, pad_id: int) -> SFT:
    """(prompt, response) records, cut to the model's ``block_size``; rows packed when ``settings.pack``."""
    return SFT(splits, pad_id, model_cfg.block_size, pack=settings.pack)
