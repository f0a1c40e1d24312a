"""Preference optimization of a causal LM: :class:`DPO`, Direct Preference Optimization (Rafailov et al. 2023, eq.
7) on (prompt, chosen, rejected) records against a frozen reference: another module, or the same model with its
LoRA adapters switched off (corpusforge.models.lora.adapters_disabled: no second copy of the weights)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F

from corpusforge.models.contracts import hook
from corpusforge.models.objectives.base import Batch, Objective, evaluating

from corpusforge.models.objectives.sft import fit_prompt, model_device, records_of


def disable_dropout(model: nn.Module) -> int:
    """Dropout off in ``model`` (every ``nn.Dropout``'s p and any float ``attn_dropout`` attribute set to 0), as
    TRL's DPO does by default: the policy's log-probs are then computed like the reference's (in eval mode), not
    under noise the reference does not have. Returns how many were switched off."""
    count = 0
    for module in model.modules():
        if isinstance(module, nn.Dropout) and module.p:
            module.p, count = 0.0, count + 1
        if isinstance(getattr(module, "attn_dropout", None), float) and module.attn_dropout:
            module.attn_dropout, count = 0.0, count + 1
    return count

def dpo_loss(policy_chosen_logps: torch.Tensor, policy_rejected_logps: torch.Tensor,
             ref_chosen_logps: torch.Tensor, ref_rejected_logps: torch.Tensor, beta: float,
             ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Rafailov et al. 2023, eq. 7, over a batch of sequence log-probabilities (B,):
    ``loss = mean(-log sigmoid(beta * ((pc - rc) - (pr - rr))))``; the implicit rewards
    ``beta * (policy - reference)`` of the chosen and the rejected responses come back detached."""
    chosen = policy_chosen_logps - ref_chosen_logps
    rejected = policy_rejected_logps - ref_rejected_logps
    loss = -F.logsigmoid(beta * (chosen - rejected)).mean()
    return loss, beta * chosen.detach(), beta * rejected.detach()


def token_logps(model: nn.Module, ids: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """(B, T - 1): log p(ids[:, t + 1] | ids[:, :t + 1]) where ``response_mask[:, t + 1]``, 0 elsewhere. Gathered:
    the chosen token's logit minus the log-sum-exp over the vocabulary, so no (B, T, V) log-softmax is kept for the
    backward pass (trl's selective_log_softmax)."""
    logits, _ = model(ids[:, :-1])
    logits = logits.float()
    logp = logits.gather(-1, ids[:, 1:].unsqueeze(-1)).squeeze(-1) - torch.logsumexp(logits, dim=-1)
    return logp * response_mask[:, 1:].to(logp.dtype)


def sequence_logps(model: nn.Module, ids: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """(B,): the sum of the log-probabilities of the response tokens of each row. ``ids`` (B, T) is prompt +
    response (+ padding); ``response_mask`` (B, T) is True on the response tokens (never on the first position,
    which nothing predicts)."""
    return token_logps(model, ids, response_mask).sum(-1)


class _Frozen:
    """Holds the reference without registering it as a submodule (its weights are not the policy's)."""

    def __init__(self, module: nn.Module):
        self.module = module


def reference_logps(model: nn.Module, reference: nn.Module | str, ids: torch.Tensor,
                    response_mask: torch.Tensor) -> torch.Tensor:
    """The reference's :func:`sequence_logps`, under no_grad, in eval mode (no dropout): ``reference`` is a
    module, ``"adapters_off"`` (``model`` with its LoRA adapters switched off) or ``"start"`` (``model`` as it is:
    what :meth:`DPO.setup` scores before the first step)."""
    from corpusforge.models.adapters import adapters_disabled

    with torch.no_grad():
        if isinstance(reference, str):
            with evaluating(model):
                if reference == "start":
                    return sequence_logps(model, ids, response_mask)
                with adapters_disabled(model):
                    return sequence_logps(model, ids, response_mask)
        return sequence_logps(reference, ids, response_mask)


class DPOLoss(nn.Module):
    """The policy and the DPO loss as one module: ``(ids (2B, T), response_mask (2B, T), ref (2B,), state) ->
    (loss, None)``, rows 0..B-1 prompt + chosen, rows B..2B-1 prompt + rejected (one forward for both); ``ref``
    holds the reference's sequence log-probabilities, precomputed once (:meth:`DPO.setup`); None: the reference is
    run here."""

    def __init__(self, model: nn.Module, beta: float, reference: nn.Module | str, nll_weight: float = 0.0):
        super().__init__()
        self.model, self.beta, self.nll_weight = model, beta, nll_weight
        self._reference = reference if isinstance(reference, str) else _Frozen(reference)

    @property
    def reference(self) -> nn.Module | str:
        return self._reference if isinstance(self._reference, str) else self._reference.module

    def forward(self, ids: torch.Tensor, response_mask: torch.Tensor, ref: torch.Tensor | None = None,
                state: Any = None):
        if ref is None:
            ref = reference_logps(self.model, self.reference, ids, response_mask)
        ref = ref.to(device=ids.device, dtype=torch.float32)
        B = ids.shape[0] // 2
        if not self.nll_weight:
            policy = sequence_logps(self.model, ids, response_mask)
            loss, _, _ = dpo_loss(policy[:B], policy[B:], ref[:B], ref[B:], self.beta)
            return loss, None
        tokens = token_logps(self.model, ids, response_mask)
        policy = tokens.sum(-1)
        loss, _, _ = dpo_loss(policy[:B], policy[B:], ref[:B], ref[B:], self.beta)
        nll = -tokens[:B].sum() / response_mask[:B, 1:].sum().clamp(min=1)  # the chosen responses, per token
        return loss + self.nll_weight * nll, None


class DPO(Objective):
    """Direct Preference Optimization (Rafailov et al. 2023): each split is a list of records ``(prompt_ids,
    chosen_ids, rejected_ids)``; the policy learns to raise the chosen response's likelihood relative to the rejected one,
    each measured against ``reference`` (:func:`dpo_loss`, strength ``beta``; a larger beta keeps the policy
    closer to the reference). ``reference`` is a frozen module (made eval, ``requires_grad`` off, moved to the
    policy's device at ``setup``), ``"adapters_off"``: the policy itself with its LoRA adapters disabled
    (corpusforge.models.lora.add_lora first), or ``"start"``: the policy as :meth:`setup` finds it, before any
    step (the trainer calls ``setup`` before it restores a checkpoint, so a resumed run scores against the same
    start). The reference's log-probabilities of every record of every split are computed once, under no_grad in
    eval mode, at ``setup`` (trl's ``precompute_ref_log_probs``): a step runs the policy alone, and no second copy
    of the weights is kept for ``"start"``.

    ``nll_weight`` adds that multiple of the chosen responses' cross-entropy (per token) to the loss (RPO, Pang et
    al. 2024; TRL's ``rpo_alpha``): plain DPO can raise the margin by lowering the chosen and the rejected
    likelihoods together, which on short answers that share tokens (a label and the end token) wrecks greedy
    answers; the NLL term keeps the chosen ones likely. 0: plain DPO.

    ``max_len`` (optional) cuts prompt + response as :class:`SFT` does (prompt from the left first). Batches are
    length-bucketed and padded, reshuffled every epoch. Evaluation over the split: ``loss``, ``reward_margin``
    (mean chosen minus rejected implicit reward), ``preference_accuracy`` (the share of pairs whose chosen reward
    is strictly higher), ``reward_chosen``, ``reward_rejected`` and ``kl``: the sample estimate of
    KL(policy || reference) per token on the chosen responses, the mean of log p_policy - log p_ref over the
    chosen response tokens (the responses are the dataset's, not sampled from the policy, so this is a drift
    measure rather than an unbiased KL); ``chosen_more_likely`` (and ``reference_chosen_more_likely``): the share of
    pairs whose chosen response the policy (the reference) finds more likely than the rejected one: the start
    model's own preference, where ``preference_accuracy`` is 0 by definition (every implicit reward is 0)."""

    loss_unit = "nats/preference pair"

    def __init__(self, splits: Mapping[str, Sequence[tuple[Any, Any, Any]]], pad_id: int, beta: float = 0.1,
                 reference: nn.Module | str = "adapters_off", max_len: int | None = None, seed: int = 0,
                 nll_weight: float = 0.0):
        if pad_id is None:
            raise ValueError("pad_id: DPO pads rows and needs the tokenizer's pad id")
        if beta <= 0:
            raise ValueError(f"beta: must be > 0, got {beta}")
        if isinstance(reference, str):
            if reference not in ("adapters_off", "start"):
                raise ValueError(f"reference: a frozen nn.Module, 'adapters_off' or 'start', got {reference!r}")
        elif isinstance(reference, nn.Module):
            reference.eval()
            for p in reference.parameters():
                p.requires_grad_(False)
        else:
            raise ValueError(f"reference: a frozen nn.Module, 'adapters_off' or 'start', got "
                             f"{type(reference).__name__}")
        if nll_weight < 0:
            raise ValueError(f"nll_weight: must be >= 0, got {nll_weight}")
        self.pad_id, self.beta, self.reference, self.max_len, self.seed = pad_id, beta, reference, max_len, seed
        self.nll_weight = nll_weight
        self.splits = records_of(splits, ("prompt", "chosen", "rejected"))
        self.ref: dict[str, torch.Tensor] = {}  # split -> (N, 2) reference log-probs (chosen, rejected), at setup

    def has_split(self, split: str) -> bool:
        return split in self.splits

    def setup(self, model, batch_size, rank=0, world=1) -> None:
        from corpusforge.models.batching import EpochBatches
        from corpusforge.models.adapters import has_lora

        if self.reference == "adapters_off" and not has_lora(model):
            raise ValueError("reference 'adapters_off' needs a model with LoRA adapters (models.lora.add_lora)")
        if isinstance(self.reference, nn.Module):
            self.reference.to(model_device(model))
        lengths = [len(p) + max(len(c), len(r)) for p, c, r in self.splits["train"]]
        self.batches = EpochBatches(lengths, batch_size, self.seed, rank, world)
        self.ref = {split: self._reference_table(model, split, max(batch_size, 16)) for split in self.splits}
        if isinstance(self.reference, nn.Module):
            self.reference.to("cpu")  # not needed again: every record's reference figures are in the table

    def _reference_table(self, model: nn.Module, split: str, batch_size: int) -> torch.Tensor:
        """(N, 2): the reference's log-probability of each record's chosen and rejected response, in float32 on
        the CPU, batched by length."""
        records = self.splits[split]
        order = sorted(range(len(records)), key=lambda i: (len(records[i][0]) + len(records[i][1]), i))
        table = torch.zeros(len(records), 2)
        device = model_device(model)
        for start in range(0, len(order), batch_size):
            idx = order[start: start + batch_size]
            ids, mask = (t.to(device) for t in self.collate(split, idx))
            ref = reference_logps(model, self.reference, ids, mask).float().cpu()
            table[idx, 0], table[idx, 1] = ref[: len(idx)], ref[len(idx):]
        return table

    def _ref(self, split: str, indices: Sequence[int]) -> torch.Tensor | None:
        """(2B,): the precomputed reference log-probs of the chosen rows, then the rejected ones (None before
        :meth:`setup`)."""
        table = self.ref.get(split)
        return None if table is None else torch.cat((table[list(indices), 0], table[list(indices), 1]))

    def collate(self, split: str, indices: Sequence[int]) -> tuple[torch.Tensor, torch.Tensor]:
        """``(ids (2B, T), response_mask (2B, T))``: the chosen rows, then the rejected ones, padded on the right."""
        from corpusforge.models.batching import pad

        records = self.splits[split]
        seqs, masks = [], []
        for which in (1, 2):  # chosen, then rejected
            for i in indices:
                p, r = records[i][0], records[i][which]
                if self.max_len is not None:
                    p, r, _ = fit_prompt(p, r, self.max_len)
                seqs.append(p + r)
                masks.append([0] * len(p) + [1] * len(r))
        ids, _ = pad(seqs, self.pad_id)
        mask, _ = pad(masks, 0)
        return ids, mask.bool()

    def batch(self, index: int, gen: torch.Generator) -> Batch:
        indices, _ = self.batches.get(index)
        ids, mask = self.collate("train", indices)
        return Batch((ids, mask, self._ref("train", indices)), int((ids != self.pad_id).sum()),
                     terms=len(indices))  # preference pairs

    def loss_module(self, model: nn.Module) -> nn.Module:
        return DPOLoss(model, self.beta, self.reference, self.nll_weight)

    def flops_per_token(self, model: nn.Module) -> float:
        # the policy's forward and backward (the reference's log-probs were computed once, at setup)
        flops = hook(model, "flops_per_token")
        return flops() if flops else 0.0

    def evaluate(self, model, split, batch_size, max_batches=0, device="cpu",
                 autocast: Callable = contextlib.nullcontext) -> dict[str, float]:
        """The first ``max_batches * batch_size`` pairs (all with 0)."""
        n = len(self.splits[split])
        if max_batches:
            n = min(n, max_batches * batch_size)
        if isinstance(self.reference, nn.Module):
            self.reference.to(device)
        losses, chosen_r, rejected_r = [], [], []
        drift, tokens, prefers, ref_prefers = 0.0, 0, 0, 0
        with evaluating(model):
            with torch.no_grad():
                for start in range(0, n, batch_size):
                    idx = list(range(start, min(n, start + batch_size)))
                    ids, mask = (t.to(device) for t in self.collate(split, idx))
                    B = len(idx)
                    ref = self._ref(split, idx)
                    with autocast():
                        if ref is None:  # not set up: the reference is run here
                            ref = self._ref_tokens(model, ids, mask).sum(-1)
                        pol_tok = token_logps(model, ids, mask)
                    pol, ref = pol_tok.sum(-1).float(), ref.to(device=pol_tok.device, dtype=torch.float32)
                    loss, rc, rr = dpo_loss(pol[:B], pol[B:], ref[:B], ref[B:], self.beta)
                    losses.append(loss.item() * B)
                    chosen_r.append(rc.float().cpu())
                    rejected_r.append(rr.float().cpu())
                    drift += (pol[:B] - ref[:B]).sum().item()  # summed over the chosen responses' tokens
                    prefers += int((pol[:B] > pol[B:]).sum())
                    ref_prefers += int((ref[:B] > ref[B:]).sum())
                    tokens += int(mask[:B, 1:].sum())
        rc, rr = torch.cat(chosen_r), torch.cat(rejected_r)
        return {"loss": sum(losses) / n, "reward_margin": float((rc - rr).mean()),
                "preference_accuracy": float((rc > rr).double().mean()), "reward_chosen": float(rc.mean()),
                "reward_rejected": float(rr.mean()), "kl": drift / max(tokens, 1),
                "chosen_more_likely": prefers / n, "reference_chosen_more_likely": ref_prefers / n}

    def _ref_tokens(self, model: nn.Module, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        from corpusforge.models.adapters import adapters_disabled

        if self.reference == "start":
            return token_logps(model, ids, mask)
        if isinstance(self.reference, str):
            with adapters_disabled(model):
                return token_logps(model, ids, mask)
        return token_logps(self.reference, ids, mask)


def dpo(model_cfg: Any, splits: Mapping[str, Any], settings: Any, pad_id: int,
        reference: nn.Module | str) -> DPO:
    """(prompt, chosen, rejected) records against ``reference`` (a frozen module, ``"adapters_off"`` or
    ``"start"``), with the objective's ``beta`` and ``nll_weight``. The caller switches dropout off in the policy (:func:`disable_dropout`,
    TRL's default), so its log-probabilities are computed as the reference's are."""
    block = getattr(model_cfg, "block_size", None)  # the model reads one fewer than prompt + response
    return DPO(splits, pad_id, settings.beta, reference, max_len=block + 1 if block else None,
               nll_weight=settings.nll_weight)
