"""The linear-chain CRF (corpusforge.models.crf), issue 46 item 3: its log-likelihood is the path's score minus the
log of every path's summed score, and Viterbi finds the best path, both checked against brute-force enumeration of
every tag path on small cases (batched, sentences of different lengths, length 1 included); padding after a
sentence's end changes nothing; the gradient is the analytic one (torch.autograd.gradcheck); and on the same
shapes, pytorch-crf (the reference implementation) gives the same log-likelihood and the same paths."""

from __future__ import annotations

import itertools

import pytest
import torch

from corpusforge.models.crf import CRF


def random_crf(K: int, seed: int = 0) -> CRF:
    torch.manual_seed(seed)
    crf = CRF(K).double()
    with torch.no_grad():
        for p in crf.parameters():
            p.normal_()
    return crf


def batch(lengths: list[int], K: int, seed: int = 1):
    gen = torch.Generator().manual_seed(seed)
    T = max(lengths)
    emissions = torch.randn(len(lengths), T, K, dtype=torch.double, generator=gen)
    mask = torch.tensor([[t < n for t in range(T)] for n in lengths])
    tags = torch.randint(0, K, (len(lengths), T), generator=gen)
    return emissions, tags, mask


def every_path(crf: CRF, emissions: torch.Tensor, n: int) -> dict[tuple[int, ...], float]:
    """Each tag path of a sentence of n words and its score, written out term by term."""
    scores = {}
    for path in itertools.product(range(crf.num_tags), repeat=n):
        s = crf.start[path[0]] + crf.end[path[-1]] + sum(emissions[t, path[t]] for t in range(n))
        s = s + sum(crf.transitions[path[t - 1], path[t]] for t in range(1, n))
        scores[path] = float(s)
    return scores


@pytest.mark.parametrize("K", [1, 2, 3, 4])
def test_log_likelihood_and_viterbi_match_every_path_enumerated(K):
    crf = random_crf(K)
    lengths = [1, 2, 3, 5, 4]
    emissions, tags, mask = batch(lengths, K)
    ll = crf.log_likelihood(emissions, tags, mask)
    paths = crf.decode(emissions, mask)
    for b, n in enumerate(lengths):
        scores = every_path(crf, emissions[b], n)
        log_z = torch.logsumexp(torch.tensor(list(scores.values()), dtype=torch.double), 0)
        assert ll[b].item() == pytest.approx(scores[tuple(tags[b, :n].tolist())] - log_z.item(), abs=1e-9)
        assert tuple(paths[b]) == max(scores, key=scores.get)
    # the probabilities of every path of a sentence sum to one
    n = 4
    all_paths = torch.tensor(list(itertools.product(range(K), repeat=n)))
    many = emissions[3:4, :n].expand(len(all_paths), n, K)
    total = crf.log_likelihood(many, all_paths, torch.ones(len(all_paths), n, dtype=torch.bool)).exp().sum()
    assert total.item() == pytest.approx(1.0, abs=1e-9)


def test_padding_after_a_sentence_changes_nothing():
    crf = random_crf(3)
    emissions, tags, mask = batch([2, 5], 3)
    changed = emissions.clone()
    changed[0, 2:] = 100.0 * torch.randn(3, 3, dtype=torch.double)  # scores past the first sentence's end
    other_tags = tags.clone()
    other_tags[0, 2:] = -100  # padding positions may hold the ignore index
    torch.testing.assert_close(crf.log_likelihood(changed, other_tags, mask), crf.log_likelihood(emissions, tags, mask))
    assert crf.decode(changed, mask) == crf.decode(emissions, mask)
    alone = crf.log_likelihood(emissions[:1, :2], tags[:1, :2], mask[:1, :2])
    torch.testing.assert_close(alone, crf.log_likelihood(emissions, tags, mask)[:1])


def test_the_gradient_of_log_z_is_each_words_tag_marginal():
    """d log Z / d emissions[t, k] is the probability that word t has tag k (the forward-backward marginals), here
    summed from every enumerated path; and autograd agrees with finite differences (gradcheck)."""
    crf = random_crf(3)
    emissions, tags, mask = batch([4], 3)
    emissions.requires_grad_(True)
    crf.log_partition(emissions, mask).sum().backward()
    scores = every_path(crf, emissions[0].detach(), 4)
    log_z = torch.logsumexp(torch.tensor(list(scores.values()), dtype=torch.double), 0)
    marginals = torch.zeros(4, 3, dtype=torch.double)
    for path, score in scores.items():
        for t, k in enumerate(path):
            marginals[t, k] += torch.exp(torch.tensor(score, dtype=torch.double) - log_z)
    torch.testing.assert_close(emissions.grad[0], marginals, atol=1e-9, rtol=0)
    e = emissions.detach().clone().requires_grad_(True)
    assert torch.autograd.gradcheck(lambda x: crf.log_likelihood(x, tags, mask), (e,))


def test_bad_shapes_and_empty_sentences_are_refused_in_one_line():
    crf = CRF(3)
    with pytest.raises(ValueError, match=r"emissions must be \[batch, time, 3\]"):
        crf.decode(torch.zeros(2, 4, 5))
    with pytest.raises(ValueError, match="at least one word"):
        crf.decode(torch.zeros(2, 4, 3), torch.tensor([[True] * 4, [False] * 4]))
    with pytest.raises(ValueError, match="at least one tag"):
        CRF(0)


def test_same_log_likelihood_and_paths_as_pytorch_crf():
    torchcrf = pytest.importorskip("torchcrf", reason="pytorch-crf (dev extra) is the reference implementation")
    K, lengths = 9, [7, 1, 12, 3, 12]
    ours = CRF(K)
    ref = torchcrf.CRF(K, batch_first=True)
    with torch.no_grad():  # the same parameters: pytorch-crf's transitions[i, j] is also tag i followed by tag j
        ref.transitions.copy_(ours.transitions)
        ref.start_transitions.copy_(ours.start)
        ref.end_transitions.copy_(ours.end)
    emissions, tags, mask = batch(lengths, K, seed=3)
    emissions = emissions.float()
    theirs = ref(emissions, tags, mask, reduction="none")
    torch.testing.assert_close(ours.log_likelihood(emissions, tags, mask), theirs, atol=1e-5, rtol=0)
    assert ours.decode(emissions, mask) == ref.decode(emissions, mask)
