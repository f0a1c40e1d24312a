"""The MLflow pyfunc flavor of a trained classifier: ``mlflow.pyfunc.load_model(uri).predict(texts)`` returns, per
text, its label and the probability of every class.

MLflow imports this module by name (the model's ``loader_module``) and calls ``_load_pyfunc(data_path)``. Nothing is
pickled: the data directory holds ``classify/`` (``config.json`` + ``model.safetensors``) and ``tokenizer/`` (the
tokenizer artifact's files). The PyTorch module itself is ``get_raw_model()``.

Input: a string, a list of strings, a dict with ``text``, or a DataFrame (its ``text`` column, else its first).
Output: a DataFrame with ``label`` and one ``p_<class>`` column per class.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from corpusforge.storage.tracking import pyfunc_texts
from corpusforge.tasks.classify.inference import load_classifier


class ClassifierModel:
    """What ``mlflow.pyfunc.load_model`` wraps: the classifier and a ``predict`` that labels."""

    def __init__(self, data_path: str | Path):
        data = Path(data_path)
        self.classifier = load_classifier(data / "classify", tokenizer_dir=data / "tokenizer")

    def get_raw_model(self):
        """The torch ``nn.Module`` (what ``PyFuncModel.get_raw_model()`` returns)."""
        return self.classifier.model

    def predict(self, model_input: Any, params: dict[str, Any] | None = None):
        import pandas as pd

        if params:
            raise ValueError(f"params: this model takes none, got {sorted(params)}")
        rows = self.classifier.predict(pyfunc_texts(model_input, "text"))
        return pd.DataFrame([{"label": r["label"], **{f"p_{c}": p for c, p in r["probabilities"].items()}}
                             for r in rows])


def _load_pyfunc(data_path: str) -> ClassifierModel:
    return ClassifierModel(data_path)
