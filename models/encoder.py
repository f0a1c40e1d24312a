"""A Transformer encoder (BERT-style), trained as a masked language model, in one readable file.

The blocks are the GPT decoder's (corpusforge.models.gpt) with the causal mask taken away: every position attends to
every other, left and right, so the model sees the whole window. That also means it cannot be trained on
the next token (it would simply read it). It is trained instead on *masked* tokens (Devlin et al. 2019):
about ``mask_prob`` of the positions in each window are chosen; of those, 80% become the extra ``[MASK]``
id, 10% a random token and 10% stay as they are, and the loss is the cross-entropy of the original tokens
at the chosen positions only.

``[MASK]`` is one id past the tokenizer's vocabulary (``vocab_size``): it has an embedding row and is never
predicted. The reported ``val_loss`` is that masked-token cross-entropy and ``val_ppl`` its exponential:
a fill-in-the-blank score, not comparable with a left-to-right LM's perplexity. An encoder cannot
generate text; ``corpusforge lm inspect`` shows its attention (full matrices, no triangle) and what it
puts in a ``[MASK]`` appended to the prompt.
"""

from __future__ import annotations

import torch

from corpusforge.models.configs import EncoderConfig  # noqa: F401 - the config lives with the others, torch-free
from corpusforge.models.gpt import GPT

IGNORE = -100  # F.cross_entropy's ignore_index: positions that were not chosen carry no loss


class TransformerEncoder(GPT):
    objective = "masked"

    def __init__(self, cfg: EncoderConfig):
        super().__init__(cfg, causal=False, extra_tokens=1)

    @property
    def mask_id(self) -> int:
        return self.cfg.vocab_size

    def mask_batch(self, x: torch.Tensor, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        """(inputs, targets) for the masked-LM loss from windows ``x`` (B, T); targets are ``IGNORE`` where
        no prediction is asked. Every row gets at least one chosen position."""
        B, T = x.shape
        chosen = torch.rand(B, T, generator=gen) < self.cfg.mask_prob
        forced = torch.randint(T, (B,), generator=gen)
        chosen[torch.arange(B), forced] |= ~chosen.any(dim=1)  # a row with nothing chosen gets one position
        action = torch.rand(B, T, generator=gen)
        random_ids = torch.randint(self.cfg.vocab_size, (B, T), generator=gen)
        inputs = x.clone()
        inputs[chosen & (action < 0.8)] = self.mask_id
        swap = chosen & (action >= 0.8) & (action < 0.9)
        inputs[swap] = random_ids[swap]
        targets = torch.where(chosen, x, torch.full_like(x, IGNORE))
        return inputs, targets
