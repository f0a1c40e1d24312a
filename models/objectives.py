"""Training objectives: what a task asks of the one trainer (corpusforge.models.training).

The trainer knows no task. An objective makes the batches, wraps the model in the module that computes the
loss (so the model and its loss compile as one graph), says whether a state is carried from one batch to the
next, and evaluates with its own metrics (the Annotated Transformer's ``loss_compute``, torchtitan's loss
config, sentence-transformers' losses that wrap the model). The language-model objectives here:

- :class:`CausalLM`: random windows of the token stream, each position predicts the next token (nanoGPT);
- :class:`TruncatedBPTT`: ``batch_size`` contiguous streams read in order, the recurrent state carried from one
  batch to the next and detached at every boundary (Zaremba et al. 2014);
- :class:`MaskedLM`: random windows, ~15% of positions chosen, 80% of those replaced by the tokenizer's
  ``[MASK]``, 10% by a random token, 10% kept; the loss on the chosen positions only (Devlin et al. 2019).

:class:`BertPretraining` (masked LM plus next-sentence prediction over ``[CLS] A [SEP] B [SEP]`` pairs made of the
stream's documents) and, on records: :class:`Classification`, :class:`Contrastive` (sentence pairs, in-batch
negatives) (labelled sequences) and :class:`Seq2Seq` (source-target pairs: teacher
forcing, label smoothing, padding ignored).

A family names its default objective in its spec (``objective="corpusforge.models.objectives:causal_lm"``); the
factories below build one from the model's config and the token splits.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

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


class NextTokenLoss(nn.Module):
    """A model and its mean cross-entropy as one module: ``(x, y, state) -> (loss, state)``.

    Compiled as one graph, the cross-entropy is fused into the head's output: the float32 copy of the
    (batch, block, vocab) logits and its log-softmax are never written out (nanoGPT computes its loss
    inside the compiled forward for the same reason). Targets of ``IGNORE`` carry no loss (masked LM)."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, x: torch.Tensor, y: torch.Tensor, state: Any = None) -> tuple[torch.Tensor, Any]:
        logits, new_state = self.model(x, state)
        return F.cross_entropy(logits.float().flatten(0, 1), y.flatten()), new_state


def as_tokens(data: Any) -> np.ndarray:
    arr = np.asarray(data)
    if arr.ndim != 1:
        raise ValueError("token data must be a flat 1-D array of ids")
    return arr


