"""Scoring a classifier's predictions: accuracy, macro F1, each class's precision/recall/F1, the confusion matrix,
and its plot. Shared by the classify step, ``Classifier.evaluate`` and ``corpusforge classify evaluate``."""

from __future__ import annotations

from pathlib import Path
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


def plot_confusion(matrix: list[list[int]], classes: list[Any], path: Path, title: str) -> None:
    """The confusion matrix as a heatmap with its counts (rows: true class, columns: predicted)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    data = np.asarray(matrix, dtype=float)
    n = len(classes)
    size = max(3.5, 0.6 * n + 2)
    fig, ax = plt.subplots(figsize=(size + 1, size))
    rows = data.sum(1, keepdims=True)
    image = ax.imshow(np.divide(data, rows, out=np.zeros_like(data), where=rows > 0), cmap="Blues", vmin=0, vmax=1)
    for r in range(n):
        for c in range(n):
            share = data[r, c] / rows[r, 0] if rows[r, 0] else 0.0
            ax.text(c, r, f"{int(data[r, c])}", ha="center", va="center",
                    color="white" if share > 0.5 else "black", fontsize=9)
    names = [str(c) for c in classes]
    ax.set_xticks(range(n), names, rotation=45 if n > 4 else 0)
    ax.set_yticks(range(n), names)
    ax.set_xlabel("predicted")
    ax.set_ylabel("true")
    ax.set_title(title, fontsize=10)
    fig.colorbar(image, ax=ax, label="share of the true class")
    fig.tight_layout()
    fig.savefig(path, dpi=110, metadata={"Software": None})
    plt.close(fig)
