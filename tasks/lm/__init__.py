"""The lm stage: a neural language model (GPT, RNN/LSTM/GRU, NPLM, masked encoder) on the encoded token shards."""

from corpusforge.tasks.lm.config import LMConfig
from corpusforge.tasks.stage import Registers, Stage, StepOutputs

STAGE = Stage(
    section="lm", config=LMConfig, after="tokenizer", live=True,
    doc="Train a neural language model.",
    task="corpusforge.tasks.lm.train:lm_task", core="corpusforge.tasks.lm.train:build_lm",
    steps={
        # the weights go to MLflow once, inside the registered pyfunc model (corpusforge.tasks.lm.register)
        "lm": StepOutputs(mlflow=("config.json", "metrics.json", "loss_curve.png"),
                          plots=(("loss_curve.png", "Loss curves"),),
                          report_plots="corpusforge.tasks.lm.report:report_plots",
                          loader="corpusforge.tasks.lm.inference:load_artifact"),
        "lm_sample": StepOutputs(mlflow=("sample.txt",)),
    },
    registers=Registers(step="lm", wants="corpusforge.tasks.lm.register:registrable",
                        register="corpusforge.tasks.lm.register:register_lm",
                        what="a text-generating or mask-filling pyfunc"),
    adjust_upstream="corpusforge.tasks.lm.config:tokenizer_for",
    needs_split=("valid", "test"),
    needs_split_hint="give lm train --valid FILE, or set corpus.split.valid=0.1",
)
