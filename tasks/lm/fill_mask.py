"""The MLflow pyfunc flavor of a masked encoder lm (the ``bert`` and ``encoder`` families, which fill masks and do
not generate): ``mlflow.pyfunc.load_model(uri).predict(["the film was [MASK] ."])`` says what fills the mask.

MLflow imports this module by name (the registered model's ``loader_module``) and calls ``_load_pyfunc(data_path)``.
Nothing is pickled: the data directory holds ``lm/`` (``config.json`` + ``model.safetensors``) and ``tokenizer/``.

Input: a string, a list of strings, a dict with ``prompt``, or a DataFrame (its ``prompt`` column, else its first).
Each text is encoded with the model's tokenizer, where its mask token (``[MASK]``) becomes the mask id; a text
without one gets one at its end, as ``corpusforge lm inspect`` does. A BERT reads ``[CLS] text [SEP]``.
Output: a DataFrame, one row per text: ``filled`` (the text with every mask replaced by its most likely token),
``tokens`` and ``probabilities`` (the ``top_k`` most likely tokens for the first mask, best first). Special tokens
(the tokenizer's roles: mask, cls, sep, pad, end of text) are never proposed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

DEFAULT_PARAMS: dict[str, Any] = {"top_k": 5}
OUTPUTS = {"filled": "string", "tokens": "string[]", "probabilities": "double[]"}


class MaskFiller:
    """What ``mlflow.pyfunc.load_model`` wraps: the encoder, its tokenizer and a ``predict`` that fills masks."""

    def __init__(self, data_path: str | Path):
        from corpusforge.tasks.corpus.reading import reading_as_trained
        from corpusforge.tasks.encoded import load_with_tokenizer

        data = Path(data_path)
        self.model, self.tokenizer, self.spec = load_with_tokenizer(data / "lm", data / "tokenizer",
                                                                    reading=reading_as_trained)
        self.model.eval()

    def get_raw_model(self):
        """The torch ``nn.Module`` (what ``PyFuncModel.get_raw_model()`` returns)."""
        return self.model

    def predict(self, model_input: Any, params: dict[str, Any] | None = None):
        import pandas as pd

        from corpusforge.storage.tracking import pyfunc_texts

        unknown = set(params or {}) - set(DEFAULT_PARAMS)
        if unknown:
            raise ValueError(f"params: unknown {sorted(unknown)}; allowed: {', '.join(DEFAULT_PARAMS)}")
        top_k = int({**DEFAULT_PARAMS, **(params or {})}["top_k"])
        if top_k < 1:
            raise ValueError(f"params: top_k must be >= 1, got {top_k}")
        rows = [fill_masks(self.model, self.tokenizer, text, top_k) for text in pyfunc_texts(model_input, "prompt")]
        return pd.DataFrame(rows, columns=list(OUTPUTS))


def fill_masks(model, tokenizer, text: str, top_k: int = 5) -> dict[str, Any]:
    """``text``'s masks filled by ``model`` (see the module's doc): ``filled``, ``tokens``, ``probabilities``."""
    import torch

    from corpusforge.tasks.lm.inference import _token_text

    cfg = model.cfg
    mask = cfg.mask_id
    ids = list(tokenizer.encode(text))
    if mask not in ids:
        ids.append(mask)
    wrap = getattr(cfg, "cls_id", None) is not None and getattr(cfg, "sep_id", None) is not None
    limit = cfg.block_size - (2 if wrap else 0)
    if len(ids) > limit:
        raise ValueError(f"text: {len(ids)} tokens with its mask; this model reads at most {limit}")
    seq = [cfg.cls_id, *ids, cfg.sep_id] if wrap else ids
    with torch.no_grad():
        logits, _ = model(torch.tensor([seq], device=next(model.parameters()).device))
    logits = logits[0].float()
    special = [i for i in {*tokenizer.role_ids.values(), mask} if i is not None and i != tokenizer.unk_id]
    logits[:, special] = float("-inf")
    positions = [p for p, i in enumerate(seq) if i == mask]
    probs = torch.softmax(logits[positions], dim=-1)
    best = probs.argmax(-1).tolist()
    top = torch.topk(probs[0], min(top_k, probs.shape[-1]))
    filled = list(ids)
    offset = 1 if wrap else 0
    for p, b in zip(positions, best):
        filled[p - offset] = int(b)
    return {"filled": tokenizer.decode(filled),
            "tokens": [_token_text(tokenizer, int(i)) for i in top.indices],
            "probabilities": [float(v) for v in top.values]}


def _load_pyfunc(data_path: str) -> MaskFiller:
    return MaskFiller(data_path)
