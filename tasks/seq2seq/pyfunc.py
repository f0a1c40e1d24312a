"""The MLflow pyfunc flavor of a trained encoder-decoder: ``mlflow.pyfunc.load_model(uri).predict(texts, params)``
translates.

MLflow imports this module by name (the model's ``loader_module``) and calls ``_load_pyfunc(data_path)``. Nothing is
pickled: the data directory holds ``seq2seq/`` (``config.json`` + ``model.safetensors``) and ``tokenizer/`` (the
tokenizer artifact's files). The PyTorch module itself is ``get_raw_model()``.

Input: a string, a list of strings, a dict with ``text``, or a DataFrame (its ``text`` column, else its first).
Output: one translation per text (a summarization model's summary: a document's sentences one per line, as it was
trained). Params (all optional): see ``DEFAULT_PARAMS``; ``direction`` "" is the model's first (headline) direction,
else ``forward``/``backward`` or ``<from>-<to>`` with the corpus's field names; ``min_len`` and
``no_repeat_ngram_size`` as seq2seq.decode's (0: off).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from corpusforge.storage.tracking import pyfunc_texts
from corpusforge.tasks.seq2seq.inference import DEFAULT_BEAM, DEFAULT_LENGTH_PENALTY, DEFAULT_MAX_LEN, load_translator

# MLflow params need concrete values (their types come from these defaults)
DEFAULT_PARAMS: dict[str, Any] = {"beam": DEFAULT_BEAM, "length_penalty": DEFAULT_LENGTH_PENALTY,
                                  "max_len": DEFAULT_MAX_LEN, "direction": "", "min_len": 0, "no_repeat_ngram_size": 0}


class Seq2SeqTranslator:
    """What ``mlflow.pyfunc.load_model`` wraps: the translator and a ``predict`` that translates."""

    def __init__(self, data_path: str | Path):
        data = Path(data_path)
        self.translator = load_translator(data / "seq2seq", tokenizer_dir=data / "tokenizer")

    def get_raw_model(self):
        """The torch ``nn.Module`` (what ``PyFuncModel.get_raw_model()`` returns)."""
        return self.translator.model

    def predict(self, model_input: Any, params: dict[str, Any] | None = None) -> list[str]:
        unknown = set(params or {}) - set(DEFAULT_PARAMS)
        if unknown:
            raise ValueError(f"params: unknown {sorted(unknown)}; allowed: {', '.join(DEFAULT_PARAMS)}")
        p = {**DEFAULT_PARAMS, **(params or {})}
        return self.translator.translate(pyfunc_texts(model_input, 'text'), beam=int(p["beam"]),
                                         length_penalty=float(p["length_penalty"]), max_len=int(p["max_len"]),
                                         direction=str(p["direction"]) or None, min_len=int(p["min_len"]),
                                         no_repeat_ngram_size=int(p["no_repeat_ngram_size"]))


def _load_pyfunc(data_path: str) -> Seq2SeqTranslator:
    return Seq2SeqTranslator(data_path)
