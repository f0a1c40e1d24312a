"""The tokenizer stage: train a tokenizer on the corpus's train split, then encode the corpus with it."""

from corpusforge.tasks.stage import Stage, StepOutputs
from corpusforge.tasks.tokenizer.config import TokenizerConfig

STAGE = Stage(
    section="tokenizer", config=TokenizerConfig, after="corpus",
    doc="Train a tokenizer (and encode the corpus).",
    task="corpusforge.tasks.tokenizer.train:tokenizer_task", core="corpusforge.tasks.tokenizer.train:run_tokenizer_stage",
    steps={"tokenizer": StepOutputs(mlflow=("tokenizer.json", "tokenizer_config.json", "tokenizer_meta.json",
                                            "metrics.json", "trace.txt", "trace.json"),
                                     loader="corpusforge.tasks.tokenizer.load:load_tokenizer_artifact")},
)
