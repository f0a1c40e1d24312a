"""GloVe (Pennington et al., 2014): weighted least squares on global co-occurrence counts, in PyTorch.

    J = sum_{ij, X_ij > 0} f(X_ij) (w_i . c_j + b_i + b~_j - log X_ij)^2,  f(x) = min(1, (x / x_max)^alpha)

with alpha = 3/4. x_max defaults to 10, not the paper's 100: the paper's 100 was set for corpora of
billions of tokens; glove.c's own demo.sh (text8, 17M tokens) uses 10. On a small corpus almost no
count reaches 100 (PTB train, window 10, 1/d weighting: 0.11% of the 2.9M non-zero entries; median
count 0.33), so the mean weight f is 0.027 and the fit barely leaves its near-zero initialisation in
the usual 10-25 epochs: every vector stays dominated by one shared direction (mean cosine 0.47 among the
2,000 most frequent words). With x_max 10 the mean weight is 0.13 and the same budget fits
(PTB, dim 50, 10 epochs: analogy 0.26% -> 1.7%, WS-353 0.039 -> 0.157, mean cosine 0.09).
Like the reference C implementation:
- parameters start uniform in [-0.5, 0.5] / dim, biases too;
- the per-pair cost is 1/2 f (..)^2, so its gradient is f * (..) times the other vector;
- AdaGrad exactly as glove.c writes it, per co-occurrence entry: with g = lr * f * (..) * c_j,
  w_i -= g / sqrt(acc_i), then acc_i += g^2, accumulators starting at 1 and lr 0.05. Note that the
  learning rate sits *inside* the accumulated square, so the steps stay SGD-like for a long time.
  (torch.optim.Adagrad accumulates the raw squared gradient of a minibatch loss instead. An early
  version with a summed loss and x_max 100 collapsed every vector onto one shared direction; on the
  *mean* loss with lr 0.1 and x_max 10 it does not, and scores about like this rule on PTB. We keep
  glove.c's rule.)
- minibatches: every entry of a batch is computed from the parameters and accumulators as they were
  at the start of the batch, and the per-entry updates (and per-entry squared steps) are summed per
  row, the same approximation as the reference tool's lock-free threads, just synchronous. Averaging
  a row's steps instead of summing them only slows the fit down (WS-353 0.05 after 10 epochs).
  Summing makes a frequent word's step the sum of all its entries in the batch: its bias b_i moves by
  lr * sum_k f_k diff_k (over the batch's entries of row i, accumulators at 1 in the first steps) while
  the batch's cost has curvature sum_k f_k in b_i, so the step overshoots the batch's own optimum for
  b_i once lr * sum_k f_k > 1 and diverges a little further on (the coupled w_i . c_j terms grow with it).
  glove.c never sums: each thread updates entry by entry. So :func:`stable_batch_size` caps the batch
  at the size where the heaviest row's expected f-sum times lr is 1: ``batch <= nnz / (lr * max_i F_i)``,
  F_i = sum_j f(X_ij). Small corpora have few, dense rows: 2,000 lines of PTB (1,314 words, 106,818
  entries, the top row in 1.2% of them) gave lr * F = 8.7 per 32,768-entry batch: loss 12 -> 1.9e27 -> NaN
  (issue 35); capped: 3,788 entries, loss 0.083 -> 0.053 in 5 epochs, as with batch 1,024. Full PTB (window 5)
  is at lr * F = 4.6 with 32,768 (stable, but its first epoch overshoots: loss 0.139 against 0.098 with
  8,192), capped to about 7,150. With batches at lr * F = 4 a 500-line corpus overshoots (epoch losses
  0.35 then 1.35), at 2 its epoch losses are still up to 39% above batch 1,024's; at 1 no epoch's loss
  of 500 to 10,000 PTB lines or of Tiny Shakespeare is more than 6% above batch 1,024's (3 seeds, dims
  50-300, lr 0.05 and 0.2; final losses within 2%). The cap also makes lr 0.2 usable on PTB (it
  diverged with 32,768-entry batches; capped to about 1,800, inside the 1,024-4,096 found stable). Big corpora are not capped (the
  heaviest row is a small share of the entries). The batch used is reported (``batch_size``);
- the final embedding is word + context vectors (W + C), which the paper reports works slightly better.

Pure: no store, no tracking. Progress goes through ``on_epoch(epoch, metrics)``.
Runs on CUDA when asked for (``device="auto"`` picks it when present), on CPU otherwise. With a fixed
seed the CPU result is deterministic (shuffles come from a seeded generator).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn


@dataclass(frozen=True)
class GloveParams:
    """Hyperparameters of the fit (the tasks layer maps its config onto these)."""

    dim: int = field(default=100, metadata={"doc": "Vector size."})
    epochs: int = field(default=25, metadata={"doc": "Passes over the non-zero co-occurrence entries."})
    learning_rate: float = field(default=0.05, metadata={"doc": "AdaGrad learning rate (reference: 0.05)."})
    x_max: float = field(default=10.0, metadata={
        "doc": "Counts at or above x_max get weight 1 (10 as glove.c's demo for small corpora; the paper's 100 "
               "suits billions of tokens and underfits small corpora)."})
    alpha: float = field(default=0.75, metadata={"doc": "Exponent of the weighting function."})
    batch_size: int = field(default=32768, metadata={
        "doc": "Non-zero entries per AdaGrad step, at most: fewer where the most frequent word's entries would "
               "make its summed step overshoot (stable_batch_size)."})
    seed: int = field(default=1, metadata={"doc": "Seed for the initialisation and the shuffles."})

    def __post_init__(self) -> None:
        for name in ("dim", "epochs", "batch_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}: must be >= 1")
        if self.learning_rate <= 0 or self.x_max <= 0 or self.alpha <= 0:
            raise ValueError("learning_rate, x_max and alpha must be > 0")


def glove_weight(x: torch.Tensor, x_max: float = 100.0, alpha: float = 0.75) -> torch.Tensor:
    """f(x) = (x / x_max)^alpha below x_max, 1 from x_max on."""
    return torch.clamp(x / x_max, max=1.0).pow(alpha)


class GloVe(nn.Module):
    def __init__(self, vocab_size: int, dim: int, generator: torch.Generator):
        super().__init__()

        def init(*shape: int) -> nn.Parameter:
            return nn.Parameter((torch.rand(*shape, generator=generator, dtype=torch.float32) - 0.5) / dim)

        self.w, self.c = init(vocab_size, dim), init(vocab_size, dim)
        self.bw, self.bc = init(vocab_size), init(vocab_size)

    def forward(self, i: torch.Tensor, j: torch.Tensor) -> torch.Tensor:
        """w_i . c_j + b_i + b~_j for a batch of (i, j) pairs."""
        return (self.w[i] * self.c[j]).sum(dim=1) + self.bw[i] + self.bc[j]

    def embeddings(self) -> np.ndarray:
        return (self.w + self.c).detach().float().cpu().numpy()


def resolve_device(device: str = "auto") -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError("device: 'cuda' was asked for but no CUDA device is available")
    return torch.device(device)


@torch.no_grad()
def glove_step(model: GloVe, accumulators: dict[int, torch.Tensor], i: torch.Tensor, j: torch.Tensor,
               log_x: torch.Tensor, weight: torch.Tensor, lr: float) -> torch.Tensor:
    """One minibatch of reference-GloVe AdaGrad updates; returns the batch's summed cost (before the step)."""
    wi, cj = model.w[i], model.c[j]
    diff = (wi * cj).sum(dim=1) + model.bw[i] + model.bc[j] - log_x
    fdiff = weight * diff
    cost = 0.5 * (fdiff * diff).sum()
    fdiff = lr * fdiff
    for param, idx, grad in ((model.w, i, fdiff[:, None] * cj), (model.c, j, fdiff[:, None] * wi),
                             (model.bw, i, fdiff), (model.bc, j, fdiff)):
        acc = accumulators.setdefault(id(param), torch.ones_like(param))  # reference: gradsq starts at 1
        param.index_add_(0, idx, -grad / acc[idx].sqrt())
        acc.index_add_(0, idx, grad * grad)
    return cost


