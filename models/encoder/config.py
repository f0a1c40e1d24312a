"""The masked encoder family's config: the GPT shape fields plus the masking rate; a plain dataclass, no torch."""

from __future__ import annotations

from dataclasses import dataclass, field

from corpusforge.models.configs import FROM_TOKENIZER
from corpusforge.models.gpt.config import GPTConfig


@dataclass(frozen=True)
class EncoderConfig(GPTConfig):
    """GPTConfig's shape and architecture fields, plus the masking rate and the [MASK] id."""

    mask_prob: float = field(default=0.15, metadata={"doc": "Share of positions chosen for the masked-LM loss."})
    mask_id: int | None = field(default=None, metadata={
        "doc": "The [MASK] token's id (set from the tokenizer's mask role).", "derived": FROM_TOKENIZER})

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 0.0 < self.mask_prob < 1.0:
            raise ValueError(f"mask_prob: must be in (0, 1), got {self.mask_prob}")
        if self.mask_id is not None and not 0 <= self.mask_id < self.vocab_size:
            raise ValueError(f"mask_id: must be a token id below vocab_size {self.vocab_size}, got {self.mask_id}")
