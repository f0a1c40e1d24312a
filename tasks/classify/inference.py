"""A trained classifier as something that predicts: :class:`Classifier` (what ``Artifact.load()`` returns for a
classify artifact, what the registered MLflow pyfunc wraps, and what ``corpusforge classify predict/evaluate`` call).

A trained model's folder holds ``config.json`` (family and model config, as corpusforge.models.zoo saves it, plus
``tokenizer`` and ``classify``: the classes, in the order of the model's outputs) and ``model.safetensors``. Texts
are encoded as the training data was (the tokenizer's ids, then the model's own ``prepare``: BERT's [CLS] ... [SEP],
the RNN's cut to max_len)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from corpusforge.models import contracts

def predict_ids(model, sequences: Sequence[Sequence[int]], batch_size: int = 256):
    """Class probabilities (a float tensor per sequence, in order) of prepared id sequences, batched by length."""
    import torch

    from corpusforge.models.batching import pad
    from corpusforge.models.objectives import evaluating

    order = sorted(range(len(sequences)), key=lambda i: len(sequences[i]))
    out: list[Any] = [None] * len(sequences)
    device = next(model.parameters()).device
    with evaluating(model):
        with torch.no_grad():
            for start in range(0, len(order), batch_size):
                chunk = order[start: start + batch_size]
                ids, mask = pad([list(sequences[i]) for i in chunk], model.cfg.pad_id)
                probs = torch.softmax(model(ids.to(device), mask.to(device)).float(), dim=-1).cpu()
                for i, row in zip(chunk, probs):
                    out[i] = row
    return out


class Classifier:
    """A trained classifier and its tokenizer: ``predict(texts)`` gives each text's label and its probabilities."""

    def __init__(self, model, tokenizer, spec: dict[str, Any]):
        self.model, self.tokenizer, self.spec = model, tokenizer, spec
        self.classes = list((spec.get("classify") or {}).get("classes") or range(model.cfg.n_classes))
        self._prepare = contracts.prepare(model)

    def encode(self, texts: Sequence[str]) -> list[list[int]]:
        return [self._prepare(ids) for ids in self.tokenizer.encode_batch([str(t) for t in texts])]

    def probabilities(self, texts: str | Sequence[str], batch_size: int = 256) -> list[dict[str, float]]:
        """Per text, {class: probability} (the classes as strings, in the model's order)."""
        texts = [texts] if isinstance(texts, str) else list(texts)
        rows = predict_ids(self.model, self.encode(texts), batch_size) if texts else []
        return [{str(c): float(p) for c, p in zip(self.classes, row.tolist())} for row in rows]

    def predict(self, texts: str | Sequence[str], batch_size: int = 256) -> list[dict[str, Any]]:
        """Per text, ``{"label": the most probable class, "probabilities": {class: p}}``."""
        out = []
        for probs in self.probabilities(texts, batch_size):
            best = max(range(len(self.classes)), key=lambda i: probs[str(self.classes[i])])
            out.append({"label": self.classes[best], "probabilities": probs})
        return out

    def evaluate(self, texts: Sequence[str], labels: Sequence[Any], batch_size: int = 256) -> dict[str, Any]:
        """Accuracy, macro F1, per-class scores and the confusion matrix on labelled texts (labels as the classes
        are: a label written as a string is matched to an int class by its digits)."""
        from corpusforge.tasks.classify.scoring import class_index, scores

        relabel = (self.spec.get("classify") or {}).get("labels") or {}  # the training's raw label -> class map
        wanted = [_as_class(relabel.get(str(v).strip(), v), self.classes) for v in labels]
        targets = class_index(self.classes, wanted, "given")
        probs = predict_ids(self.model, self.encode(texts), batch_size)
        return scores(targets, [int(p.argmax()) for p in probs], self.classes)


def _as_class(value: Any, classes: Sequence[Any]) -> Any:
    if value in classes:
        return value
    text = str(value).strip()
    for c in classes:
        if str(c) == text:
            return c
    return text


def load_classifier(model_dir: str | Path, tokenizer_dir: str | Path | None = None, device: str = "cpu") -> Classifier:
    """The model saved in ``model_dir`` with its tokenizer (the one its config.json records, store-relative, unless
    ``tokenizer_dir`` is given: the registered MLflow model carries its own copy)."""
    from corpusforge.tasks.corpus.reading import reading_as_trained
    from corpusforge.tasks.encoded import load_with_tokenizer

    return Classifier(*load_with_tokenizer(model_dir, tokenizer_dir, device, reading=reading_as_trained))


def load_artifact(artifact_dir: Path, manifest: dict[str, Any]) -> Classifier:
    """``Artifact.load()`` of a classify artifact (declared as the classify step's loader)."""
    return load_classifier(artifact_dir)


def highlights(model_dir: Path) -> list[str]:
    """What the run's summary shows under the stage: the scored splits' accuracy and F1, each class's F1."""
    data = json.loads((Path(model_dir) / "evaluation.json").read_text(encoding="utf-8"))
    lines = []
    for split, s in data["splits"].items():
        per = ", ".join(f"{c} {v['f1']:.3f}" for c, v in s["per_class"].items())
        lines.append(f"{split} ({s['records']} records): accuracy {s['accuracy']:.4f}, macro F1 {s['f1']:.4f} "
                     f"(F1 per class: {per})")
    return lines
