"""The ngram stage: count n-grams in DuckDB and estimate a smoothed n-gram LM (ARPA), with perplexities."""

from corpusforge.tasks.ngram.config import NgramConfig
from corpusforge.tasks.stage import Stage, StepOutputs

STAGE = Stage(
    section="ngram", config=NgramConfig, after="corpus",
    doc="Count n-grams and estimate a smoothed n-gram LM.",
    task="corpusforge.tasks.ngram.build:ngram_task", core="corpusforge.tasks.ngram.build:build_ngram",
    steps={"ngram": StepOutputs(mlflow=("stats.json", "zipf.png", "model.arpa.gz"),
                                plots=(("zipf.png", "Zipf plot (rank vs frequency)"),),
                                loader="corpusforge.tasks.ngram.build:load_ngram_artifact")},
)
