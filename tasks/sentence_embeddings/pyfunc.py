"""The MLflow pyfunc flavor of a trained sentence encoder: ``mlflow.pyfunc.load_model(uri).predict(texts)`` returns
one unit-length vector per text (a list of floats each).

MLflow imports this module by name (the model's ``loader_module``) and calls ``_load_pyfunc(data_path)``. Nothing is
pickled: the data directory holds ``sentence_embeddings/`` (``config.json`` + ``model.safetensors``) and
``tokenizer/``. Input: a string, a list of strings, a dict with ``text``, or a DataFrame (its ``text`` column, else
its first)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from corpusforge.storage.tracking import pyfunc_texts
from corpusforge.tasks.sentence_embeddings.inference import load_embedder


class EncoderModel:
    def __init__(self, data_path: str | Path):
        data = Path(data_path)
        self.embedder = load_embedder(data / "sentence_embeddings", tokenizer_dir=data / "tokenizer")

    def get_raw_model(self):
        return self.embedder.model

    def predict(self, model_input: Any, params: dict[str, Any] | None = None) -> list[list[float]]:
        if params:
            raise ValueError(f"params: this model takes none, got {sorted(params)}")
        return self.embedder.encode(pyfunc_texts(model_input, "text")).tolist()


def _load_pyfunc(data_path: str) -> EncoderModel:
    return EncoderModel(data_path)
