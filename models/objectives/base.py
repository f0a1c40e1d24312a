"""What every objective shares: the interface the trainer uses (:class:`Objective`, :class:`Batch`), the
ignored-target id, eval mode for a block, BERT's masking, and the loss's metrics."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable
from typing import Any

import torch
import torch.nn as nn
from dataclasses import dataclass

LN2 = math.log(2.0)
IGNORE = -100  # F.cross_entropy's ignore_index: positions that carry no loss


@contextlib.contextmanager
def evaluating(model: nn.Module):
    """``model`` in eval mode (dropout off) for the block, and back in the mode it was in after it."""
    was_training = model.training
    model.eval()
    try:
        yield model
    finally:
        model.train(was_training)


def mask_tokens(x: torch.Tensor, chosen: torch.Tensor, mask_id: int, vocab_size: int,
                gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """BERT's corruption of the ``chosen`` positions of ``x`` (B, T): 80% become ``mask_id``, 10% a random token,
    10% stay (Devlin et al. 2019, appendix A.1); (inputs, targets), the targets ``IGNORE`` where nothing was chosen.
    The masked LM and BERT pre-training choose the positions their way and corrupt them here."""
    B, T = x.shape
    action = torch.rand(B, T, generator=gen)
    random_ids = torch.randint(vocab_size, (B, T), generator=gen)
    inputs = x.clone()
    inputs[chosen & (action < 0.8)] = mask_id
    swap = chosen & (action >= 0.8) & (action < 0.9)
    inputs[swap] = random_ids[swap]
    return inputs, torch.where(chosen, x, torch.full_like(x, IGNORE))


@dataclass
class Batch:
    """One micro-batch: the loss module's tensor inputs (on the CPU; the trainer moves them), how many input
    tokens it holds (tokens/s and MFU count these), whether the carried state starts afresh, and ``terms``: how many
    terms the loss module's mean is over (target tokens; examples for a per-example loss). The trainer weights each
    micro-batch's mean by its terms, so a step's loss is the mean over all the step's terms, whatever the padding
    and however they fall into micro-batches and ranks (models/training.py ``micro_weights``). None: a loss that
    mixes means over different things (BERT's MLM + NSP); each micro-batch then weighs the same."""

    tensors: tuple[torch.Tensor, ...]
    tokens: int
    fresh: bool = False
    terms: int | None = None


class Objective:
    """The interface the trainer uses. ``batch(index, gen)`` gives micro-batch ``index`` (a running count over
    the whole run: step * grad_accum + micro), drawing any randomness from ``gen`` (the trainer saves it in its
    checkpoints, so a resumed run draws the same batches). ``loss_module(model)`` returns a module whose
    ``forward(*batch.tensors, state)`` is ``(mean loss, new state)``. ``evaluate(model, split, ...)`` returns the
    split's metrics without prefix (``loss`` first, in nats: the trainer keeps the weights of the lowest).
    ``loss_unit`` says what the loss is a mean over (the loss curve's axis)."""

    loss_unit = "nats/token"

    def setup(self, model: nn.Module, batch_size: int, rank: int = 0, world: int = 1) -> None:
        """Called once before training, with the micro-batch size and the DDP rank/world size."""

    def batch(self, index: int, gen: torch.Generator) -> Batch:
        raise NotImplementedError

    def loss_module(self, model: nn.Module) -> nn.Module:
        raise NotImplementedError

    def carry(self, state: Any) -> Any:
        """What of the new state the next batch gets (the default: nothing)."""
        return None

    def evaluate(self, model: nn.Module, split: str, batch_size: int, max_batches: int = 0,
                 device: torch.device | str = "cpu", autocast: Callable = contextlib.nullcontext) -> dict[str, float]:
        raise NotImplementedError

    def has_split(self, split: str) -> bool:
        raise NotImplementedError

    def flops_per_token(self, model: nn.Module) -> float:
        """Training FLOPs per input token, for MFU (0: unknown)."""
        return 0.0


def loss_metrics(loss: float) -> dict[str, float]:
    """Mean cross-entropy in nats -> loss, perplexity exp(loss), bits per token loss / ln 2."""
    return {"loss": loss, "ppl": math.exp(min(loss, 700.0)), "bpt": loss / LN2}
