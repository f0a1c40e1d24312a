"""Post-training objectives (corpusforge.models.objectives.sft and .preference): SFT and DPO."""

from __future__ import annotations

import copy
import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from corpusforge.models.configs import TrainConfig
from corpusforge.models.gpt.config import GPTConfig
from corpusforge.models.gpt.model import GPT
from corpusforge.models.lora import add_lora
from corpusforge.models.objectives import DPO, IGNORE, SFT, dpo_loss, sequence_logps, sft_targets
from corpusforge.models.training import train

CFG = GPTConfig(vocab_size=50, block_size=32, n_layer=2, n_head=2, n_embd=32)
PAD = 0


def tiny(seed: int = 0) -> GPT:
    torch.manual_seed(seed)
    return GPT(CFG)


class Bigram(nn.Module):
    """Each position's logits depend on its own token only: packing (what precedes it in the row, where it sits)
    cannot change any prediction, so packed and unpacked losses must agree exactly."""

    def __init__(self, vocab: int = 50):
        super().__init__()
        torch.manual_seed(3)
        self.table = nn.Embedding(vocab, vocab)

    def forward(self, idx, state=None):
        return self.table(idx), None


def records(n: int, seed: int = 0) -> tuple[list[list[int]], list[list[int]]]:
    g = torch.Generator().manual_seed(seed)
    prompts = [torch.randint(1, 50, (int(torch.randint(1, 7, (1,), generator=g)),), generator=g).tolist()
               for _ in range(n)]
    responses = [torch.randint(1, 50, (int(torch.randint(1, 6, (1,), generator=g)),), generator=g).tolist()
                 for _ in range(n)]
    return prompts, responses


# --- SFT ---------------------------------------------------------------------------------------------------------

def test_sft_targets_mask_exactly_the_prompt():
    x, y = sft_targets([5, 6, 7], [8, 9])
    assert x == [5, 6, 7, 8]
    assert y == [IGNORE, IGNORE, 8, 9]  # position 2 (reading 7) predicts the first response token
    x, y = sft_targets([5], [8, 9, 10])
    assert x == [5, 8, 9] and y == [8, 9, 10]
    with pytest.raises(ValueError, match="empty prompt"):
        sft_targets([], [1])


def test_packing_keeps_examples_whole_and_the_loss_per_response_token():
    prompts, responses = records(40)
    pairs = list(zip(prompts, responses))
    packed = SFT({"train": pairs, "valid": pairs}, PAD, block_size=16, pack=True)
    plain = SFT({"train": pairs}, PAD, block_size=16, pack=False)
    rows = packed.rows()
    assert sorted(i for r in rows for i in r[2]) == list(range(40))  # every example once
    assert any(len(r[2]) > 1 for r in rows) and len(rows) < 40
    for x, y, members in rows:
        assert len(x) <= 16
        assert x == [t for i in members for t in sft_targets(prompts[i], responses[i])[0]]  # whole, in order
        assert y == [t for i in members for t in sft_targets(prompts[i], responses[i])[1]]

    model = Bigram()
    losses = {}
    for name, objective in {"packed": packed, "plain": plain}.items():
        objective.setup(model, batch_size=64)  # one batch holds every row
        batch = objective.batch(0, torch.Generator())
        losses[name], _ = objective.loss_module(model)(*batch.tensors, None)
        assert batch.tokens == sum(len(p) + len(r) - 1 for p, r in zip(prompts, responses))
    total = sum(F.cross_entropy(model.table(torch.tensor(sft_targets(p, r)[0][len(p) - 1:])), torch.tensor(r),
                                reduction="sum") for p, r in zip(prompts, responses))
    expected = total / sum(len(r) for r in responses)
    assert losses["packed"].item() == pytest.approx(expected.item(), rel=1e-5)
    assert losses["plain"].item() == pytest.approx(expected.item(), rel=1e-5)
    scores = packed.evaluate(model, "valid", batch_size=7)
    assert scores["loss"] == pytest.approx(expected.item(), rel=1e-5)
    assert scores["response_tokens"] == sum(len(r) for r in responses)
    assert scores["ppl"] == pytest.approx(math.exp(scores["loss"]))


