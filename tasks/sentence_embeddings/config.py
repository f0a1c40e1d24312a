"""The sentence_embeddings stage's config: a family that embeds sentences (trained on pairs) and its config, training,
which two fields make the pairs, and the checkpoint it starts from.

A leaf module: it imports no step module of its stage, so the pipeline can validate a config cheaply."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from corpusforge.models.configs import TrainConfig
from corpusforge.models.family import FamilyConfigs
from corpusforge.tasks.config import (
    ConfigError, artifact_ref, check_artifact_name, derived_model_config, from_dict, model_identity, objective_field,
    roles_to_add, settle_family,
)

STEP = "sentence_embeddings"
# the families that learn from pairs of sentences and embed them (corpusforge.models.family)
SENTENCE_FAMILIES = FamilyConfigs("pairs", "embed")
OWN_FIELDS = ("dropout", "pooling")  # what a checkpoint (init) does not fix


@dataclass(frozen=True)
class SentenceEmbeddingsConfig:
    """A sentence encoder trained siamese on the tokenizer stage's encoded pairs (two ``<field>_ids`` columns)."""

    name: str = field(default="sentence-encoder", metadata={"doc": "Artifact name (and the registered model's name)."})
    family: str = field(default="sbert", metadata={"doc":
        "The model family (a folder under models/ that trains on pairs and embeds): sbert (Sentence-BERT)."})
    model: object | None = field(default=None, metadata={"doc":
        "The family's config (the dataclass in corpusforge.models.<family>.config; null: its defaults); vocab_size "
        "and the special-token ids come from the tokenizer; with init, the checkpoint's shape wins.",
        "variants": ("family", SENTENCE_FAMILIES), "identity_value": model_identity})
    objective: object | None = objective_field()
    train: TrainConfig = field(default_factory=TrainConfig, metadata={"doc":
        "How to train (corpusforge.models.configs.TrainConfig): the same keys as lm.train; batch_size is also the "
        "number of candidates each sentence must find its partner among."})
    fields: tuple[str, str] = field(default=("src", "tgt"), metadata={"doc":
        "The two corpus fields whose texts belong together (a sentence and its translation, a paraphrase, a question "
        "and its answer); line-aligned files from `seq2seq`-style sources are src and tgt."})
    init: str | None = field(default=None, metadata=artifact_ref(("lm", STEP), doc=(
        "Start from this checkpoint (an artifact id or unique prefix): a pre-trained BERT (an lm of the bert family: "
        "its body loads by name, its shape and tokenizer are used) or a sentence encoder to train further. null: a "
        "fresh init.")))
    evaluate_test: bool = field(default=True, metadata={"doc":
        "Also score retrieval on the test split (the headline top1 is then the test split's)."})

    def __post_init__(self) -> None:
        check_artifact_name(self.name)
        settle_family(self, SENTENCE_FAMILIES)
        fields = tuple(self.fields)
        object.__setattr__(self, "fields", fields)
        if len(fields) != 2 or not all(fields) or fields[0] == fields[1]:
            raise ValueError(f"fields: two different corpus fields, got {list(fields)}")

    def model_config(self, vocab_size: int, special_ids: dict[str, int] | None = None) -> object:
        return derived_model_config(self.family, self.model, vocab_size, special_ids)


def sentence_embeddings_config_from_dict(data: dict[str, Any]) -> SentenceEmbeddingsConfig:
    return from_dict(SentenceEmbeddingsConfig, data, STEP)


def tokenizer_for(cfg: SentenceEmbeddingsConfig, tokenizer_cfg: Any) -> Any:
    """The run's tokenizer config as the stage needs it (its ``adjust_upstream``): the roles the family derives ids
    from (cls, sep, pad) added when the section has none of a field's roles; the two fields encoded (format parquet)
    when the section names no fields. The model puts [CLS]/[SEP] around each sentence itself."""
    added = roles_to_add(cfg.family, tokenizer_cfg)
    changes: dict[str, Any] = {"roles": {**(tokenizer_cfg.roles or {}), **added}} if added else {}
    if not tokenizer_cfg.fields:
        changes.update(fields=tuple(cfg.fields), format="parquet")
    elif not set(cfg.fields) <= set(tokenizer_cfg.fields):
        raise ConfigError(f"tokenizer.fields: {list(tokenizer_cfg.fields)} lacks the sentence_embeddings stage's "
                          f"{'/'.join(cfg.fields)}; add them (or set sentence_embeddings.fields)")
    if tokenizer_cfg.add_special_tokens:
        raise ConfigError("tokenizer.add_special_tokens: the sentence_embeddings stage reads plain ids (the model puts "
                          "[CLS]/[SEP] around each sentence itself); set it to false")
    if not getattr(tokenizer_cfg, "encode", True):
        raise ConfigError("sentence_embeddings: trains on the encoded pairs; set tokenizer.encode: true")
    return dataclasses.replace(tokenizer_cfg, **changes) if changes else tokenizer_cfg
