"""The qa stage's report plot (tasks/qa/render.py): one panel per scored set, drawn from evaluation.json; an
artifact without scores gives no plot (the report goes on)."""

from __future__ import annotations

import json

from corpusforge.tasks.qa.render import report_plots

SCORES = {"questions": 10, "exact_match": 20.0, "f1": 30.0, "baseline_exact_match": 5.0, "baseline_f1": 15.0,
          "retrieval_mode": "bm25", "retrieval_top1": 0.9, "retrieval_top5": 1.0, "exact_match_retrieved": 10.0,
          "f1_retrieved": 25.0}


def test_one_panel_per_scored_set(tmp_path):
    (tmp_path / "evaluation.json").write_text(json.dumps({"scores": {"cross_validated": SCORES, "valid": SCORES}}))
    ((caption, png),) = report_plots(tmp_path, tmp_path / "scratch")
    assert "sliding-window baseline" in caption and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_no_scores_no_plot(tmp_path):
    assert report_plots(tmp_path, tmp_path / "scratch") == []
