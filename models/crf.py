"""A linear-chain conditional random field, written as the texts teach it: a score for each tag at each word (the
emissions, from the network below it) plus a score for each pair of neighbouring tags (the transitions, learned),
the forward algorithm for the log of the partition function (every tag path's score summed in log space), and
Viterbi decoding for the best path. Batched over sentences of different lengths with a mask; positions after a
sentence's end change nothing (tests: every path enumerated by brute force on small cases).

Shapes: emissions [batch, time, tags], tags [batch, time] (long), mask [batch, time] (bool, each row a prefix of
True: the first position of every sentence is a word; an empty sentence is refused where records are read).
"""

from __future__ import annotations

import torch
from torch import nn


class CRF(nn.Module):
    """Transition scores `transitions[i, j]` for tag i followed by tag j, and `start`/`end` scores for the first
    and last tag of a sentence. `log_likelihood` is log p(tags | emissions), per sentence; `decode` gives the
    Viterbi paths, one list of tag ids per sentence, as long as the sentence."""

    def __init__(self, num_tags: int):
        super().__init__()
        if num_tags < 1:
            raise ValueError(f"a CRF needs at least one tag, got {num_tags}")
        self.num_tags = num_tags
        self.transitions = nn.Parameter(torch.empty(num_tags, num_tags))
        self.start = nn.Parameter(torch.empty(num_tags))
        self.end = nn.Parameter(torch.empty(num_tags))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.uniform_(self.transitions, -0.1, 0.1)
        nn.init.uniform_(self.start, -0.1, 0.1)
        nn.init.uniform_(self.end, -0.1, 0.1)

    def _check(self, emissions: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        if emissions.dim() != 3 or emissions.size(2) != self.num_tags:
            raise ValueError(f"emissions must be [batch, time, {self.num_tags}], got {list(emissions.shape)}")
        if mask is None:
            return torch.ones(emissions.shape[:2], dtype=torch.bool, device=emissions.device)
        if mask.shape != emissions.shape[:2]:
            raise ValueError(f"mask must be {list(emissions.shape[:2])}, got {list(mask.shape)}")
        mask = mask.bool()
        if emissions.size(1) and not bool(mask[:, 0].all()):
            raise ValueError("every sentence needs at least one word (the mask's first column must be all True)")
        return mask

    def path_score(self, emissions: torch.Tensor, tags: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """The unnormalised score of the given tag paths, [batch]."""
        batch, time, _ = emissions.shape
        maskf = mask.to(emissions.dtype)
        emitted = emissions.gather(2, tags.unsqueeze(2)).squeeze(2)  # [B, T]
        score = self.start[tags[:, 0]] + (emitted * maskf).sum(1)
        if time > 1:
            steps = self.transitions[tags[:, :-1], tags[:, 1:]]  # [B, T-1]
            score = score + (steps * maskf[:, 1:]).sum(1)
        last = mask.long().sum(1) - 1
        score = score + self.end[tags.gather(1, last.unsqueeze(1)).squeeze(1)]
        return score

    def log_partition(self, emissions: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """log Z: every tag path's score, summed in log space by the forward algorithm, [batch]."""
        alpha = self.start.unsqueeze(0) + emissions[:, 0]  # [B, K]: best-to-here summed over paths ending in k
        for t in range(1, emissions.size(1)):
            # alpha'[b, j] = logsumexp_i(alpha[b, i] + transitions[i, j]) + emissions[b, t, j]
            step = torch.logsumexp(alpha.unsqueeze(2) + self.transitions.unsqueeze(0), dim=1) + emissions[:, t]
            alpha = torch.where(mask[:, t].unsqueeze(1), step, alpha)  # a finished sentence keeps its alpha
        return torch.logsumexp(alpha + self.end.unsqueeze(0), dim=1)

    def log_likelihood(self, emissions: torch.Tensor, tags: torch.Tensor,
                       mask: torch.Tensor | None = None) -> torch.Tensor:
        """log p(tags | emissions) per sentence, [batch]; the training loss is its negative."""
        mask = self._check(emissions, mask)
        if tags.shape != emissions.shape[:2]:
            raise ValueError(f"tags must be {list(emissions.shape[:2])}, got {list(tags.shape)}")
        tags = tags.masked_fill(~mask, 0)  # padding positions may hold an ignore index
        return self.path_score(emissions, tags, mask) - self.log_partition(emissions, mask)

    def forward(self, emissions: torch.Tensor, tags: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """The mean negative log-likelihood over the batch's sentences."""
        return -self.log_likelihood(emissions, tags, mask).mean()

    @torch.no_grad()
    def decode(self, emissions: torch.Tensor, mask: torch.Tensor | None = None) -> list[list[int]]:
        """Viterbi: the highest-scoring tag path of each sentence (ties go to the lower tag id)."""
        mask = self._check(emissions, mask)
        batch, time, _ = emissions.shape
        if time == 0:
            return [[] for _ in range(batch)]
        score = self.start.unsqueeze(0) + emissions[:, 0]  # [B, K]
        back = []
        for t in range(1, time):
            # best previous tag i for each next tag j
            total = score.unsqueeze(2) + self.transitions.unsqueeze(0)  # [B, K(i), K(j)]
            best, arg = total.max(dim=1)
            step = best + emissions[:, t]
            keep = mask[:, t].unsqueeze(1)
            score = torch.where(keep, step, score)
            # past a sentence's end the pointer is the identity, so backtracking passes through unchanged
            ident = torch.arange(self.num_tags, device=emissions.device).expand(batch, -1)
            back.append(torch.where(keep, arg, ident))
        score = score + self.end.unsqueeze(0)
        last = score.argmax(dim=1)  # [B]
        path = [last]
        for arg in reversed(back):
            last = arg.gather(1, last.unsqueeze(1)).squeeze(1)
            path.append(last)
        path.reverse()
        tags = torch.stack(path, dim=1).tolist()  # [B, T]
        lengths = mask.long().sum(1).tolist()
        return [row[:n] for row, n in zip(tags, lengths)]
