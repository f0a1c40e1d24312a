"""The qa stage's config: a reader family (BERT with a start/end head, started from a pre-trained checkpoint), its
training, how questions and passages are cut into windows, how answers are decoded, and how the reader is scored
(cross-validation over articles when the data has no training set of its own).

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

STEP = "qa"
# the stage trains the families that learn from question-passage-answer records (models.family: trains_on "spans")
SPAN_FAMILIES = FamilyConfigs("spans")
# the model fields a fine-tuned checkpoint does not fix: the rest of its shape comes from the checkpoint
OWN_FIELDS = ("dropout", "classifier_dropout")
MODES = ("bm25", "dense", "hybrid")


@dataclass(frozen=True)
class QaStageConfig:
    """An extractive reader trained on the corpus's question-answering records (corpus.reader.squad: one record
    per paragraph, its questions and their answers' character offsets in its meta)."""

    name: str = field(default="reader", metadata={"doc": "Artifact name (and the registered model's name)."})
    family: str = field(default="bert_reader", metadata={"doc":
        "The model family (a folder under models/ that trains on spans): bert_reader (BERT with a start and an end "
        "score per token, started from a pre-trained bert checkpoint: init)."})
    model: object | None = field(default=None, metadata={"doc":
        "The family's config (corpusforge.models.bert_reader.config.BertReaderConfig; null: its defaults); its "
        "shape and special ids come from the checkpoint (init), only dropout and classifier_dropout are its own.",
        "variants": ("family", SPAN_FAMILIES), "identity_value": model_identity})
    objective: object | None = objective_field()
    train: TrainConfig = field(default_factory=TrainConfig, metadata={"doc":
        "How to train (corpusforge.models.configs.TrainConfig): the same keys as lm.train; max_iters counts "
        "optimizer steps over question windows."})
    init: str | None = field(default=None, metadata=artifact_ref(("lm", "qa"), doc=(
        "The pre-trained checkpoint the reader starts from (an artifact id or unique prefix): a bert lm artifact "
        "(its body loads by name, its shape and its WordPiece tokenizer are used), or a qa artifact to train "
        "further. What did not load is reported.")))
    max_query_len: int = field(default=64, metadata={"doc":
        "Question tokens read at most (BERT's SQuAD setting: 64); a longer question is cut, said in the run's "
        "warnings."})
    stride: int = field(default=0, metadata={"doc":
        "Tokens between the starts of consecutive windows of a passage too long for one (BERT's doc_stride: 128 "
        "with 384-token windows); windows overlap by their length minus this, so an answer cut by one window is "
        "whole in the next. 0: half a window's passage tokens. More than a window holds is refused (tokens "
        "between windows would never be read)."})
    max_answer_len: int = field(default=30, metadata={"doc":
        "Longest answer decoded, in tokens (BERT's SQuAD setting: 30)."})
    n_best: int = field(default=20, metadata={"doc":
        "Start and end positions tried per window (the n best of each; BERT: 20); the best valid pair wins."})
    folds: int = field(default=0, metadata={"doc":
        "Cross-validation over articles (a record's title; its paragraphs stay together): k >= 2 trains k readers, "
        "each on the train split's other articles, scores every question by the reader that did not see its "
        "article, and reports those pooled figures; the published reader is then trained on every article. 0: "
        "no cross-validation (scored on the valid split, which must then exist)."})
    retrieval: Literal["bm25"] = field(default="bm25", metadata={"doc":
        "How the scored split's questions retrieve their paragraph for the retrieve-then-read figures (BM25 over "
        "that split's paragraphs; dense and hybrid need a sentence encoder: `qa evaluate --mode`)."})
    top: int = field(default=5, metadata={"doc":
        "Retrieve then read: the passages read per question (the answer is the best span of any)."})
    evaluate_test: bool = field(default=True, metadata={"doc":
        "Also score the test split when there is one."})

    def __post_init__(self) -> None:
        check_artifact_name(self.name)
        settle_family(self, SPAN_FAMILIES)
        if not isinstance(self.stride, int) or isinstance(self.stride, bool) or self.stride < 0:
            raise ValueError(f"stride: an integer >= 0 (0: half a window), got {self.stride!r}")
        for name in ("max_query_len", "max_answer_len", "n_best", "top"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name}: an integer >= 1, got {value!r}")
        if not isinstance(self.folds, int) or self.folds < 0 or self.folds == 1:
            raise ValueError(f"folds: 0 (no cross-validation) or an integer >= 2, got {self.folds!r}")
        if not self.init:
            raise ValueError(f"init: family {self.family} starts from a pre-trained BERT and reads with its "
                             "tokenizer; give init (--init ID: a bert lm artifact, e.g. one `corpusforge lm train ... "
                             "--preset bert-mlm-small` made)")


def qa_config_from_dict(data: dict[str, Any]) -> QaStageConfig:
    return from_dict(QaStageConfig, data, "qa")


def corpus_for(cfg: QaStageConfig, corpus_cfg: Any) -> Any:
    """The run's corpus config as the qa stage needs it (its ``adjust_upstream``): question-answering records
    (corpus.reader.squad). Nothing is changed; a corpus without them is a ConfigError saying what to set."""
    if not getattr(corpus_cfg.reader, "squad", False):
        raise ConfigError("qa: the corpus has no question-answering records; set corpus.reader.squad: true (SQuAD "
                          "v1.1 .json files) and corpus.clean.preset: raw")
    return corpus_cfg


def model_config(cfg: QaStageConfig, **derived: Any) -> Any:
    """The family's config with what the checkpoint's tokenizer sets."""
    try:
        return dataclasses.replace(cfg.model, **derived)
    except ValueError as exc:
        raise ConfigError(f"qa.model.{exc}") from None