def test_sft_evaluation_figures_agree_with_greedy_decoding_per_example():
    """Issue 52: beside nats per response token, SFT evaluates nats per whole response, the token accuracy and the
    teacher-forced exact match, which must be what greedy decoding of each prompt alone gives (checked here one
    example at a time with the sampler, no batching or padding)."""
    from corpusforge.models.sampling import generate

    prompts, responses = records(30, seed=4)
    model = tiny(2)
    pairs = list(zip(prompts, responses))
    sft = SFT({"train": pairs, "valid": pairs}, PAD, block_size=16, pack=False)
    train(model, sft, TrainConfig(max_iters=60, batch_size=8, lr=1e-2, warmup_iters=0, eval_interval=60,
                                  eval_iters=0, log_interval=60, cpu_threads=1, keep_best=False))
    scores = sft.evaluate(model, "valid", batch_size=7)
    greedy, right, nll = 0, 0, 0.0
    with torch.no_grad():
        for p, r in pairs:
            greedy += generate(model, p, len(r), greedy=True) == r
            logits, _ = model(torch.tensor([p + r[:-1]]))
            scored = logits[0, len(p) - 1:]
            right += int((scored.argmax(-1) == torch.tensor(r)).sum())
            nll += F.cross_entropy(scored, torch.tensor(r), reduction="sum").item()
    tokens = sum(len(r) for r in responses)
    assert 0 < greedy < 30  # partly learned: the figures are not all 0 or all 1
    assert scores["exact_match"] == greedy / 30 and scores["responses"] == 30
    assert scores["token_accuracy"] == right / tokens
    assert scores["response_nll"] == pytest.approx(nll / 30, rel=1e-5)
    assert scores["response_nll"] == pytest.approx(scores["loss"] * tokens / 30, rel=1e-9)


def test_a_long_example_loses_its_prompt_from_the_left():
    sft = SFT({"train": [(list(range(1, 21)), [30, 31, 32]), ([1, 2], [40])]}, PAD, block_size=8)
    assert sft.truncated["train"] == 1
    x, y = sft.splits["train"][0]
    assert x == [15, 16, 17, 18, 19, 20, 30, 31]  # 9 tokens kept: 8 read, 3 response tokens scored
    assert [t for t in y if t != IGNORE] == [30, 31, 32]  # the response is whole


def test_sft_trains_with_the_trainer():
    prompts, responses = records(48, seed=1)
    responses = [[7, 8, 9] for _ in responses]  # a fixed answer: easy to learn
    pairs = list(zip(prompts, responses))
    objective = SFT({"train": pairs, "valid": pairs[:16]}, PAD, CFG.block_size)
    model = tiny()
    before = objective.evaluate(model, "valid", 8)["loss"]
    result = train(model, objective, TrainConfig(max_iters=30, batch_size=8, lr=1e-2, warmup_iters=0,
                                                 eval_interval=30, eval_iters=0, device="cpu"))
    assert result.metrics["val_loss"] < before / 3


# --- DPO ---------------------------------------------------------------------------------------------------------

def test_dpo_loss_by_hand():
    beta = 0.1
    pc, pr = torch.tensor([-5.0, -3.0], requires_grad=True), torch.tensor([-7.0, -2.0])
    rc, rr = torch.tensor([-6.0, -3.0]), torch.tensor([-6.5, -2.5])
    loss, chosen, rejected = dpo_loss(pc, pr, rc, rr, beta)
    # row 0: beta * ((-5 + 6) - (-7 + 6.5)) = 0.15; row 1: beta * (0 - 0.5) = -0.05
    expected = (-math.log(1 / (1 + math.exp(-0.15))) - math.log(1 / (1 + math.exp(0.05)))) / 2
    assert loss.item() == pytest.approx(expected, rel=1e-6)
    assert chosen.tolist() == pytest.approx([0.1, 0.0])
    assert rejected.tolist() == pytest.approx([-0.05, 0.05])
    loss.backward()
    assert (pc.grad < 0).all()  # raising the chosen response's log-prob lowers the loss
    # d loss / d pc_i = -beta * sigmoid(-z_i) / B
    assert pc.grad.tolist() == pytest.approx([-beta / (1 + math.exp(0.15)) / 2, -beta / (1 + math.exp(-0.05)) / 2])


