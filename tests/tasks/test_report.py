"""The run report's text parts (the plots and both UIs are covered by tests/flows/test_run_report.py)."""

from __future__ import annotations


def test_a_stage_s_highlights_follow_its_headline_metrics():
    from corpusforge.tasks.report import run_report

    summary = {"pipeline": "p", "store": "/s", "steps": [], "corpus": {},
               "stages": {"embeddings": {"name": "e", "id": "f" * 64, "metrics": {"vocab_size": 4514}}},
               "highlights": {"embeddings": ["he - king + queen \u2192 she, grace", "a | b \u2192 c"]}}
    report = run_report(summary)
    md = report["markdown"]
    assert "| vocab_size | 4,514 |" in md
    after = md[md.index("| vocab_size | 4,514 |"):]
    assert "| answers |" in after and "| he - king + queen \u2192 she, grace |" in after
    assert "| a / b \u2192 c |" in after  # a pipe would break the table
    assert "he - king + queen \u2192 she, grace" in report["html"] and "he - king + queen" in report["note"]


def test_the_page_title_is_plain_text():
    """Issue 50, item 12: the report's <title> (a browser tab's label) held the heading's Markdown backticks."""
    import re

    from corpusforge.tasks.report import run_report

    report = run_report({"pipeline": "demo", "store": "/s", "steps": [], "corpus": {}, "stages": {}})
    (title,) = re.findall(r"<title>(.*?)</title>", report["html"])
    assert title == "corpusforge run report: pipeline demo" and "`demo`" in report["markdown"]
