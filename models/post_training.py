"""Post-training objectives for decoder-only language models: supervised fine-tuning and DPO.

Both read records, ``{split: [record, ...]}`` with each record a tuple of token-id lists, and plug into the one
trainer (corpusforge.models.training) like every objective there:

- :class:`SFT`: records ``(prompt_ids, response_ids)``; the model reads prompt + response and is scored on the response
  tokens only (the prompt's targets are ``IGNORE``), rows packed or padded;
- :class:`DPO`: records ``(prompt_ids, chosen_ids, rejected_ids)``; Direct Preference Optimization (Rafailov et al. 2023,
  eq. 7) against a frozen reference: another module, or the same model with its LoRA adapters switched off
  (corpusforge.models.lora.adapters_disabled: no second copy of the weights).

The model is any causal LM whose ``forward(idx)`` returns ``(logits (B, T, V), state)`` (the GPT family), padded
on the right (a causal model's real positions never see the padding after them).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F

from corpusforge.models.objectives import IGNORE, Batch, NextTokenLoss, Objective, evaluating


def _ids(seq: Any) -> list[int]:
    return [int(t) for t in seq]


def _records(splits: Mapping[str, Any], fields: Sequence[str]) -> dict[str, list[tuple[list[int], ...]]]:
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


def _model_device(model: nn.Module) -> torch.device:
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
        for name, records in _records(splits, ("prompt", "response")).items():
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
        return model.flops_per_token(self.block_size) if hasattr(model, "flops_per_token") else 0.0

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


# --- direct preference optimization ---------------------------------------------------------------------------


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
    module, or ``"adapters_off"`` (``model`` with its LoRA adapters switched off)."""
    from corpusforge.models.lora import adapters_disabled

    with torch.no_grad():
        if isinstance(reference, str):
            with evaluating(model):
                with adapters_disabled(model):
                    return sequence_logps(model, ids, response_mask)
        return sequence_logps(reference, ids, response_mask)


class DPOLoss(nn.Module):
    """The policy and the DPO loss as one module: ``(ids (2B, T), response_mask (2B, T), state) -> (loss, None)``,
    rows 0..B-1 prompt + chosen, rows B..2B-1 prompt + rejected (one forward for both)."""

    def __init__(self, model: nn.Module, beta: float, reference: nn.Module | str, nll_weight: float = 0.0):
        super().__init__()
        self.model, self.beta, self.nll_weight = model, beta, nll_weight
        self._reference = reference if isinstance(reference, str) else _Frozen(reference)

    @property
    def reference(self) -> nn.Module | str:
        return self._reference if isinstance(self._reference, str) else self._reference.module

    def forward(self, ids: torch.Tensor, response_mask: torch.Tensor, state: Any = None):
        ref = reference_logps(self.model, self.reference, ids, response_mask)
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
    policy's device at ``setup``) or ``"adapters_off"``: the policy itself with its LoRA adapters disabled
    (corpusforge.models.lora.add_lora first). Reference log-probs are computed under no_grad.

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
            if reference != "adapters_off":
                raise ValueError(f"reference: a frozen nn.Module or 'adapters_off', got {reference!r}")
        elif isinstance(reference, nn.Module):
            reference.eval()
            for p in reference.parameters():
                p.requires_grad_(False)
        else:
            raise ValueError(f"reference: a frozen nn.Module or 'adapters_off', got {type(reference).__name__}")
        if nll_weight < 0:
            raise ValueError(f"nll_weight: must be >= 0, got {nll_weight}")
        self.pad_id, self.beta, self.reference, self.max_len, self.seed = pad_id, beta, reference, max_len, seed
        self.nll_weight = nll_weight
        self.splits = _records(splits, ("prompt", "chosen", "rejected"))

    def has_split(self, split: str) -> bool:
        return split in self.splits

    def setup(self, model, batch_size, rank=0, world=1) -> None:
        from corpusforge.models.batching import EpochBatches
        from corpusforge.models.lora import has_lora

        if self.reference == "adapters_off" and not has_lora(model):
            raise ValueError("reference 'adapters_off' needs a model with LoRA adapters (models.lora.add_lora)")
        if isinstance(self.reference, nn.Module):
            self.reference.to(_model_device(model))
        lengths = [len(p) + max(len(c), len(r)) for p, c, r in self.splits["train"]]
        self.batches = EpochBatches(lengths, batch_size, self.seed, rank, world)

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
        return Batch((ids, mask), int((ids != self.pad_id).sum()), terms=len(indices))  # preference pairs

    def loss_module(self, model: nn.Module) -> nn.Module:
        return DPOLoss(model, self.beta, self.reference, self.nll_weight)

    def flops_per_token(self, model: nn.Module) -> float:
        # the policy's forward and backward plus the reference's forward (a third of a training step)
        if not hasattr(model, "flops_per_token"):
            return 0.0
        return model.flops_per_token() * 4 / 3

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
                    with autocast():
                        ref_tok = self._ref_tokens(model, ids, mask)
                        pol_tok = token_logps(model, ids, mask)
                    pol, ref = pol_tok.sum(-1), ref_tok.sum(-1)
                    loss, rc, rr = dpo_loss(pol[:B], pol[B:], ref[:B], ref[B:], self.beta)
                    losses.append(loss.item() * B)
                    chosen_r.append(rc.float().cpu())
                    rejected_r.append(rr.float().cpu())
                    drift += (pol_tok[:B] - ref_tok[:B]).sum().item()
                    prefers += int((pol[:B] > pol[B:]).sum())
                    ref_prefers += int((ref[:B] > ref[B:]).sum())
                    tokens += int(mask[:B, 1:].sum())
        rc, rr = torch.cat(chosen_r), torch.cat(rejected_r)
        return {"loss": sum(losses) / n, "reward_margin": float((rc - rr).mean()),
                "preference_accuracy": float((rc > rr).double().mean()), "reward_chosen": float(rc.mean()),
                "reward_rejected": float(rr.mean()), "kl": drift / max(tokens, 1),
                "chosen_more_likely": prefers / n, "reference_chosen_more_likely": ref_prefers / n}

    def _ref_tokens(self, model: nn.Module, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        from corpusforge.models.lora import adapters_disabled

        if isinstance(self.reference, str):
            with adapters_disabled(model):
                return token_logps(model, ids, mask)
        return token_logps(self.reference, ids, mask)