def test_sequence_logps_sums_the_response_tokens_only():
    model = Bigram()
    ids = torch.tensor([[3, 4, 5, 6, 0]])
    mask = torch.tensor([[False, False, True, True, False]])
    logp = torch.log_softmax(model.table.weight, -1)
    assert sequence_logps(model, ids, mask).item() == pytest.approx((logp[4, 5] + logp[5, 6]).item(), rel=1e-6)


def test_token_logps_are_gathered_with_the_log_softmax_values_and_gradients():
    """Issue 45, item 8: the chosen logit minus the log-sum-exp (no (B, T, V) log-softmax kept) gives the values and
    the gradients of log_softmax + gather."""
    from corpusforge.models.objectives import token_logps

    torch.manual_seed(0)
    model = Bigram()
    ids = torch.randint(0, 50, (3, 7))
    mask = torch.rand(3, 7) < 0.6
    gathered = token_logps(model, ids, mask)
    (g1,) = torch.autograd.grad(gathered.sum(), model.table.weight)
    logits, _ = model(ids[:, :-1])
    full = torch.log_softmax(logits, -1).gather(-1, ids[:, 1:].unsqueeze(-1)).squeeze(-1) * mask[:, 1:]
    (g2,) = torch.autograd.grad(full.sum(), model.table.weight)
    assert torch.allclose(gathered, full, atol=1e-6) and torch.allclose(g1, g2, atol=1e-6)


def toy_preferences(n: int, seed: int) -> list[tuple[list[int], list[int], list[int]]]:
    """Chosen: always the pattern 1 2 3 4; rejected: four random tokens."""
    g = torch.Generator().manual_seed(seed)
    prompts = [torch.randint(10, 50, (int(torch.randint(2, 6, (1,), generator=g)),), generator=g).tolist()
               for _ in range(n)]
    rejected = [torch.randint(10, 50, (4,), generator=g).tolist() for _ in range(n)]
    return [(p, [1, 2, 3, 4], r) for p, r in zip(prompts, rejected)]


@pytest.mark.parametrize("reference", ["module", "adapters_off"])
def test_policy_equal_to_reference_scores_log_two(reference):
    model = tiny()
    if reference == "adapters_off":
        add_lora(model, r=4, alpha=8)
        ref = "adapters_off"
    else:
        ref = copy.deepcopy(model)
    data = toy_preferences(12, seed=0)
    scores = DPO({"train": data, "valid": data}, PAD, beta=0.1, reference=ref).evaluate(model, "valid", 5)
    assert scores["loss"] == pytest.approx(math.log(2), abs=1e-6)
    assert scores["reward_margin"] == pytest.approx(0.0, abs=1e-6)
    assert scores["kl"] == pytest.approx(0.0, abs=1e-6)
    assert scores["preference_accuracy"] == 0.0  # ties are not preferences


@pytest.mark.parametrize("reference", ["module", "adapters_off"])
def test_a_few_dpo_steps_learn_the_preference(reference):
    model = tiny()
    if reference == "adapters_off":
        add_lora(model, r=8, alpha=16)
        ref = "adapters_off"
    else:
        ref = copy.deepcopy(model)
    objective = DPO({"train": toy_preferences(32, seed=1), "valid": toy_preferences(16, seed=2)}, PAD, beta=0.1,
                    reference=ref)
    before = objective.evaluate(model, "valid", 8)
    objective.setup(model, batch_size=8)
    run = objective.loss_module(model)  # the trainer's pattern
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    gen = torch.Generator().manual_seed(0)
    model.train()
    for i in range(15):
        loss, _ = run(*objective.batch(i, gen).tensors, None)
        opt.zero_grad()
        loss.backward()
        opt.step()
    after = objective.evaluate(model, "valid", 8)
    assert after["preference_accuracy"] > 0.9 > before["preference_accuracy"]
    assert after["reward_margin"] > 0 and after["loss"] < math.log(2)
    assert after["reward_chosen"] > after["reward_rejected"]
    assert after["kl"] > 0  # the policy moved towards the chosen pattern


def test_dpo_with_lora_through_the_trainer():
    model = tiny()
    add_lora(model, r=4, alpha=8)
    objective = DPO({"train": toy_preferences(32, seed=1), "valid": toy_preferences(16, seed=2)}, PAD, beta=0.1)
    result = train(model, objective, TrainConfig(max_iters=12, batch_size=8, lr=1e-2, warmup_iters=0,
                                                 eval_interval=12, eval_iters=0, device="cpu"))
    assert result.metrics["val_preference_accuracy"] > 0.9
    assert result.metrics["val_loss"] < math.log(2)


