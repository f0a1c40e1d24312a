"""The qa stage: an extractive reader (BERT with a start and an end score per token, started from a pre-trained
checkpoint) trained on the corpus's question-answering records (SQuAD format), then scored: SQuAD exact match and F1
on each question's own paragraph beside the sliding-window baseline, BM25 retrieval over the scored paragraphs, and
the answers read from the retrieved passages; cross-validated over articles when the data has no training set."""

from corpusforge.tasks.qa.config import QaStageConfig
from corpusforge.tasks.stage import Registers, Stage, StepOutputs

STAGE = Stage(
    section="qa", config=QaStageConfig, after="corpus", live=True,
    doc="Train an extractive question-answering reader on SQuAD-format records and score it (exact match, F1, "
        "retrieval).",
    task="corpusforge.tasks.qa.build:qa_task", core="corpusforge.tasks.qa.build:build_qa",
    steps={
        # the weights go to MLflow once, inside the registered pyfunc model (corpusforge.tasks.qa.register)
        "qa": StepOutputs(mlflow=("config.json", "metrics.json", "evaluation.json", "predictions.json",
                                  "loss_curve.png"),
                          plots=(("loss_curve.png", "Loss curves"),),
                          report_plots="corpusforge.tasks.qa.render:report_plots",
                          highlights="corpusforge.tasks.qa.inference:highlights",
                          loader="corpusforge.tasks.qa.inference:load_artifact"),
    },
    registers=Registers(step="qa", wants="corpusforge.tasks.qa.register:answers",
                        register="corpusforge.tasks.qa.register:register_reader",
                        what="a pyfunc that answers questions from passages"),
    adjust_upstream="corpusforge.tasks.qa.config:corpus_for",
)
