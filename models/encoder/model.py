"""A Transformer encoder (BERT-style), trained as a masked language model, in one readable file.

The blocks are the GPT decoder's (corpusforge.models.gpt) with the causal mask taken away: every position attends to
every other, left and right, so the model sees the whole window. That also means it cannot be trained on
the next token (it would simply read it). It is trained instead on *masked* tokens (Devlin et al. 2019), by the
objective corpusforge.models.objectives.MaskedLM: about ``mask_prob`` of the positions in each window are chosen;
of those, 80% become the tokenizer's ``[MASK]`` token (``cfg.mask_id``, its mask role), 10% a random token and
10% stay as they are, and the loss is the cross-entropy of the original tokens at the chosen positions only.

The reported ``val_loss`` is that masked-token cross-entropy and ``val_ppl`` its exponential: a
fill-in-the-blank score, not comparable with a left-to-right LM's perplexity. An encoder cannot generate text;
``corpusforge lm inspect`` shows its attention (full matrices, no triangle) and what it puts in a ``[MASK]``
appended to the prompt.
"""

from __future__ import annotations

from corpusforge.models.encoder.config import EncoderConfig
from corpusforge.models.gpt.model import GPT


class TransformerEncoder(GPT):
    def __init__(self, cfg: EncoderConfig):
        if cfg.mask_id is None:
            raise ValueError("mask_id: an encoder needs the tokenizer's mask token (tokenizer.roles.mask)")
        super().__init__(cfg, causal=False)

    @property
    def mask_id(self) -> int:
        return self.cfg.mask_id
