"""The MLflow pyfunc flavor of a trained tagger: ``mlflow.pyfunc.load_model(uri).predict(texts)`` returns, per text,
its words, their tags and the entity spans (JSON text: a list of {type, start, end, text, ...}).

MLflow imports this module by name (the model's ``loader_module``) and calls ``_load_pyfunc(data_path)``. Nothing is
pickled: the data directory holds ``tag/`` (``config.json``, ``vocab.json``, ``model.safetensors``) and, for a
sub-word tagger (BERT), ``tokenizer/``. The PyTorch
module itself is ``get_raw_model()``.

Input: a string, a list of strings, a dict with ``text``, or a DataFrame (its ``text`` column, else its first).
Output: a DataFrame with ``words`` and ``tags`` (space-separated, one tag per word) and ``spans`` (JSON).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from corpusforge.storage.tracking import pyfunc_texts
from corpusforge.tasks.tag.inference import load_tagger


class TaggerModel:
    """What ``mlflow.pyfunc.load_model`` wraps: the tagger and a ``predict`` that tags."""

    def __init__(self, data_path: str | Path):
        data = Path(data_path)
        self.tagger = load_tagger(data / "tag", tokenizer_dir=data / "tokenizer" if (data / "tokenizer").is_dir() else None)

    def get_raw_model(self):
        """The torch ``nn.Module`` (what ``PyFuncModel.get_raw_model()`` returns)."""
        return self.tagger.model

    def predict(self, model_input: Any, params: dict[str, Any] | None = None):
        import pandas as pd

        if params:
            raise ValueError(f"params: this model takes none, got {sorted(params)}")
        rows = self.tagger.tag(pyfunc_texts(model_input, "text"))
        return pd.DataFrame([{"words": " ".join(r["words"]), "tags": " ".join(r["tags"]),
                              "spans": json.dumps(r["spans"], ensure_ascii=False)} for r in rows])


def _load_pyfunc(data_path: str) -> TaggerModel:
    return TaggerModel(data_path)
