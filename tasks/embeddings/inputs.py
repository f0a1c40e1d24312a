"""What every embeddings step reads from the corpus artifact."""

from __future__ import annotations

from pathlib import Path

from corpusforge.tasks.step import StepResult


def train_split_path(corpus: StepResult) -> Path:
    path = Path(corpus.path) / "train.parquet"
    if not path.is_file():
        raise FileNotFoundError(f"corpus artifact {corpus.id[:12]} has no train.parquet at {corpus.path}")
    return path
