"""The confusion matrix as a heatmap: what a classifier (tasks/classify) or a tagger (tasks/tag) mistakes for what."""

from __future__ import annotations

from pathlib import Path
from typing import Any


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
