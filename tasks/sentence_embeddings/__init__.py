"""The sentence_embeddings stage: a sentence encoder (Sentence-BERT) trained siamese on pairs of sentences that belong
together, then scored by retrieval (each sentence finds its partner among all of the split's)."""

from corpusforge.tasks.sentence_embeddings.config import SentenceEmbeddingsConfig
from corpusforge.tasks.stage import Registers, Stage, StepOutputs

STAGE = Stage(
    section="sentence_embeddings", config=SentenceEmbeddingsConfig, after="tokenizer", live=True,
    doc="Train a sentence encoder (SBERT) on sentence pairs with in-batch negatives and score it by retrieval.",
    task="corpusforge.tasks.sentence_embeddings.build:sentence_embeddings_task",
    core="corpusforge.tasks.sentence_embeddings.build:build_sentence_embeddings",
    steps={
        "sentence_embeddings": StepOutputs(
            mlflow=("config.json", "metrics.json", "evaluation.json", "loss_curve.png"),
            plots=(("loss_curve.png", "Loss curves"),),
            highlights="corpusforge.tasks.sentence_embeddings.inference:highlights",
            loader="corpusforge.tasks.sentence_embeddings.inference:load_artifact"),
    },
    registers=Registers(step="sentence_embeddings", wants="corpusforge.tasks.sentence_embeddings.register:embeds",
                        register="corpusforge.tasks.sentence_embeddings.register:register_encoder",
                        what="a pyfunc that returns sentence vectors"),
    adjust_upstream="corpusforge.tasks.sentence_embeddings.config:tokenizer_for",
    needs_split=("valid",),
    needs_split_hint="set corpus.split.valid=0.1, or pin a file to it with corpus.split.by_source",
)
