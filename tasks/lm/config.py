"""The lm stage's config: the model family and its config, training, and the sample written afterwards.

A leaf module: it imports no step module of its stage, so the pipeline can validate a config cheaply."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Literal

from corpusforge.models.configs import FAMILY_CONFIGS, EncoderConfig, GPTConfig, NPLMConfig, RNNConfig, TrainConfig
from corpusforge.tasks.config import NOT_IN_ID, ConfigError, check_artifact_name, from_dict

# The generation defaults, in one place: `corpusforge lm generate`, the lm_sample step (SampleConfig) and the
# registered MLflow pyfunc (tasks.lm_pyfunc.DEFAULT_PARAMS) all read them. top_k/top_p None: off.
GENERATE_DEFAULTS: dict[str, Any] = {"prompt": "\n", "max_new_tokens": 200, "temperature": 0.8, "top_k": None,
                                     "top_p": None, "seed": 1337}


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


ModelConfig = GPTConfig | RNNConfig | NPLMConfig | EncoderConfig


@dataclass(frozen=True)
class LMConfig:
    """A neural LM trained on the tokenizer stage's encoded shards."""

    name: str = field(default="lm", metadata={"doc": "Artifact name."})
    family: Literal["gpt", "rnn", "nplm", "encoder"] = field(default="gpt", metadata={
        "doc": "gpt (decoder Transformer), rnn (Elman/LSTM/GRU: see model.cell), nplm (Bengio 2003) or encoder "
               "(bidirectional Transformer trained on masked tokens; its val_loss/val_ppl score the masked "
               "tokens and it cannot generate)."})
    model: ModelConfig | None = field(default=None, metadata={
        "doc": "The family's config (GPTConfig, RNNConfig, NPLMConfig or EncoderConfig in corpusforge.models.configs, "
               "picked by family; null: its defaults); vocab_size comes from the tokenizer.",
        "variants": ("family", FAMILY_CONFIGS)})
    train: TrainConfig = field(default_factory=TrainConfig, metadata={
        "doc": "How to train (corpusforge.models.configs.TrainConfig)."})
    sample: SampleConfig = field(default_factory=SampleConfig, metadata={
        "doc": "The sample generated after training (its own lm_sample artifact: editing it retrains nothing).",
        **NOT_IN_ID})
    evaluate_test: bool = field(default=True, metadata={"doc": "Also report loss/perplexity on the test split."})

    def __post_init__(self) -> None:
        check_artifact_name(self.name)
        wanted = FAMILY_CONFIGS[self.family]
        if self.model is None:
            object.__setattr__(self, "model", wanted())
        elif type(self.model) is not wanted:
            raise ValueError(f"model: family {self.family!r} takes a {wanted.__name__}, got a {type(self.model).__name__}")

    def model_config(self, vocab_size: int) -> ModelConfig:
        """The model's config with the tokenizer's vocabulary size."""
        try:
            return dataclasses.replace(self.model, vocab_size=vocab_size)
        except ValueError as exc:
            raise ConfigError(f"model.{exc}") from None

    def train_config(self) -> TrainConfig:
        return self.train


def lm_config_from_dict(data: dict[str, Any]) -> LMConfig:
    return from_dict(LMConfig, data, "lm")
