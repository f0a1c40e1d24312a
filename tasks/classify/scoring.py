"""Scoring a classifier's predictions: accuracy, macro F1, each class's precision/recall/F1, the confusion matrix
(its plot: corpusforge.tasks.confusion). Shared by the classify step, ``Classifier.evaluate`` and ``corpusforge classify evaluate``."""

from __future__ import annotations

from typing import Any


def class_index(classes: list[Any], values: list[Any], split: str) -> list[int]:
    """Each label's class index; a label the classes lack is a one-line error naming it."""
    index = {c: i for i, c in enumerate(classes)}
    unknown = sorted({str(v) for v in values if v not in index})
    if unknown:
        raise ValueError(f"the {split} split has labels the classifier does not know ({', '.join(unknown[:5])}); "
                         f"its classes: {', '.join(map(str, classes))}")
    return [index[v] for v in values]


def scores(targets: list[int], predictions: list[int], classes: list[Any]) -> dict[str, Any]:
    """Accuracy, macro F1 (the mean of the classes' F1), each class's precision, recall, F1 and support, and the
    confusion matrix (rows: the true class, columns: the predicted one), as scikit-learn defines them (a class
    never predicted has precision 0)."""
    n = len(classes)
    matrix = [[0] * n for _ in range(n)]
    for t, p in zip(targets, predictions):
        matrix[t][p] += 1
    per_class = {}
    for i, c in enumerate(classes):
        tp = matrix[i][i]
        predicted = sum(matrix[r][i] for r in range(n))
        actual = sum(matrix[i])
        precision = tp / predicted if predicted else 0.0
        recall = tp / actual if actual else 0.0
        f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
        per_class[str(c)] = {"precision": precision, "recall": recall, "f1": f1, "support": actual}
    total = len(targets)
    return {"records": total, "accuracy": sum(matrix[i][i] for i in range(n)) / total if total else 0.0,
            "f1": sum(v["f1"] for v in per_class.values()) / n, "per_class": per_class, "confusion_matrix": matrix}
