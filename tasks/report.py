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


def plot_reasons(accounting: dict[str, Any], path: Path, title: str) -> Path:
    """Horizontal bar chart of why records were not kept (one bar per bucket:reason)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    items = [(f"{bucket}: {reason}", n) for bucket in ("quarantined", "filtered", "deduplicated")
             for reason, n in accounting.get(bucket, {}).items()]
    items.sort(key=lambda kv: kv[1])
    fig, ax = plt.subplots(figsize=(9, max(2.0, 0.35 * len(items) + 1)), dpi=100)
    if items:
        labels, values = zip(*items)
        colors = ["#c0392b" if lab.startswith("quarantined") else "#e67e22" if lab.startswith("filtered")
                  else "#2980b9" for lab in labels]
        ax.barh(labels, values, color=colors)
        ax.set_xscale("log" if max(values) / max(min(values), 1) > 100 else "linear")
        for y, v in enumerate(values):
            ax.text(v, y, f" {v:,}", va="center", fontsize=8)
    else:
        ax.text(0.5, 0.5, "every record was kept", ha="center", va="center", transform=ax.transAxes)
        ax.set_yticks([])
    ax.set_xlabel("records")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def write_corpus_report(out: Path, name: str, accounting: dict[str, Any], metrics: dict[str, Any],
                        examples: dict[str, list[str]]) -> Path:
    """``report.md``: headline numbers, the accounting per source, reasons with examples, and the plots."""
    lines = [f"# Corpus `{name}`", "",
             f"{metrics.get('docs', 0):,} documents kept of {accounting['records_read']:,} records read "
             f"(train {metrics.get('docs_train', 0):,} / valid {metrics.get('docs_valid', 0):,} / "
             f"test {metrics.get('docs_test', 0):,}); {metrics.get('words', 0):,} words, "
             f"{metrics.get('chars', 0):,} characters.", "",
             "![document lengths](doc_lengths.png)", "", "![reasons](reasons.png)", "",
             "## Sources (largest first)", "",
             "| source | read | kept | quarantined | filtered | deduplicated |", "|---|---:|---:|---:|---:|---:|"]
    per = sorted(accounting["per_source"].items(), key=lambda kv: -kv[1]["records_read"])
    for source, c in per[:50]:
        lines.append(f"| {source} | {c['records_read']:,} | {c['kept']:,} | "
                     + " | ".join(f"{sum(c[b].values()):,}" for b in ("quarantined", "filtered", "deduplicated")) + " |")
    if len(per) > 50:
        lines.append(f"| ... {len(per) - 50} more sources | | | | | |")
    lines += ["", "## Why records were not kept", "", "| bucket | reason | count | examples |", "|---|---|---:|---|"]
    for bucket in ("quarantined", "filtered", "deduplicated"):
        for reason, n in sorted(accounting[bucket].items(), key=lambda kv: -kv[1]):
            where = ", ".join(f"`{e}`" for e in examples.get(reason, [])[:3])
            lines.append(f"| {bucket} | {reason} | {n:,} | {where} |")
    lines += ["", "Every dropped record, with its source, locator, reason and detail, is in "
              "`quarantine.parquet` and `dropped.parquet`; GX Data Docs per shard: `data_docs.html`."]
    path = out / "report.md"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path
