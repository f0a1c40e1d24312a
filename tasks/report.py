"""Plots and small HTML pages that go into artifacts and MLflow runs."""

from __future__ import annotations

import html
import os
from pathlib import Path
from typing import Any


def plot_doc_lengths(docs, path: Path, title: str) -> Path:
    """Histogram of document length in characters, one series per split, log-spaced bins."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, ax = plt.subplots(figsize=(7, 4), dpi=100)
    lengths = docs["n_chars"].to_numpy() if docs.height else np.array([1])
    bins = np.logspace(0, np.log10(max(int(lengths.max()), 10)) + 0.05, 40)
    for split in ("train", "valid", "test"):
        values = docs.filter(docs["split"] == split)["n_chars"].to_numpy()
        if values.size:
            ax.hist(values, bins=bins, alpha=0.6, label=f"{split} ({values.size:,} docs)")
    ax.set_xscale("log")
    ax.set_xlabel("characters per document (log scale)")
    ax.set_ylabel("documents")
    ax.set_title(title)
    if docs.height:
        ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def write_data_docs_index(out: Path, shards, manifests: list[dict[str, Any]]) -> Path:
    """``data_docs.html``: one link per shard to the GX Data Docs built inside that shard's artifact.

    Links are relative, so they keep working when the store directory is moved or copied whole.
    """
    # ``out`` is the temp dir beside the final one, so relative links computed from it stay valid.
    rows = []
    for shard, manifest in zip(shards, manifests):
        docs = manifest.get("data_docs")
        source = html.escape(manifest["config"]["source"])
        acc = manifest["accounting"]
        status = "passed" if manifest.get("validation", {}).get("success", True) else "row failures quarantined"
        if docs:
            rel = os.path.relpath(Path(shard.path) / docs, out)
            link = f'<a href="{html.escape(rel)}">Data Docs</a>'
        else:
            validation = manifest.get("validation", {})
            link = "validation disabled" if validation.get("enabled") is False else "no rows to validate"
        rows.append(
            f"<tr><td>{source}</td><td>{acc['records_read']}</td><td>{acc['kept']}</td>"
            f"<td>{html.escape(status)}</td><td>{link}</td></tr>"
        )
    page = (
        "<!doctype html><meta charset='utf-8'><title>corpusforge Data Docs</title>"
        "<h1>Great Expectations Data Docs, one site per shard</h1>"
        "<table border=1 cellpadding=4><tr><th>source</th><th>read</th><th>kept</th><th>validation</th>"
        "<th>docs</th></tr>" + "".join(rows) + "</table>"
    )
    path = out / "data_docs.html"
    path.write_text(page, encoding="utf-8")
    return path
