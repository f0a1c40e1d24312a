"""The classify stage's config: a family that trains on labelled records and its config, training, which field is
the text and which the label, what it starts from (a pre-trained encoder or classifier, word vectors) and which
weights it trains.

A leaf module: it imports no step module of its stage, so the pipeline can validate a config cheaply."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Literal

from corpusforge.models.configs import LoraSettings, TrainConfig
from corpusforge.models.family import FamilyConfigs
from corpusforge.tasks.config import (
    ConfigError, artifact_ref, check_artifact_name, derived_model_config, from_dict, model_identity, objective_field,
    roles_to_add, settle_family,
)

STEP = "classify"
# the stage trains the families that learn from labelled records (corpusforge.models.family: trains_on "labelled")
LABELLED_FAMILIES = FamilyConfigs("labelled")
# the model fields a fine-tuned checkpoint does not fix (classify.init): the rest of the fields the classifier's
# config shares with the checkpoint's (its shape, its vocabulary, its special ids) come from the checkpoint
OWN_FIELDS = ("dropout",)


@dataclass(frozen=True)
class ClassifyStageConfig:
    """A classifier trained on the tokenizer stage's encoded labelled records (a ``<text>_ids`` column and the label
    column)."""

    name: str = field(default="classifier", metadata={"doc": "Artifact name (and the registered model's name)."})
    family: str = field(default="rnn_classifier", metadata={"doc":
        "The model family (a folder under models/ that trains on labelled records): rnn_classifier (many-to-one "
        "LSTM/GRU, a BiLSTM) or bert_classifier (BERT with a [CLS] classifier)."})
    model: object | None = field(default=None, metadata={"doc":
        "The family's config (the dataclass in corpusforge.models.<family>.config, picked by family; null: its "
        "defaults); vocab_size, the special-token ids and n_classes are set from the tokenizer and the labels; with "
        "init, the checkpoint's shape wins.", "variants": ("family", LABELLED_FAMILIES), "identity_value": model_identity})
    objective: object | None = objective_field()
    train: TrainConfig = field(default_factory=TrainConfig, metadata={"doc":
        "How to train (corpusforge.models.configs.TrainConfig): the same keys as lm.train."})
    text: str = field(default="text", metadata={"doc": "The corpus field with the text to classify."})
    label: str = field(default="label", metadata={"doc": "The corpus label field (corpus.reader.labels)."})
    init: str | None = field(default=None, metadata=artifact_ref(("lm", "classify", "sentence_embeddings"), doc=(
        "Fine-tune from this checkpoint (an artifact id or unique prefix): a pre-trained encoder lm (the bert family: "
        "its body and pooler load by name, its shape and its tokenizer are used, the texts are encoded with it), a "
        "sentence encoder (sentence_embeddings: with finetune head and model.pooling mean, a linear probe of its "
        "vectors) or a classify artifact to train further (its classes must hold every label). What did not load is "
        "reported. null: a fresh init.")))
    embeddings: str | None = field(default=None, metadata=artifact_ref(("embeddings", "glove"), doc=(
        "Start the token embedding from these word vectors (word2vec, fastText or GloVe: an embeddings section of "
        "the pipeline or an artifact id): each token of the tokenizer found among the vectors' words gets its "
        "vector, model.n_embd becomes the vectors' size; the coverage is reported. Best with a word tokenizer.")))
    finetune: Literal["all", "head", "lora"] = field(default="all", metadata={"doc":
        "Which weights train: all; only the task head (the classifier and BERT's pooler; everything under it "
        "stays as initialised: a probe of the features); or lora: LoRA adapters on the body (the family's "
        "lora_targets unless lora.targets names others) and the whole task head, as in the LoRA paper's GLUE "
        "runs. The saved model has the adapters folded in (plain weights)."})
    lora: LoraSettings | None = field(default=None, metadata={
        "identity": lambda cfg: cfg.lora is not None,
        "doc": "finetune lora's adapters (r, alpha, dropout, targets, train_norms); null: the defaults."})
    evaluate_test: bool = field(default=True, metadata={"doc":
        "Also score the test split when it has labels (the headline accuracy/f1 are then the test split's)."})
    labels: dict[str, str] = field(default_factory=dict, metadata={
        "identity": lambda cfg: bool(cfg.labels),
        "doc": "Raw label -> class, applied to every split before the classes are counted and to every file scored "
               "later: {pos: positive, Positive: positive}. Without it, labels that differ only in case or spacing "
               "are an error listing them (they would be classes of their own)."})

    def __post_init__(self) -> None:
        check_artifact_name(self.name)
        if not isinstance(self.labels, dict) or not all(isinstance(k, (str, int)) and isinstance(v, (str, int))
                                                       for k, v in self.labels.items()):
            raise ValueError("labels: a map of raw label -> class, e.g. {pos: positive, Positive: positive}")
        object.__setattr__(self, "labels", {str(k).strip(): str(v).strip() for k, v in self.labels.items()})
        settle_family(self, LABELLED_FAMILIES)
        if not self.text or not self.label or self.text == self.label:
            raise ValueError(f"text/label: two different fields, got {self.text!r} and {self.label!r}")
        if self.finetune == "head" and not self.init:
            raise ValueError("finetune: head trains the classifier alone on features that stay as initialised; give "
                             "init (a pre-trained checkpoint), else the features are random")
        if self.finetune == "lora" and not self.init:
            raise ValueError("finetune: lora adapts a pre-trained body whose weights stay frozen; give init (a "
                             "pre-trained checkpoint), else the body is random")
        if self.lora is not None and self.finetune != "lora":
            raise ValueError(f"lora: adapters are for finetune: lora (finetune is {self.finetune})")
        if self.finetune == "lora":
            from corpusforge.models.family import family

            if self.lora is None:
                object.__setattr__(self, "lora", LoraSettings())
            try:
                self.lora.for_family(family(self.family))  # a family without default targets: told before any work
            except ValueError as exc:
                raise ValueError(f"lora: {exc}") from None

    def model_config(self, vocab_size: int, special_ids: dict[str, int] | None = None) -> object:
        """The model's config with what the tokenizer sets: its vocabulary size and the ids the family derives from
        special-token roles (pad; BERT's cls and sep)."""
        return derived_model_config(self.family, self.model, vocab_size, special_ids)


def classify_config_from_dict(data: dict[str, Any]) -> ClassifyStageConfig:
    return from_dict(ClassifyStageConfig, data, "classify")


def tokenizer_for(cfg: ClassifyStageConfig, tokenizer_cfg: Any) -> Any:
    """The run's tokenizer config as the classify stage needs it (its ``adjust_upstream``, checked with the config,
    before any work): the special-token roles the family derives ids from (pad; cls and sep for BERT) added when the
    tokenizer section has none of a field's roles (its own value wins); the text field encoded into its ``<text>_ids``
    column with the label passed through (format parquet), when the section names no fields. The model adds
    [CLS]/[SEP] itself, so a tokenizer that wraps every text in them is refused."""
    added = roles_to_add(cfg.family, tokenizer_cfg)
    changes: dict[str, Any] = {"roles": {**(tokenizer_cfg.roles or {}), **added}} if added else {}
    if not tokenizer_cfg.fields:
        changes.update(fields=(cfg.text,), format="parquet")
    elif cfg.text not in tokenizer_cfg.fields:
        raise ConfigError(f"tokenizer.fields: {list(tokenizer_cfg.fields)} lacks the classify stage's text field "
                          f"{cfg.text!r}; add it (or set classify.text)")
    if cfg.label not in tokenizer_cfg.labels:
        changes["labels"] = (*tokenizer_cfg.labels, cfg.label)
    if tokenizer_cfg.add_special_tokens:
        raise ConfigError("tokenizer.add_special_tokens: the classify stage reads plain ids (a BERT classifier puts "
                          "[CLS]/[SEP] around the text itself); set it to false")
    if not getattr(tokenizer_cfg, "encode", True):
        raise ConfigError("classify: trains on the encoded records; set tokenizer.encode: true")
    return dataclasses.replace(tokenizer_cfg, **changes) if changes else tokenizer_cfg
