"""The tag stage's config: a family that learns a tag per word (the BiLSTM tagger, softmax or CRF), its training,
which corpus fields hold the words and the tags, and how the word vocabulary is made.

A leaf module: it imports no step module of its stage, so the pipeline can validate a config cheaply."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Literal

from corpusforge.models.configs import TrainConfig
from corpusforge.models.family import FamilyConfigs
from corpusforge.tasks.config import (
    ConfigError, artifact_ref, check_artifact_name, from_dict, model_identity, objective_field, settle_family,
)

STEP = "tag"
# the stage trains the families that learn from token-aligned records (corpusforge.models.family: trains_on "tagged")
TAGGED_FAMILIES = FamilyConfigs("tagged")
# the families that read sub-words with a pre-trained checkpoint's tokenizer, and so start from one (tag.init)
SUBWORD_FAMILIES = ("bert_tagger",)
# the model fields a fine-tuned checkpoint does not fix: the rest of its shape comes from the checkpoint
OWN_FIELDS = ("dropout", "classifier_dropout", "max_len")
TOKENS = "tokens"  # the corpus field of a tagged record's words (corpus.reader.tags: storage/readers.py)


@dataclass(frozen=True)
class TagStageConfig:
    """A tagger trained on the corpus's tagged records: their ``tokens`` (the words, one space between them) and one
    tag field (``corpus.reader.tags``), as many tags as words."""

    name: str = field(default="tagger", metadata={"doc": "Artifact name (and the registered model's name)."})
    family: str = field(default="tagger", metadata={"doc":
        "The model family (a folder under models/ that trains on tagged records): tagger (a BiLSTM over word "
        "embeddings and a character CNN, with a softmax or a CRF head: model.head), or bert_tagger (BERT token "
        "classification, started from a pre-trained bert checkpoint: init)."})
    model: object | None = field(default=None, metadata={"doc":
        "The family's config (corpusforge.models.tagger.config.TaggerConfig; null: its defaults); vocab_size, "
        "pad_id, n_chars and n_tags are set from the training words, characters and tags.",
        "variants": ("family", TAGGED_FAMILIES), "identity_value": model_identity})
    objective: object | None = objective_field()
    train: TrainConfig = field(default_factory=TrainConfig, metadata={"doc":
        "How to train (corpusforge.models.configs.TrainConfig): the same keys as lm.train."})
    init: str | None = field(default=None, metadata=artifact_ref(("lm", "tag"), doc=(
        "bert_tagger: the pre-trained checkpoint it starts from (an artifact id or unique prefix): a bert lm "
        "artifact (its body loads by name, its shape and its own WordPiece tokenizer are used: each word is split "
        "into its sub-words, the first one's state is tagged), or a tag artifact of that family to train further. "
        "What did not load is reported. The tagger family trains from scratch (null).")))
    subword_labels: Literal["first", "all"] = field(default="first", metadata={
        "identity": lambda cfg: cfg.subword_labels != "first",
        "doc": "bert_tagger: which sub-words of a word carry its tag in training: first (BERT's NER setting: the "
               "others are not trained on) or all (each sub-word learns the word's tag). Either way a word's "
               "prediction is its first sub-word's."})
    tags: str = field(default="upos", metadata={"doc":
        "The corpus's tag field to learn (a key of corpus.reader.tags: upos, xpos, ner, ...)."})
    min_count: int = field(default=2, metadata={"doc":
        "Training words seen fewer times than this read as <unk> (their characters are still read), so the model "
        "learns what to do with words it never saw; 1 keeps every training word."})
    lowercase: bool = field(default=False, metadata={"doc":
        "Look words up lowercased in the word vocabulary (the characters keep their case). Off by default: case "
        "tells a proper noun or a named entity apart."})
    strict: bool = field(default=False, metadata={"doc":
        "Entity tags: score with seqeval's strict mode (only entities whose tags follow the scheme exactly) instead "
        "of the CoNLL scorer's reading (conlleval: an I- after O starts an entity)."})
    evaluate_test: bool = field(default=True, metadata={"doc":
        "Also score the test split when there is one (the headline figures are then the test split's)."})

    def __post_init__(self) -> None:
        check_artifact_name(self.name)
        settle_family(self, TAGGED_FAMILIES)
        if not isinstance(self.tags, str) or not self.tags or self.tags == TOKENS:
            raise ValueError(f"tags: the corpus's tag field (a key of corpus.reader.tags), got {self.tags!r}")
        if not isinstance(self.min_count, int) or self.min_count < 1:
            raise ValueError(f"min_count: an integer >= 1, got {self.min_count!r}")
        if self.family in SUBWORD_FAMILIES and not self.init:
            raise ValueError(f"init: family {self.family} starts from a pre-trained BERT and reads words with its "
                             "tokenizer; give init (--init ID: a bert lm artifact)")
        if self.subword_labels != "first" and self.family not in SUBWORD_FAMILIES:
            raise ValueError(f"subword_labels: {self.subword_labels} is for a family that reads sub-words "
                             f"({', '.join(SUBWORD_FAMILIES)}); {self.family} reads whole words")
        if self.init and self.family not in SUBWORD_FAMILIES:
            raise ValueError(f"init: family {self.family} trains from scratch on the corpus's own words; a "
                             f"pre-trained checkpoint is for {', '.join(SUBWORD_FAMILIES)}")


def tag_config_from_dict(data: dict[str, Any]) -> TagStageConfig:
    return from_dict(TagStageConfig, data, "tag")


def corpus_for(cfg: TagStageConfig, corpus_cfg: Any) -> Any:
    """The run's corpus config as the tag stage needs it (its ``adjust_upstream``, checked with the config before
    any work): records with words and the tag field ``tag.tags`` (corpus.reader.tags). Nothing is changed; a corpus
    without them is a ConfigError saying what to set."""
    tags = dict(getattr(corpus_cfg.reader, "tags", None) or {})
    if not tags:
        raise ConfigError("tag: the corpus has no tagged records; set corpus.reader.tags (e.g. {upos: upos} for "
                          "CoNLL-U, {ner: -1} for a CoNLL column file whose last column holds the tags)")
    if cfg.tags not in tags:
        raise ConfigError(f"tag.tags: {cfg.tags!r} is not a tag field of the corpus (corpus.reader.tags has "
                          f"{', '.join(tags)})")
    return corpus_cfg


def model_config(cfg: TagStageConfig, **derived: Any) -> Any:
    """The family's config with what the training data (or the checkpoint's tokenizer) sets."""
    try:
        return dataclasses.replace(cfg.model, **derived)
    except ValueError as exc:
        raise ConfigError(f"tag.model.{exc}") from None
