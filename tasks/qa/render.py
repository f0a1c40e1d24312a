"""The qa stage's plot for the run report: exact match and F1 of the reader on each question's own paragraph, of
retrieve-then-read, and of the sliding-window baseline, side by side for each scored set (cross-validated, valid,
test), with BM25's top-1 and top-5 in the title: what a reader of the report compares at a glance."""

from __future__ import annotations

import json
import logging
from pathlib import Path


def report_plots(model_dir: Path, scratch: Path) -> list[tuple[str, Path]]:
    """(caption, png) for the run report; none when the artifact holds no scores (an older one)."""
    try:
        evaluation = json.loads((Path(model_dir) / "evaluation.json").read_text(encoding="utf-8"))
        return [score_bars(evaluation["scores"], Path(scratch) / "qa_scores.png")]
    except Exception as exc:  # noqa: BLE001 - the report goes on without this plot
        logging.getLogger("corpusforge").warning("no QA score plot for the run report: %s", exc)
        return []


def score_bars(scores: dict, png: Path) -> tuple[str, Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = (("sliding-window baseline", "baseline_"), ("reader, gold paragraph", ""),
            ("retrieve then read", "", "_retrieved"))
    sets = list(scores)
    fig, axes = plt.subplots(1, len(sets), figsize=(4.2 * len(sets), 3.6), squeeze=False)
    for ax, name in zip(axes[0], sets):
        s = scores[name]
        width = 0.26
        for n, row in enumerate(rows):
            prefix, suffix = row[1], row[2] if len(row) > 2 else ""
            values = [s.get(f"{prefix}exact_match{suffix}", 0.0), s.get(f"{prefix}f1{suffix}", 0.0)]
            bars = ax.bar([i + (n - 1) * width for i in range(2)], values, width, label=row[0])
            ax.bar_label(bars, fmt="%.1f", fontsize=7)
        ax.set_xticks(range(2), ["exact match", "F1"])
        ax.set_ylim(0, 100)
        title = f"{name}: {s['questions']} questions"
        if "retrieval_top1" in s:
            title += f"\n{s.get('retrieval_mode', 'bm25')} top-1 {s['retrieval_top1']:.2f}, top-5 {s['retrieval_top5']:.2f}"
        ax.set_title(title, fontsize=9)
    axes[0][0].set_ylabel("SQuAD score (0-100)")
    axes[0][-1].legend(fontsize=7)
    fig.tight_layout()
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=110)
    plt.close(fig)
    return "Exact match and F1: the reader on the gold paragraph, retrieve then read, the sliding-window baseline", png