def test_dpo_refuses_what_cannot_work():
    data = toy_preferences(4, seed=0)
    with pytest.raises(ValueError, match="adapters_off"):
        DPO({"train": data}, PAD, reference="adapters").setup(tiny(), 2)
    with pytest.raises(ValueError, match="LoRA"):
        DPO({"train": data}, PAD, reference="adapters_off").setup(tiny(), 2)
    with pytest.raises(ValueError, match="expected 3 fields"):
        DPO({"train": [([1], [2])]}, PAD, reference=tiny())
    with pytest.raises(ValueError, match="empty prompt"):
        DPO({"train": [([], [2], [3])]}, PAD, reference=tiny())


def test_the_nll_term_adds_the_chosen_cross_entropy_per_token():
    from corpusforge.models.objectives import token_logps

    model, data = tiny(), toy_preferences(6, seed=2)
    reference = copy.deepcopy(model)
    plain = DPO({"train": data}, PAD, beta=0.1, reference=reference)
    rpo = DPO({"train": data}, PAD, beta=0.1, reference=copy.deepcopy(model), nll_weight=0.5)
    ids, mask = plain.collate("train", list(range(6)))
    with torch.no_grad():
        base, _ = plain.loss_module(model)(ids, mask)
        both, _ = rpo.loss_module(model)(ids, mask)
        chosen = token_logps(model, ids[:6], mask[:6])
        nll = -(chosen.sum() / mask[:6, 1:].sum())  # by hand: the chosen answers' mean cross-entropy per token
    assert both.item() == pytest.approx(base.item() + 0.5 * nll.item(), rel=1e-6)
    with pytest.raises(ValueError, match="nll_weight"):
        DPO({"train": data}, PAD, reference=reference, nll_weight=-1)


def test_disable_dropout_makes_training_mode_deterministic():
    from corpusforge.models.objectives import disable_dropout

    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=50, block_size=32, n_layer=2, n_head=2, n_embd=32, dropout=0.3)).train()
    x = torch.randint(0, 50, (2, 10))
    assert not torch.equal(model(x)[0], model(x)[0])  # dropout draws differ
    assert disable_dropout(model) > 0
    assert torch.equal(model(x)[0], model(x)[0]) and model.training
    model.eval()
    assert torch.allclose(model(x)[0], model.train()(x)[0])  # training mode now computes what eval mode does


def test_the_reference_is_scored_once_at_setup_and_stays_the_start_model():
    """Issue 45, item 8: the reference's log-probabilities are computed once, at setup (trl's
    precompute_ref_log_probs): with reference "start" no second copy of the weights is kept, the figures equal a
    frozen copy's computed per batch, and they stay the start model's while the policy trains (a resumed run's
    setup comes before its checkpoint is restored: tests/tasks/post_training resume the DPO run)."""
    from corpusforge.models.objectives import reference_logps

    torch.manual_seed(0)
    model, data = tiny(), toy_preferences(10, seed=3)
    frozen = copy.deepcopy(model).eval()
    objective = DPO({"train": data, "valid": data}, PAD, beta=0.1, reference="start")
    objective.setup(model, batch_size=4)
    batch = objective.batch(0, torch.Generator().manual_seed(0))
    ids, mask, ref = batch.tensors
    torch.testing.assert_close(ref, reference_logps(frozen, frozen, ids, mask).float(), rtol=1e-5, atol=1e-5)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    run = objective.loss_module(model)
    for i in range(3):
        loss, _ = run(*objective.batch(i, torch.Generator().manual_seed(i)).tensors, None)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    again = objective.batch(0, torch.Generator().manual_seed(0)).tensors[2]
    assert torch.equal(again, ref)  # the start model's, not the trained policy's
    moved = reference_logps(model, "start", ids, mask)
    assert not torch.allclose(moved, ref)  # the policy did move
    scores = objective.evaluate(model, "valid", 4)
    assert scores["reference_chosen_more_likely"] == pytest.approx(
        float((objective.ref["valid"][:, 0] > objective.ref["valid"][:, 1]).double().mean()))
