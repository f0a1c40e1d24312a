"""The MLflow pyfunc flavor of a trained lm: ``mlflow.pyfunc.load_model(uri).predict(prompts, params)`` writes text.

MLflow imports this module by name (the model's ``loader_module``) and calls ``_load_pyfunc(data_path)``.
Nothing is pickled: the data directory holds ``lm/`` (``config.json`` + ``model.safetensors``) and
``tokenizer/`` (the tokenizer artifact's files). The PyTorch module itself is ``get_raw_model()``,
or ``corpusforge.models.zoo.load_model(<model dir>/data/lm)`` from a downloaded copy.

Input: a string, a list of strings, a dict with ``prompt``, or a DataFrame with a ``prompt`` column.
Output: one continuation (without the prompt) per prompt. Params (all optional): see ``DEFAULT_PARAMS``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from corpusforge.storage.tracking import pyfunc_texts
from corpusforge.tasks.lm.config import GENERATE_DEFAULTS
from corpusforge.tasks.lm.inference import generate_text, load_trained

# the defaults of `corpusforge lm generate` (tasks.lm.GENERATE_DEFAULTS); MLflow params need concrete values,
# so top_k 0 and top_p 1.0 stand for "off"
DEFAULT_PARAMS: dict[str, Any] = {"max_new_tokens": GENERATE_DEFAULTS["max_new_tokens"],
                                  "temperature": GENERATE_DEFAULTS["temperature"],
                                  "top_k": GENERATE_DEFAULTS["top_k"] or 0, "top_p": GENERATE_DEFAULTS["top_p"] or 1.0,
                                  "seed": GENERATE_DEFAULTS["seed"], "greedy": False}


class LMTextGenerator:
    """What ``mlflow.pyfunc.load_model`` wraps: the model, its tokenizer and a ``predict`` that samples."""

    def __init__(self, data_path: str | Path):
        data = Path(data_path)
        self.model, self.tokenizer, self.spec = load_trained(data / "lm", tokenizer_dir=data / "tokenizer")

    def get_raw_model(self):
        """The torch ``nn.Module`` (what ``PyFuncModel.get_raw_model()`` returns)."""
        return self.model

    def predict(self, model_input: Any, params: dict[str, Any] | None = None) -> list[str]:
        unknown = set(params or {}) - set(DEFAULT_PARAMS)
        if unknown:
            raise ValueError(f"params: unknown {sorted(unknown)}; allowed: {', '.join(DEFAULT_PARAMS)}")
        p = {**DEFAULT_PARAMS, **(params or {})}
        eot = (self.spec.get("tokenizer") or {}).get("eot_id")
        return [generate_text(self.model, self.tokenizer, prompt, int(p["max_new_tokens"]), greedy=bool(p["greedy"]),
                              temperature=float(p["temperature"]), top_k=int(p["top_k"]) or None,
                              top_p=float(p["top_p"]) if float(p["top_p"]) < 1.0 else None, seed=int(p["seed"]),
                              eot_id=eot)
                for prompt in pyfunc_texts(model_input, 'prompt')]


def _load_pyfunc(data_path: str) -> LMTextGenerator:
    return LMTextGenerator(data_path)
