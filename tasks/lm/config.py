"""The lm stage's config: the model family and its config, training, and the sample written afterwards.

A leaf module: it imports no step module of its stage, so the pipeline can validate a config cheaply."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, ClassVar

from corpusforge.models.configs import TrainConfig
from corpusforge.models.family import FamilyConfigs
from corpusforge.tasks.config import (
    NOT_IN_ID, artifact_ref, check_artifact_name, derived_model_config, from_dict, model_identity, objective_field,
    roles_to_add, settle_family,
)
from corpusforge.tasks.textgen import GENERATE_DEFAULTS  # the generation defaults, shared with post-trained models



@dataclass(frozen=True)
class SampleConfig:
    """A text sample written next to the model after training (and the generate defaults)."""

    prompt: str = field(default=GENERATE_DEFAULTS["prompt"], metadata={
        "doc": "Prompt for the sample (empty: start from the end-of-text id)."})
    max_new_tokens: int = field(default=GENERATE_DEFAULTS["max_new_tokens"], metadata={
        "doc": "Tokens to generate (0: no sample)."})
    temperature: float = field(default=GENERATE_DEFAULTS["temperature"], metadata={"doc": "Softmax temperature."})
    top_k: int | None = field(default=GENERATE_DEFAULTS["top_k"], metadata={
        "doc": "Sample among the k most likely tokens (null: all)."})
    top_p: float | None = field(default=GENERATE_DEFAULTS["top_p"], metadata={"doc": "Nucleus sampling mass (null: off)."})
    seed: int = field(default=GENERATE_DEFAULTS["seed"], metadata={"doc": "Sampling seed."})

    def __post_init__(self) -> None:
        if self.max_new_tokens < 0:
            raise ValueError(f"max_new_tokens: must be >= 0, got {self.max_new_tokens}")
        if self.temperature <= 0:
            raise ValueError(f"temperature: must be > 0, got {self.temperature}")
        if self.top_p is not None and not 0 < self.top_p <= 1:
            raise ValueError(f"top_p: must be in (0, 1], got {self.top_p}")


# the lm stage trains the families that learn from a token stream (corpusforge.models.family: trains_on "tokens")
LM_FAMILIES = FamilyConfigs("tokens")


@dataclass(frozen=True)
class LMConfig:
    """A neural LM trained on the tokenizer stage's encoded shards."""

    name: str = field(default="lm", metadata={"doc": "Artifact name."})
    family: str = field(default="gpt", metadata={
        "doc": "The model family (a folder under models/ that trains on a token stream): gpt (decoder "
               "Transformer), rnn (Elman/LSTM/GRU: see model.cell), nplm (Bengio 2003) or encoder (bidirectional "
               "Transformer trained on masked tokens; its val_loss/val_ppl score the masked tokens and it cannot "
               "generate)."})
    # the family's config dataclass (models/<family>/config.py), picked by ``family``
    model: object | None = field(default=None, metadata={
        "doc": "The family's config (the dataclass in corpusforge.models.<family>.config, picked by family; null: "
               "its defaults); vocab_size and the special-token ids come from the tokenizer.",
        "variants": ("family", LM_FAMILIES), "identity_value": model_identity})
    objective: object | None = objective_field()
    train: TrainConfig = field(default_factory=TrainConfig, metadata={
        "doc": "How to train (corpusforge.models.configs.TrainConfig)."})
    sample: SampleConfig = field(default_factory=SampleConfig, metadata={
        "doc": "The sample generated after training (its own lm_sample artifact: editing it retrains nothing).",
        **NOT_IN_ID})
    evaluate_test: bool = field(default=True, metadata={"doc": "Also report loss/perplexity on the test split."})
    init: str | None = field(default=None, metadata=artifact_ref(("lm",), identity_name="init_from", doc=(
        "Start from this lm's weights (the id or a unique prefix of an lm artifact in the store) with a fresh "
        "optimizer: every tensor whose name and shape fit is loaded, the rest keeps its fresh init and is "
        "reported (missing, unexpected, mismatched shapes) in the manifest. The parent's id joins this lm's "
        "inputs (its id and lineage). null: a fresh init. (Was init_from, the name still read with a warning: "
        "init is every training stage's name for it.)")))

    RENAMED_KEYS: ClassVar[dict[str, str]] = {"init_from": "init"}

    def __post_init__(self) -> None:
        check_artifact_name(self.name)
        settle_family(self, LM_FAMILIES)

    def model_config(self, vocab_size: int, special_ids: dict[str, int] | None = None) -> object:
        """The model's config with what the tokenizer sets: its vocabulary size, and the ids the family derives
        from special-token roles (an encoder's mask_id, an NPLM's pad_id; corpusforge.models.family)."""
        return derived_model_config(self.family, self.model, vocab_size, special_ids)

    def train_config(self) -> TrainConfig:
        return self.train


def lm_config_from_dict(data: dict[str, Any]) -> LMConfig:
    return from_dict(LMConfig, data, "lm")


def tokenizer_for(cfg: LMConfig, tokenizer_cfg: Any) -> Any:
    """The run's tokenizer config with the special-token roles the lm's family derives ids from (an encoder's
    mask, corpusforge.models.family ``derived``), added when the tokenizer section has none of a field's roles
    (its own value wins). The lm stage's ``adjust_upstream``: checked with the config, before any work."""
    added = roles_to_add(cfg.family, tokenizer_cfg)
    return dataclasses.replace(tokenizer_cfg, roles={**(tokenizer_cfg.roles or {}), **added}) if added else tokenizer_cfg
