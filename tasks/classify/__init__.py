"""The classify stage: a classifier (a BiLSTM, or BERT fine-tuned from a pre-trained checkpoint) trained on
labelled records, then scored (accuracy, F1, the confusion matrix) on the held-out splits."""

from corpusforge.tasks.classify.config import ClassifyStageConfig
from corpusforge.tasks.stage import Registers, Stage, StepOutputs

STAGE = Stage(
    section="classify", config=ClassifyStageConfig, after="tokenizer", live=True,
    doc="Train a text classifier on labelled records (RNN, or BERT fine-tuned from a checkpoint) and score it.",
    task="corpusforge.tasks.classify.build:classify_task", core="corpusforge.tasks.classify.build:build_classify",
    steps={
        # the weights go to MLflow once, inside the registered pyfunc model (corpusforge.tasks.classify.register)
        "classify": StepOutputs(mlflow=("config.json", "metrics.json", "evaluation.json", "loss_curve.png",
                                        "confusion_matrix.png"),
                                plots=(("loss_curve.png", "Loss curves"), ("confusion_matrix.png", "Confusion matrix")),
                                highlights="corpusforge.tasks.classify.inference:highlights",
                                loader="corpusforge.tasks.classify.inference:load_artifact"),
    },
    registers=Registers(step="classify", wants="corpusforge.tasks.classify.register:classifies",
                        register="corpusforge.tasks.classify.register:register_classifier",
                        what="a pyfunc that returns labels and probabilities"),
    adjust_upstream="corpusforge.tasks.classify.config:tokenizer_for",
    needs_split=("valid",),
    needs_split_hint="give classify train --valid FILE, or set corpus.split.valid=0.1",
)