def stable_batch_size(i: torch.Tensor, j: torch.Tensor, weight: torch.Tensor, vocab_size: int, lr: float,
                      batch_size: int) -> int:
    """The batch size the fit uses: ``batch_size``, capped at ``nnz / (lr * max F)`` where F is a row's (or a
    column's) summed weight f(X): a batch then holds, on average, at most 1 / lr of the heaviest word's
    weight, so that word's summed stale step never overshoots the batch's optimum for its bias (module docstring)."""
    heaviest = max(float(torch.zeros(vocab_size, dtype=torch.float64, device=weight.device)
                         .index_add_(0, idx, weight.double()).max()) for idx in (i, j))
    if heaviest <= 0:
        return batch_size
    # never below 64 entries: a learning rate that needs fewer diverges anyway, and one entry per step would take
    # hours on a large corpus before the step could say so
    return min(batch_size, max(64, int(weight.numel() / (lr * heaviest))))


def glove_loss(model: GloVe, i: torch.Tensor, j: torch.Tensor, log_x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """Sum over the batch of 1/2 f(X_ij) (w_i . c_j + b_i + b~_j - log X_ij)^2."""
    diff = model(i, j) - log_x
    return 0.5 * (weight * diff * diff).sum()


def fit_glove(
    rows: np.ndarray,
    cols: np.ndarray,
    counts: np.ndarray,
    vocab_size: int,
    params: GloveParams = GloveParams(),
    device: str = "auto",
    on_epoch: Callable[[int, dict[str, float]], None] | None = None,
) -> tuple[np.ndarray, list[dict[str, float]]]:
    """Fit GloVe on the non-zero entries (rows[k], cols[k], counts[k]); return (W + C, per-epoch metrics).

    The reported ``loss`` is the mean per-pair cost 1/2 f (..)^2 over the epoch; ``batch_size`` is the batch
    the fit used (``params.batch_size`` or less: :func:`stable_batch_size`).
    """
    dev = resolve_device(device)
    gen = torch.Generator().manual_seed(params.seed)
    model = GloVe(vocab_size, params.dim, gen).to(dev)
    accumulators: dict[int, torch.Tensor] = {}
    i_all = torch.as_tensor(np.asarray(rows, dtype=np.int64), device=dev)
    j_all = torch.as_tensor(np.asarray(cols, dtype=np.int64), device=dev)
    x_all = torch.as_tensor(np.asarray(counts, dtype=np.float32), device=dev)
    if x_all.numel() == 0:
        raise ValueError("no co-occurrences to fit: the corpus is too small for this vocabulary and window")
    log_all = torch.log(x_all)
    f_all = glove_weight(x_all, params.x_max, params.alpha)
    n = x_all.numel()
    batch_size = stable_batch_size(i_all, j_all, f_all, vocab_size, params.learning_rate, params.batch_size)
    history: list[dict[str, float]] = []
    for epoch in range(1, params.epochs + 1):
        t0 = time.perf_counter()
        order = torch.randperm(n, generator=gen).to(dev)
        total = torch.zeros((), device=dev, dtype=torch.float64)
        for start in range(0, n, batch_size):
            idx = order[start : start + batch_size]
            cost = glove_step(model, accumulators, i_all[idx], j_all[idx], log_all[idx], f_all[idx],
                              params.learning_rate)
            total += cost.double()
        if dev.type == "cuda":
            torch.cuda.synchronize()
        metrics = {"loss": float(total) / n, "epoch_seconds": time.perf_counter() - t0, "batch_size": batch_size}
        history.append(metrics)
        if on_epoch is not None:
            on_epoch(epoch, metrics)
    return model.embeddings(), history
