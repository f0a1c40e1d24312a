"""The masked encoder family's config: the GPT shape fields plus the [MASK] id; a plain dataclass, no torch (the
masking rate is the masked_lm objective's: corpusforge.models.objectives.MaskedSettings)."""

from __future__ import annotations

from dataclasses import dataclass, field

from corpusforge.models.configs import FROM_TOKENIZER
from corpusforge.models.gpt.config import GPTConfig


@dataclass(frozen=True)
class EncoderConfig(GPTConfig):
    """GPTConfig's shape and architecture fields, plus the [MASK] id."""

    mask_id: int | None = field(default=None, metadata={
        "doc": "The [MASK] token's id (set from the tokenizer's mask role).", "derived": FROM_TOKENIZER})

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.mask_id is not None and not 0 <= self.mask_id < self.vocab_size:
            raise ValueError(f"mask_id: must be a token id below vocab_size {self.vocab_size}, got {self.mask_id}")
