"""The seq2seq stage: an encoder-decoder (RNN with or without attention, Transformer) trained on encoded pairs,
then its outputs on the held-out splits scored: translations (BLEU, chrF) or, with ``task: summarize``, summaries
(ROUGE beside Lead-1 and the oracle)."""

from corpusforge.tasks.seq2seq.config import Seq2SeqStageConfig
from corpusforge.tasks.stage import Registers, Stage, StepOutputs

STAGE = Stage(
    section="seq2seq", config=Seq2SeqStageConfig, after="tokenizer", live=True,
    doc="Train an encoder-decoder on source/target pairs (translation, summarization) and score its outputs.",
    task="corpusforge.tasks.seq2seq.build:seq2seq_task", core="corpusforge.tasks.seq2seq.build:build_seq2seq",
    steps={
        # the weights go to MLflow once, inside the registered pyfunc model (corpusforge.tasks.seq2seq.register)
        "seq2seq": StepOutputs(mlflow=("config.json", "metrics.json", "loss_curve.png"),
                               plots=(("loss_curve.png", "Loss curves"),),
                               loader="corpusforge.tasks.seq2seq.inference:load_artifact"),
        "seq2seq_eval": StepOutputs(mlflow=("scores.json", "samples.json"),
                                    mlflow_dirs=(("translations", "translations"), ("summaries", "summaries")),
                                    highlights="corpusforge.tasks.seq2seq.report:highlights",
                                    report_plots="corpusforge.tasks.seq2seq.report:report_plots"),
    },
    registers=Registers(step="seq2seq", wants="corpusforge.tasks.seq2seq.register:translates",
                        register="corpusforge.tasks.seq2seq.register:register_seq2seq",
                        what="a pyfunc that translates or summarizes (a denoising pre-training checkpoint is not "
                             "one: seq2seq.init starts from it)"),
    adjust_upstream="corpusforge.tasks.seq2seq.config:tokenizer_for",
    needs_split=("valid", "test"),
    needs_split_hint="give seq2seq train --valid SRC TGT, or set corpus.split.valid=0.1",
)
