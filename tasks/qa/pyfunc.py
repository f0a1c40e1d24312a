"""The MLflow pyfunc flavor of a trained reader: ``mlflow.pyfunc.load_model(uri).predict(frame)`` answers each row's
``question`` from its ``context`` (the passage it is read from; retrieval is the caller's: `qa ask` does both).

MLflow imports this module by name (the model's ``loader_module``) and calls ``_load_pyfunc(data_path)``. Nothing is
pickled: the data directory holds ``qa/`` (``config.json``, ``model.safetensors``) and ``tokenizer/``. The PyTorch
module itself is ``get_raw_model()``.

Input: a DataFrame (or a dict, or a list of dicts) with ``question`` and ``context`` columns.
Output: a DataFrame with ``answer``, ``score`` (start + end logit), ``start`` and ``end`` (characters in the passage)
and ``passage`` (0: the passage; called directly with a list of passages per row, the index of the one it came from).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from corpusforge.tasks.qa.inference import load_reader


class ReaderModel:
    """What ``mlflow.pyfunc.load_model`` wraps: the reader and a ``predict`` that answers."""

    def __init__(self, data_path: str | Path):
        data = Path(data_path)
        self.reader = load_reader(data / "qa", tokenizer_dir=data / "tokenizer")

    def get_raw_model(self):
        """The torch ``nn.Module`` (what ``PyFuncModel.get_raw_model()`` returns)."""
        return self.reader.model

    def predict(self, model_input: Any, params: dict[str, Any] | None = None):
        import pandas as pd

        if params:
            raise ValueError(f"params: this model takes none, got {sorted(params)}")
        frame = pd.DataFrame([model_input] if isinstance(model_input, dict) else model_input)
        missing = [c for c in ("question", "context") if c not in frame.columns]
        if missing:
            raise ValueError(f"input: needs the columns question and context (missing {', '.join(missing)})")
        questions = [str(q) for q in frame["question"]]
        passages = [[str(x) for x in c] if isinstance(c, (list, tuple)) else [str(c)] for c in frame["context"]]
        rows = self.reader.answer_batch(questions, passages)
        return pd.DataFrame([{"answer": r["answer"], "score": r["score"], "start": r["start"], "end": r["end"],
                              "passage": r["passage"]} for r in rows])


def _load_pyfunc(data_path: str) -> ReaderModel:
    return ReaderModel(data_path)