def random_windows(data: np.ndarray, block: int, batch: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """``batch`` random windows of ``block`` tokens and their one-step-shifted targets (nanoGPT)."""
    starts = torch.randint(len(data) - block - 1 + 1, (batch,), generator=gen).numpy()
    rows = starts[:, None] + np.arange(block + 1)
    chunk = torch.from_numpy(data[rows].astype(np.int64))
    return chunk[:, :-1], chunk[:, 1:]


class StreamBatches:
    """Contiguous streams for recurrent models: the data is cut into ``batch`` equal rows and read left to
    right ``block`` steps at a time, so row b of batch k+1 continues row b of batch k."""

    def __init__(self, data: np.ndarray, block: int, batch: int, part: int = 0, parts: int = 1):
        n = (len(data) - 1) // (batch * parts)
        if n <= block:
            raise ValueError(f"a split of {len(data)} tokens is too short for {batch * parts} streams of >{block} tokens")
        rows = range(part * batch, (part + 1) * batch)  # under DDP each rank reads its own rows
        self.x = np.stack([data[b * n: b * n + n] for b in rows])
        self.y = np.stack([data[b * n + 1: b * n + n + 1] for b in rows])
        self.block, self.per_epoch = block, n // block

    def get(self, k: int) -> tuple[torch.Tensor, torch.Tensor, bool]:
        """Batch k (wrapping around); the flag says a new pass starts (the state must be reset)."""
        j = k % self.per_epoch
        s = slice(j * self.block, (j + 1) * self.block)
        return (torch.from_numpy(self.x[:, s].astype(np.int64)), torch.from_numpy(self.y[:, s].astype(np.int64)), j == 0)


def detach_state(state: Any) -> Any:
    """Cut the graph at the batch boundary (truncated BPTT) while keeping the values."""
    if state is None:
        return None
    if isinstance(state, tuple):
        return tuple(s.detach() for s in state)
    return state.detach()


class TokenStream(Objective):
    """A language-modelling objective over flat token splits (``train``, ``valid``, ``test``; 1-D id arrays)."""

    def __init__(self, splits: Mapping[str, Any], block: int):
        self.splits = {name: as_tokens(data) for name, data in splits.items() if data is not None}
        if "train" not in self.splits:
            raise ValueError("the train split is empty: nothing to train on")
        self.block = block

    def has_split(self, split: str) -> bool:
        return split in self.splits

    def loss_module(self, model: nn.Module) -> nn.Module:
        return NextTokenLoss(model)

    def flops_per_token(self, model: nn.Module) -> float:
        return model.flops_per_token(self.block) if hasattr(model, "flops_per_token") else 0.0

    def _windows_score(self, model, data, batch_size, max_batches, device, autocast, prepare=None) -> dict[str, float]:
        """Mean cross-entropy over consecutive non-overlapping windows of the split (deterministic); ``prepare``
        turns (x, y) into what is scored (masked LM)."""
        total, count = 0.0, 0
        windows = (len(data) - 1) // self.block
        starts = np.arange(windows) * self.block
        if max_batches:
            starts = starts[: max_batches * batch_size]
        for i in range(0, len(starts), batch_size):
            rows = starts[i: i + batch_size, None] + np.arange(self.block + 1)
            chunk = torch.from_numpy(data[rows].astype(np.int64))
            x, y = chunk[:, :-1], chunk[:, 1:]
            if prepare is not None:
                x, y = prepare(x, y)
            x, y = x.to(device), y.to(device)
            with autocast():
                logits, _ = model(x)
            total += F.cross_entropy(logits.float().flatten(0, 1), y.flatten(), reduction="sum").item()
            count += int((y != IGNORE).sum())
        return self._mean(total, count, data)

    def _mean(self, total: float, count: int, data) -> dict[str, float]:
        if count == 0:
            raise ValueError(f"the evaluation split ({len(data)} tokens) is shorter than one window of {self.block + 1}")
        self.scored_tokens = count  # how many predictions the last evaluation scored (lm evaluate reports it)
        return loss_metrics(total / count)

    def evaluate(self, model, split, batch_size, max_batches=0, device="cpu", autocast=contextlib.nullcontext):
        with evaluating(model):
            with torch.no_grad():
                return self._score(model, self.splits[split], batch_size, max_batches, device, autocast)

    def _score(self, model, data, batch_size, max_batches, device, autocast) -> dict[str, float]:
        return self._windows_score(model, data, batch_size, max_batches, device, autocast)


class CausalLM(TokenStream):
    """Random windows; every position predicts the next token."""

    def batch(self, index: int, gen: torch.Generator) -> Batch:
        x, y = random_windows(self.splits["train"], self.block, self.batch_size, gen)
        return Batch((x, y), x.numel(), terms=y.numel())

    def setup(self, model, batch_size, rank=0, world=1) -> None:
        self.batch_size = batch_size


class TruncatedBPTT(TokenStream):
    """Contiguous streams read in order; the state flows from batch to batch, detached at each boundary (the
    trainer keeps it in its checkpoints)."""

    def setup(self, model, batch_size, rank=0, world=1) -> None:
        self.streams = StreamBatches(self.splits["train"], self.block, batch_size, rank, world)

    def batch(self, index: int, gen: torch.Generator) -> Batch:
        x, y, fresh = self.streams.get(index)
        return Batch((x, y), x.numel(), fresh, terms=y.numel())

    def carry(self, state: Any) -> Any:
        return detach_state(state)

    def _score(self, model, data, batch_size, max_batches, device, autocast) -> dict[str, float]:
        """The split as ``batch_size`` contiguous streams, the state carried through."""
        streams = StreamBatches(data, self.block, min(batch_size, max(1, (len(data) - 1) // (self.block + 1))))
        n = streams.per_epoch if not max_batches else min(max_batches, streams.per_epoch)
        total, count, state = 0.0, 0, None
        for k in range(n):
            x, y, _ = streams.get(k)
            with autocast():
                logits, state = model(x.to(device), state)
            total += F.cross_entropy(logits.float().flatten(0, 1), y.to(device).flatten(), reduction="sum").item()
            count += y.numel()
        return self._mean(total, count, data)


class MaskedLM(TokenStream):
    """Random windows with ~``mask_prob`` of the positions chosen: 80% of those become ``mask_id``, 10% a random
    token, 10% stay; the loss is the cross-entropy of the original tokens at the chosen positions. Evaluation
    masks with the same draws every time (a generator seeded 0), so its figure is comparable across runs."""

    def __init__(self, splits: Mapping[str, Any], block: int, vocab_size: int, mask_id: int, mask_prob: float = 0.15):
        super().__init__(splits, block)
        if mask_id is None or not 0 <= mask_id < vocab_size:
            raise ValueError(f"mask_id: a masked LM needs the tokenizer's mask token id, got {mask_id}")
        self.vocab_size, self.mask_id, self.mask_prob = vocab_size, mask_id, mask_prob

    def setup(self, model, batch_size, rank=0, world=1) -> None:
        self.batch_size = batch_size

    def mask(self, x: torch.Tensor, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        """(inputs, targets) for the masked-LM loss from windows ``x`` (B, T); targets are ``IGNORE`` where no
        prediction is asked. Every row gets at least one chosen position."""
        B, T = x.shape
        chosen = torch.rand(B, T, generator=gen) < self.mask_prob
        forced = torch.randint(T, (B,), generator=gen)
        chosen[torch.arange(B), forced] |= ~chosen.any(dim=1)  # a row with nothing chosen gets one position
        return mask_tokens(x, chosen, self.mask_id, self.vocab_size, gen)

    def batch(self, index: int, gen: torch.Generator) -> Batch:
        x, _ = random_windows(self.splits["train"], self.block, self.batch_size, gen)
        x, y = self.mask(x, gen)
        return Batch((x, y), x.numel(), terms=int((y != IGNORE).sum()))

    def _score(self, model, data, batch_size, max_batches, device, autocast) -> dict[str, float]:
        gen = torch.Generator().manual_seed(0)
        return self._windows_score(model, data, batch_size, max_batches, device, autocast,
                                   prepare=lambda x, _y: self.mask(x, gen))


# --- BERT pre-training: sentence pairs ---------------------------------------------------------------------

class BertPretrainingLoss(nn.Module):
    """BERT and its pre-training loss as one module: ``(ids, segments, key_mask, targets, is_next, state) ->
    (masked-LM cross-entropy + next-sentence cross-entropy, None)``."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, ids, segments, key_mask, targets, is_next, state: Any = None):
        mlm, nsp = self.model.pretrain(ids, segments, key_mask)
        loss = F.cross_entropy(mlm.float().flatten(0, 1), targets.flatten(), ignore_index=IGNORE)
        if nsp is not None:
            loss = loss + F.cross_entropy(nsp.float(), is_next)
        return loss, None


def sentences_of(data: np.ndarray, eot_id: int) -> list[np.ndarray]:
    """The documents of an encoded stream (each followed by ``eot_id``), without the separators; empty ones dropped."""
    cuts = np.flatnonzero(np.asarray(data) == eot_id)
    starts = np.concatenate(([0], cuts + 1))
    ends = np.concatenate((cuts, [len(data)]))
    return [np.asarray(data[a:b]) for a, b in zip(starts, ends) if b > a]


class BertPretraining(Objective):
    """Masked LM plus next-sentence prediction over sentence pairs (Devlin et al. 2019, section 3.1 and appendix
    A.1). The documents of the token stream (one per line of a line-mode corpus, separated by ``eot_id``) are the
    sentences. Each example is ``[CLS] A [SEP] B [SEP]`` with segment ids 0 for ``[CLS] A [SEP]`` and 1 for
    ``B [SEP]``: A is a random sentence, B the one after it (IsNext, label 1) for half the examples, a random one
    (NotNext, label 0) for the other half; the longer of the two loses tokens from its end until the pair fits
    ``block`` positions. Of the real tokens other than [CLS]/[SEP], ~``mask_prob`` are chosen (at least one per
    example): 80% become [MASK], 10% a random token, 10% stay. Batches are padded to their longest pair with
    [PAD] (never attended to, never scored). Without ``nsp``, each example is ``[CLS] A [SEP]`` and the loss is the
    masked LM's alone. The loss is their sum; evaluation draws the same examples every time (a generator seeded 0)
    and reports ``loss`` (the sum), ``mlm_loss``, ``ppl`` (exp of the masked-LM loss) and ``nsp_accuracy``."""

    loss_unit = "nats (masked-token mean + next-sentence mean)"

    def __init__(self, splits: Mapping[str, Any], block: int, vocab_size: int, mask_id: int, cls_id: int,
                 sep_id: int, pad_id: int, eot_id: int, mask_prob: float = 0.15, nsp: bool = True,
                 eval_examples: int = 4096):
        ids = {"mask_id": mask_id, "cls_id": cls_id, "sep_id": sep_id, "pad_id": pad_id, "eot_id": eot_id}
        missing = [k for k, v in ids.items() if v is None]
        if missing:
            raise ValueError(f"{', '.join(missing)}: BERT pre-training needs the tokenizer's mask, cls, sep, pad "
                             "roles and its eot_token (documents end with it)")
        self.sentences = {}
        for name, data in splits.items():
            if data is None:
                continue
            found = sentences_of(as_tokens(data), eot_id)
            if len(found) >= 2:
                self.sentences[name] = found
        if "train" not in self.sentences:
            raise ValueError("the train split has fewer than 2 documents: BERT's pairs need sentences (one per line)")
        self.block, self.vocab_size, self.mask_prob, self.nsp = block, vocab_size, mask_prob, nsp
        self.mask_id, self.cls_id, self.sep_id, self.pad_id = mask_id, cls_id, sep_id, pad_id
        self.eval_examples = eval_examples

    def has_split(self, split: str) -> bool:
        return split in self.sentences

    def setup(self, model, batch_size, rank=0, world=1) -> None:
        self.batch_size = batch_size

    def loss_module(self, model: nn.Module) -> nn.Module:
        return BertPretrainingLoss(model)

    def flops_per_token(self, model: nn.Module) -> float:
        return model.flops_per_token(self.block) if hasattr(model, "flops_per_token") else 0.0

    def pair(self, sentences: list[np.ndarray], gen: torch.Generator) -> tuple[list[int], list[int], int]:
        """One example: (ids, segment ids, is_next 1/0). Without NSP: [CLS] A [SEP], is_next 0."""
        n = len(sentences)
        i = int(torch.randint(n - 1, (1,), generator=gen))
        a = [int(t) for t in sentences[i]]
        if not self.nsp:
            a = a[: self.block - 2]
            return [self.cls_id, *a, self.sep_id], [0] * (len(a) + 2), 0
        is_next = int(torch.rand(1, generator=gen) < 0.5)
        j = i + 1 if is_next else int(torch.randint(n, (1,), generator=gen))
        b = [int(t) for t in sentences[j]]
        while len(a) + len(b) > self.block - 3:  # BERT's truncate_seq_pair: the longer one loses a token
            (a if len(a) >= len(b) else b).pop()
        ids = [self.cls_id, *a, self.sep_id, *b, self.sep_id]
        return ids, [0] * (len(a) + 2) + [1] * (len(b) + 1), is_next

    def collate(self, examples: list[tuple[list[int], list[int], int]], gen: torch.Generator) -> tuple[torch.Tensor, ...]:
        """(ids, segments, key_mask, targets, is_next): padded to the longest example, then masked."""
        T = max(len(e[0]) for e in examples)
        B = len(examples)
        x = torch.full((B, T), self.pad_id, dtype=torch.long)
        seg = torch.zeros(B, T, dtype=torch.long)
        real = torch.zeros(B, T, dtype=torch.bool)
        for r, (ids, segs, _) in enumerate(examples):
            x[r, : len(ids)] = torch.tensor(ids)
            seg[r, : len(segs)] = torch.tensor(segs)
            real[r, : len(ids)] = True
        is_next = torch.tensor([e[2] for e in examples], dtype=torch.long)
        maskable = real & (x != self.cls_id) & (x != self.sep_id)
        chosen = (torch.rand(B, T, generator=gen) < self.mask_prob) & maskable
        weights = maskable.float() + 1e-9  # a row with nothing chosen gets one maskable position
        forced = torch.multinomial(weights, 1, generator=gen).squeeze(1)
        chosen[torch.arange(B), forced] |= ~chosen.any(dim=1) & maskable[torch.arange(B), forced]
        inputs, targets = mask_tokens(x, chosen, self.mask_id, self.vocab_size, gen)
        return inputs, seg, real, targets, is_next

    def batch(self, index: int, gen: torch.Generator) -> Batch:
        train = self.sentences["train"]
        tensors = self.collate([self.pair(train, gen) for _ in range(self.batch_size)], gen)
        return Batch(tensors, int(tensors[2].sum()))

    def evaluate(self, model, split, batch_size, max_batches=0, device="cpu", autocast=contextlib.nullcontext):
        """The same ``eval_examples`` pairs every time (``max_batches * batch_size`` when smaller)."""
        sentences = self.sentences[split]
        n = self.eval_examples if not max_batches else min(self.eval_examples, max_batches * batch_size)
        gen = torch.Generator().manual_seed(0)
        mlm_total, mlm_count, nsp_total, nsp_right = 0.0, 0, 0.0, 0
        with evaluating(model):
            with torch.no_grad():
                for start in range(0, n, batch_size):
                    examples = [self.pair(sentences, gen) for _ in range(min(batch_size, n - start))]
                    ids, seg, real, targets, is_next = (t.to(device) for t in self.collate(examples, gen))
                    with autocast():
                        mlm, nsp = model.pretrain(ids, seg, real)
                    mlm_total += F.cross_entropy(mlm.float().flatten(0, 1), targets.flatten(), ignore_index=IGNORE,
                                                 reduction="sum").item()
                    mlm_count += int((targets != IGNORE).sum())
                    if nsp is not None:
                        nsp_total += F.cross_entropy(nsp.float(), is_next, reduction="sum").item()
                        nsp_right += int((nsp.argmax(-1) == is_next).sum())
        mlm_loss = mlm_total / mlm_count
        out = {"loss": mlm_loss + (nsp_total / n if self.nsp else 0.0), "mlm_loss": mlm_loss,
               "ppl": math.exp(min(mlm_loss, 700.0))}
        if self.nsp:
            out["nsp_accuracy"] = nsp_right / n
        return out


# --- labelled sequences ----------------------------------------------------------------------------------------

class ClassifierLoss(nn.Module):
    """A classifier and its mean cross-entropy as one module: ``(ids, mask, labels, state) -> (loss, None)``; the
    model maps ``(ids (B, T), mask (B, T))`` to class logits ``(B, C)`` (the ``classify`` capability)."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, ids: torch.Tensor, mask: torch.Tensor, labels: torch.Tensor, state: Any = None):
        return F.cross_entropy(self.model(ids, mask).float(), labels), None


class Classification(Objective):
    """Labelled sequences: each split is ``(sequences, labels)`` (lists of token ids, class indices). Batches are
    length-bucketed and padded with ``pad_id`` (corpusforge.models.batching), reshuffled every epoch; the loss is
    the cross-entropy of the class; evaluation reports the loss and the accuracy over the whole split."""

    loss_unit = "nats/example"

    def __init__(self, splits: Mapping[str, tuple[Any, Any]], pad_id: int, max_len: int | None = None,
                 seed: int = 0):
        self.splits = {k: (list(v[0]), torch.as_tensor(np.asarray(v[1]), dtype=torch.long))
                       for k, v in splits.items() if v is not None and len(v[0])}
        if "train" not in self.splits:
            raise ValueError("the train split is empty: nothing to train on")
        self.pad_id, self.max_len, self.seed = pad_id, max_len, seed

    def has_split(self, split: str) -> bool:
        return split in self.splits

    def setup(self, model, batch_size, rank=0, world=1) -> None:
        from corpusforge.models.batching import EpochBatches

        sequences, _ = self.splits["train"]
        self.batches = EpochBatches([len(s) for s in sequences], batch_size, self.seed, rank, world)

    def _collate(self, split: str, indices: list[int]) -> tuple[torch.Tensor, ...]:
        from corpusforge.models.batching import pad

        sequences, labels = self.splits[split]
        ids, mask = pad([sequences[i] for i in indices], self.pad_id, self.max_len)
        return ids, mask, labels[indices]

    def batch(self, index: int, gen: torch.Generator) -> Batch:
        indices, _ = self.batches.get(index)
        ids, mask, labels = self._collate("train", indices)
        return Batch((ids, mask, labels), int(mask.sum()), terms=labels.numel())

    def loss_module(self, model: nn.Module) -> nn.Module:
        return ClassifierLoss(model)

    def evaluate(self, model, split, batch_size, max_batches=0, device="cpu", autocast=contextlib.nullcontext):
        total, correct, count = 0.0, 0, 0
        with evaluating(model):
            with torch.no_grad():
                n = len(self.splits[split][0])
                for b, start in enumerate(range(0, n, batch_size)):
                    if max_batches and b >= max_batches:
                        break
                    ids, mask, labels = (t.to(device) for t in self._collate(split, list(range(start, min(n, start + batch_size)))))
                    with autocast():
                        logits = model(ids, mask).float()
                    total += F.cross_entropy(logits, labels, reduction="sum").item()
                    correct += int((logits.argmax(-1) == labels).sum())
                    count += len(labels)
        return {"loss": total / count, "accuracy": correct / count}


# --- source-target pairs (encoder-decoders) ---------------------------------------------------------------------

class Seq2SeqLoss(nn.Module):
    """An encoder-decoder and its label-smoothed cross-entropy as one module:
    ``(src, src_mask, tgt_in, tgt_mask, target, state) -> (loss, None)``; the model maps
    ``(src, src_mask, tgt_in, tgt_mask)`` to logits ``(B, T_tgt, V)`` (the ``translate`` capability). Targets of
    ``IGNORE`` (padding) carry no loss, and the mean is over the real target tokens."""

    def __init__(self, model: nn.Module, label_smoothing: float = 0.0):
        super().__init__()
        self.model, self.label_smoothing = model, label_smoothing

    def forward(self, src, src_mask, tgt_in, tgt_mask, target, state: Any = None):
        logits = self.model(src, src_mask, tgt_in, tgt_mask)
        return F.cross_entropy(logits.float().flatten(0, 1), target.flatten(), ignore_index=IGNORE,
                               label_smoothing=self.label_smoothing), None


class Seq2Seq(Objective):
    """Source-target pairs: each split is ``(sources, targets)``, lists of token-id lists without bos/eos. A pair
    becomes ``src``, ``tgt_in = [bos] + target`` (what the decoder reads, teacher forcing) and
    ``target + [eos]`` (what it predicts), each cut to ``max_len``; batches are length-bucketed and padded
    (corpusforge.models.batching), reshuffled every epoch and found again by number (exact resume). The loss is the
    cross-entropy over the real target tokens, label-smoothed (Szegedy et al. 2016; the Transformer's 0.1); the
    trainer counts the real target tokens. Evaluation: the plain (unsmoothed) cross-entropy per target token and
    its perplexity over the split."""

    def __init__(self, splits: Mapping[str, tuple[Any, Any]], pad_id: int, bos_id: int, eos_id: int,
                 label_smoothing: float = 0.0, max_len: int | None = None, seed: int = 0):
        if None in (pad_id, bos_id, eos_id):
            raise ValueError(f"pad_id, bos_id, eos_id: an encoder-decoder needs the tokenizer's pad, bos and eos "
                             f"roles, got {pad_id}, {bos_id}, {eos_id}")
        if max_len is not None and max_len < 2:
            raise ValueError(f"max_len: must be >= 2 (bos or eos and one token), got {max_len}")
        self.splits = {}
        for name, pair in splits.items():
            if pair is None or not len(pair[0]):
                continue
            sources, targets = list(pair[0]), list(pair[1])
            if len(sources) != len(targets):
                raise ValueError(f"split {name}: {len(sources)} sources but {len(targets)} targets")
            self.splits[name] = (sources, targets)
        if "train" not in self.splits:
            raise ValueError("the train split is empty: nothing to train on")
        self.pad_id, self.bos_id, self.eos_id = pad_id, bos_id, eos_id
        self.label_smoothing, self.max_len, self.seed = label_smoothing, max_len, seed

    def has_split(self, split: str) -> bool:
        return split in self.splits

    def setup(self, model, batch_size, rank=0, world=1) -> None:
        from corpusforge.models.batching import EpochBatches

        sources, targets = self.splits["train"]
        lengths = [len(s) + len(t) for s, t in zip(sources, targets)]  # buckets of similar total length
        self.batches = EpochBatches(lengths, batch_size, self.seed, rank, world)

    def collate(self, sources: Any, targets: Any) -> tuple[torch.Tensor, ...]:
        """``(src, src_mask, tgt_in, tgt_mask, target)``; ``target`` is ``IGNORE`` past each row's end. A target
        cut by ``max_len`` loses its eos (it did not end there)."""
        from corpusforge.models.batching import pad

        cut = self.max_len
        src, src_mask = pad([list(s) for s in sources], self.pad_id, cut)
        tgt_in, tgt_mask = pad([[self.bos_id, *t] for t in targets], self.pad_id, cut)
        target, _ = pad([[*t, self.eos_id] for t in targets], IGNORE, cut)
        return src, src_mask, tgt_in, tgt_mask, target

    def _pairs(self, split: str, indices: list[int]) -> tuple[torch.Tensor, ...]:
        sources, targets = self.splits[split]
        return self.collate([sources[i] for i in indices], [targets[i] for i in indices])

    def batch(self, index: int, gen: torch.Generator) -> Batch:
        indices, _ = self.batches.get(index)
        tensors = self._pairs("train", indices)
        return Batch(tensors, int(tensors[3].sum()), terms=int((tensors[4] != IGNORE).sum()))

    def loss_module(self, model: nn.Module) -> nn.Module:
        return Seq2SeqLoss(model, self.label_smoothing)

    def flops_per_token(self, model: nn.Module) -> float:
        return model.flops_per_token() if hasattr(model, "flops_per_token") else 0.0

    def evaluate(self, model, split, batch_size, max_batches=0, device="cpu", autocast=contextlib.nullcontext):
        """The first ``max_batches * batch_size`` pairs (all with 0), batched by length (little padding; the sum
        does not depend on the order)."""
        sources, targets = self.splits[split]
        n = len(sources) if not max_batches else min(len(sources), max_batches * batch_size)
        order = sorted(range(n), key=lambda i: (len(sources[i]) + len(targets[i]), i))
        total, count = 0.0, 0
        with evaluating(model):
            with torch.no_grad():
                for start in range(0, n, batch_size):
                    src, src_mask, tgt_in, tgt_mask, target = (
                        t.to(device) for t in self._pairs(split, order[start: start + batch_size]))
                    with autocast():
                        logits = model(src, src_mask, tgt_in, tgt_mask)
                    total += F.cross_entropy(logits.float().flatten(0, 1), target.flatten(), ignore_index=IGNORE,
                                             reduction="sum").item()
                    count += int(tgt_mask.sum())
        loss = total / count
        return {"loss": loss, "ppl": math.exp(min(loss, 700.0))}


# --- sentence pairs (sentence embeddings) -----------------------------------------------------------------------

class ContrastiveLoss(nn.Module):
    """A sentence encoder and the in-batch contrastive loss as one module: ``(a, a_mask, b, b_mask, state) ->
    (loss, None)``. Row i of the batch's (B, B) matrix of scaled cosine similarities should peak at column i: the
    cross-entropy against the diagonal (van den Oord et al. 2018's InfoNCE; sentence-transformers'
    MultipleNegativesRankingLoss), averaged with the transposed matrix's when ``symmetric``."""

    def __init__(self, model: nn.Module, scale: float = 20.0, symmetric: bool = True):
        super().__init__()
        self.model, self.scale, self.symmetric = model, scale, symmetric

    def forward(self, a, a_mask, b, b_mask, state: Any = None):
        return in_batch_loss(self.model(a, a_mask).float(), self.model(b, b_mask).float(), self.scale,
                             self.symmetric), None


def in_batch_loss(ea: torch.Tensor, eb: torch.Tensor, scale: float, symmetric: bool = True) -> torch.Tensor:
    sim = scale * F.normalize(ea, dim=-1) @ F.normalize(eb, dim=-1).T
    target = torch.arange(len(sim), device=sim.device)
    loss = F.cross_entropy(sim, target)
    return (loss + F.cross_entropy(sim.T, target)) / 2 if symmetric else loss


def retrieval_scores(ea: torch.Tensor, eb: torch.Tensor, chunk: int = 1024) -> dict[str, float]:
    """Each ``ea`` row's partner is the same row of ``eb``: ``top1`` (the share found first among all of ``eb`` by
    cosine similarity), ``top5`` and ``mrr`` (mean reciprocal rank); ties count against the partner."""
    a, b = F.normalize(ea.float(), dim=-1), F.normalize(eb.float(), dim=-1)
    ranks = []
    for start in range(0, len(a), chunk):
        sim = a[start: start + chunk] @ b.T
        own = sim[torch.arange(len(sim)), torch.arange(start, start + len(sim))]
        ranks.append((sim >= own.unsqueeze(1)).sum(1))  # 1 when nothing else scores as high
    r = torch.cat(ranks).double()
    return {"top1": float((r == 1).double().mean()), "top5": float((r <= 5).double().mean()),
            "mrr": float((1.0 / r).mean())}


class Contrastive(Objective):
    """Sentence pairs that belong together (a translation, a paraphrase, a question and its answer): each split is
    ``(firsts, seconds)``, lists of prepared token-id lists. Batches of pairs, length-bucketed and padded, reshuffled
    every epoch; the loss is :class:`ContrastiveLoss` (the batch's other sentences are the negatives, so a larger
    batch is a harder task). Evaluation: the loss over the split's pairs in consecutive batches of ``batch_size``,
    and retrieval over the whole split (:func:`retrieval_scores`: each first sentence finds its second among all)."""

    loss_unit = "nats/pair"

    def __init__(self, splits: Mapping[str, tuple[Any, Any]], pad_id: int, scale: float = 20.0,
                 symmetric: bool = True, seed: int = 0):
        self.splits = {}
        for name, pair in splits.items():
            if pair is None or not len(pair[0]):
                continue
            if len(pair[0]) != len(pair[1]):
                raise ValueError(f"split {name}: {len(pair[0])} first sentences but {len(pair[1])} second ones")
            self.splits[name] = (list(pair[0]), list(pair[1]))
        if "train" not in self.splits:
            raise ValueError("the train split is empty: nothing to train on")
        if len(self.splits["train"][0]) < 2:
            raise ValueError("the train split needs at least 2 pairs (the batch's other pairs are the negatives)")
        self.pad_id, self.scale, self.symmetric, self.seed = pad_id, scale, symmetric, seed

    def has_split(self, split: str) -> bool:
        return split in self.splits

    def setup(self, model, batch_size, rank=0, world=1) -> None:
        from corpusforge.models.batching import EpochBatches

        if batch_size < 2:
            raise ValueError("batch_size: in-batch negatives need at least 2 pairs per batch")
        a, b = self.splits["train"]
        self.batches = EpochBatches([len(x) + len(y) for x, y in zip(a, b)], batch_size, self.seed, rank, world)

    def _collate(self, split: str, indices: list[int]) -> tuple[torch.Tensor, ...]:
        from corpusforge.models.batching import pad

        a, b = self.splits[split]
        ia, ma = pad([a[i] for i in indices], self.pad_id)
        ib, mb = pad([b[i] for i in indices], self.pad_id)
        return ia, ma, ib, mb

    def batch(self, index: int, gen: torch.Generator) -> Batch:
        indices, _ = self.batches.get(index)
        tensors = self._collate("train", indices)
        return Batch(tensors, int(tensors[1].sum() + tensors[3].sum()), terms=tensors[0].shape[0])

    def loss_module(self, model: nn.Module) -> nn.Module:
        return ContrastiveLoss(model, self.scale, self.symmetric)

    def embed(self, model, sentences: list[list[int]], batch_size: int, device, autocast) -> torch.Tensor:
        from corpusforge.models.batching import pad

        order = sorted(range(len(sentences)), key=lambda i: len(sentences[i]))
        out = [None] * len(sentences)
        for start in range(0, len(order), batch_size):
            chunk = order[start: start + batch_size]
            ids, mask = pad([sentences[i] for i in chunk], self.pad_id)
            with autocast():
                vectors = model(ids.to(device), mask.to(device)).float().cpu()
            for i, v in zip(chunk, vectors):
                out[i] = v
        return torch.stack(out)

    def evaluate(self, model, split, batch_size, max_batches=0, device="cpu", autocast=contextlib.nullcontext):
        """The first ``max_batches * batch_size`` pairs (all with 0)."""
        a, b = self.splits[split]
        n = len(a) if not max_batches else min(len(a), max_batches * batch_size)
        with evaluating(model):
            with torch.no_grad():
                ea = self.embed(model, a[:n], max(batch_size, 64), device, autocast)
                eb = self.embed(model, b[:n], max(batch_size, 64), device, autocast)
        losses = [in_batch_loss(ea[s: s + batch_size], eb[s: s + batch_size], self.scale, self.symmetric).item()
                  for s in range(0, n - 1, batch_size) if min(n, s + batch_size) - s >= 2]
        return {"loss": sum(losses) / len(losses) if losses else 0.0, **retrieval_scores(ea, eb)}


# --- the factories a family's spec names: (model config, token splits) -> objective -----------------------

def causal_lm(model_cfg: Any, splits: Mapping[str, Any]) -> CausalLM:
    return CausalLM(splits, model_cfg.block_size)


def truncated_bptt(model_cfg: Any, splits: Mapping[str, Any]) -> TruncatedBPTT:
    return TruncatedBPTT(splits, model_cfg.block_size)


def masked_lm(model_cfg: Any, splits: Mapping[str, Any]) -> MaskedLM:
    return MaskedLM(splits, model_cfg.block_size, model_cfg.vocab_size, model_cfg.mask_id, model_cfg.mask_prob)


def bert_pretraining(model_cfg: Any, splits: Mapping[str, Any]) -> BertPretraining:
    return BertPretraining(splits, model_cfg.block_size, model_cfg.vocab_size, model_cfg.mask_id, model_cfg.cls_id,
                           model_cfg.sep_id, model_cfg.pad_id, model_cfg.eot_id, model_cfg.mask_prob, model_cfg.nsp)


def classification(model_cfg: Any, splits: Mapping[str, Any]) -> Classification:
    """Labelled sequences (``{split: (sequences, class indices)}``), padded with the model's ``pad_id``."""
    return Classification(splits, pad_id=model_cfg.pad_id, max_len=getattr(model_cfg, "max_len", None))


def seq2seq(model_cfg: Any, splits: Mapping[str, Any], label_smoothing: float | None = None) -> Seq2Seq:
    """Source-target pairs (``{split: (sources, targets)}``) with the model's pad/bos/eos ids, ``max_len`` and
    ``label_smoothing`` (unless given here)."""
    smoothing = getattr(model_cfg, "label_smoothing", 0.0) if label_smoothing is None else label_smoothing
    return Seq2Seq(splits, pad_id=model_cfg.pad_id, bos_id=model_cfg.bos_id, eos_id=model_cfg.eos_id,
                   label_smoothing=smoothing, max_len=getattr(model_cfg, "max_len", None))


def contrastive(model_cfg: Any, splits: Mapping[str, Any]) -> Contrastive:
    """Sentence pairs (``{split: (firsts, seconds)}``, prepared ids) with the model's pad id, scale and symmetry."""
    return Contrastive(splits, pad_id=model_cfg.pad_id, scale=getattr(model_cfg, "scale", 20.0),
                       symmetric=getattr(model_cfg, "symmetric", True))
