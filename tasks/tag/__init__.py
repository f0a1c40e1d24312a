"""The tag stage: a tagger (a BiLSTM over word and character features, with a softmax or a CRF head) trained on
the corpus's tagged records (part of speech, named entities), then scored (token accuracy beside the
most-frequent-tag baseline; entity precision/recall/F1 with seqeval) on the held-out splits."""

from corpusforge.tasks.stage import Registers, Stage, StepOutputs
from corpusforge.tasks.tag.config import TagStageConfig

STAGE = Stage(
    section="tag", config=TagStageConfig, after="corpus", live=True,
    doc="Train a sequence labeller (POS tags, named entities) on tagged records and score it.",
    task="corpusforge.tasks.tag.build:tag_task", core="corpusforge.tasks.tag.build:build_tag",
    steps={
        # the weights go to MLflow once, inside the registered pyfunc model (corpusforge.tasks.tag.register)
        "tag": StepOutputs(mlflow=("config.json", "vocab.json", "metrics.json", "evaluation.json", "loss_curve.png",
                                   "confusion_matrix.png"),
                           plots=(("loss_curve.png", "Loss curves"), ("confusion_matrix.png", "Confusion matrix")),
                           report_plots="corpusforge.tasks.tag.render:report_plots",
                           highlights="corpusforge.tasks.tag.inference:highlights",
                           loader="corpusforge.tasks.tag.inference:load_artifact"),
    },
    registers=Registers(step="tag", wants="corpusforge.tasks.tag.register:tags",
                        register="corpusforge.tasks.tag.register:register_tagger",
                        what="a pyfunc that returns words, tags and entity spans"),
    adjust_upstream="corpusforge.tasks.tag.config:corpus_for",
    needs_split=("valid",),
    needs_split_hint="give tag train --valid FILE, or set corpus.split.valid=0.1",
)
