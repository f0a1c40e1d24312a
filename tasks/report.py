"""Plots and small HTML pages that go into artifacts and MLflow runs."""

from __future__ import annotations

import html
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from corpusforge.tasks.stage import Stage, load


def _plain_log_labels(axis) -> None:
    """Label a log axis 1, 10, 100, 1,000 ... instead of matplotlib's 10^k in mathtext: the labels read like the
    counts printed beside them, and the two corpus plots took ~15% less CPU without mathtext's parser."""
    from matplotlib.ticker import FuncFormatter, NullFormatter

    axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}" if v >= 1 else f"{v:g}"))
    axis.set_minor_formatter(NullFormatter())


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
    _plain_log_labels(ax.xaxis)
    ax.set_xlabel("characters per document (log scale)")
    ax.set_ylabel("documents")
    ax.set_title(title)
    if docs.height:
        ax.legend()
    # fixed margins that fit tick labels up to 7 digits: tight_layout measured every text first (~0.09 CPU-s)
    fig.subplots_adjust(left=0.115, right=0.975, bottom=0.125, top=0.92)
    fig.savefig(path)
    plt.close(fig)
    return path


def write_data_docs_index(out: Path, shards, manifests: list[dict[str, Any]],
                          accounting: dict[str, Any] | None = None) -> Path:
    """``data_docs.html``: one link per shard to the GX Data Docs built inside that shard's artifact.

    ``accounting``: the corpus's (the merge's): each shard's read and kept are its sources' counts there, the records
    the corpus publishes (after the shard's validation quarantine and the deduplication across files), so the page
    and the corpus give the same numbers; without it, the shard's own. Links are relative, so they keep working when
    the store directory is moved or copied whole.
    """
    # ``out`` is the temp dir beside the final one, so relative links computed from it stay valid.
    per_source = (accounting or {}).get("per_source") or {}
    rows = []
    for shard, manifest in zip(shards, manifests):
        docs = manifest.get("data_docs")
        config = manifest["config"]
        names = config.get("sources") or [config["source"]]  # a pack of small files, or one file
        source = html.escape(names[0] if len(names) == 1 else f"{names[0]} and {len(names) - 1} more files")
        acc = manifest["accounting"]
        if per_source and all(name in per_source for name in names):
            acc = {key: sum(per_source[name][key] for name in names) for key in ("records_read", "kept")}
        status = "passed" if manifest.get("validation", {}).get("success", True) else "row failures quarantined"
        if docs:
            rel = os.path.relpath(Path(shard.path) / docs, out)
            link = f'<a href="{html.escape(rel)}">Data Docs</a>'
        else:
            validation = manifest.get("validation", {})
            link = "validation disabled" if validation.get("enabled") is False else "no rows to validate"
        rows.append(
            f"<tr><td>{source}</td><td>{acc['records_read']:,}</td><td>{acc['kept']:,}</td>"
            f"<td>{html.escape(status)}</td><td>{link}</td></tr>"
        )
    if per_source:
        rows.append(f"<tr><th>TOTAL</th><th>{accounting['records_read']:,}</th><th>{accounting['kept']:,}</th>"
                    "<th></th><th></th></tr>")
    page = (
        "<!doctype html><meta charset='utf-8'><title>corpusforge Data Docs</title>"
        "<h1>Great Expectations Data Docs, one site per shard</h1>"
        + ("<p>kept: the records the corpus publishes, after validation's quarantine and deduplication (across files "
           "too); each site shows the rows its shard validated.</p>" if per_source else "")
        + "<table border=1 cellpadding=4><tr><th>source</th><th>read</th><th>kept</th><th>validation</th>"
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
        if max(values) / max(min(values), 1) > 100:
            ax.set_xscale("log")
            _plain_log_labels(ax.xaxis)
        for y, v in enumerate(values):
            ax.text(v, y, f" {v:,}", va="center", fontsize=8)
    else:
        ax.text(0.5, 0.5, "every record was kept", ha="center", va="center", transform=ax.transAxes)
        ax.set_yticks([])
    ax.set_xlabel("records")
    fig.suptitle(title)
    if items:
        fig.tight_layout()  # the reasons' labels vary in length
    else:
        fig.subplots_adjust(left=0.03, right=0.97, bottom=0.25, top=0.8)
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


# ---------------------------------------------------------------- the run report (one page per flow run)

HEADLINE_HINTS = ("ppl", "perplexity", "loss", "accuracy", "exact_match", "_nll", "spearman", "fertility",
                  "bytes_per_token", "docs", "words")
MAX_INLINE_BYTES = 400_000  # a larger image is linked by path, not inlined


def format_number(value: Any) -> str:
    """A metric as people read it: integers with thousands separators, other numbers to 4 significant digits."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    if float(value).is_integer() and abs(value) < 1e15:
        return f"{int(value):,}"
    return f"{value:.4g}"


def headline_metrics(metrics: dict[str, Any], limit: int = 10,
                     hints: tuple[str, ...] = HEADLINE_HINTS) -> list[tuple[str, Any]]:
    """The scalar metrics people look for first (names holding one of ``hints``), then the rest, in order."""
    scalars = [k for k, v in metrics.items() if isinstance(v, (int, float, str, bool))]
    keys = sorted(scalars, key=lambda k: (not any(h in k for h in hints), scalars.index(k)))
    return [(k, metrics[k]) for k in keys[:limit]]


def _plots(summary: dict[str, Any], scratch: Path | None, stages: Sequence[Stage] = ()) -> list[tuple[str, str, Path]]:
    """(step heading, caption, png) for every plot of the run's artifacts, computed or reused: the plots each
    stage declares for its steps, then those a step's ``report_plots`` draws (into ``scratch``)."""
    plots = {step: out.plots for s in stages for step, out in s.steps.items()}
    drawn = {step: out.report_plots for s in stages for step, out in s.steps.items() if out.report_plots}
    found = []
    for s in summary.get("steps") or []:
        where = Path(s["path"])
        for rel, caption in plots.get(s["step"], ()):
            if (where / rel).is_file():
                found.append((f"{s['step']} {s['name']}", caption, where / rel))
        if s["step"] in drawn and scratch is not None:
            for caption, png in load(drawn[s["step"]])(where, scratch / s["id"][:12]):
                found.append((f"{s['step']} {s['name']}", caption, Path(png)))
    return found


def _data_uri(path: Path) -> str | None:
    import base64

    data = path.read_bytes()
    return None if len(data) > MAX_INLINE_BYTES else "data:image/png;base64," + base64.b64encode(data).decode()


def run_report(summary: dict[str, Any], links: dict[str, str] | None = None,
               scratch: Path | None = None, stages: Sequence[Stage] = ()) -> dict[str, str]:
    """One page about one pipeline run, from its summary (corpusforge.plan.pipeline_summary): the steps, the
    record accounting, each stage's headline metrics and the plots (images inlined as data: URIs, so the page
    stands alone in the Prefect UI and in MLflow's sandboxed artifact view).

    Returns ``markdown`` (for the Prefect artifact), ``note`` (the same without images: the MLflow run's
    description) and ``html`` (the MLflow artifact). ``links``: label -> URL (the other UI, the MLflow run).
    ``stages``: the stage declarations, which name each step's plots. ``scratch``: a folder where plots drawn
    for the report go (the attention heatmap); without it, none is
    drawn. Nothing here goes into the store: the page names run-specific things (links, run ids)."""
    links = links or {}
    corpus = summary.get("corpus") or {}
    title = f"corpusforge run report: pipeline `{summary.get('pipeline')}`"
    md: list[str] = [f"# {title}", ""]
    if links:
        md += [" · ".join(f"[{label}]({url})" for label, url in links.items()), ""]
    md += [f"{summary.get('steps_computed', 0)} step(s) computed, {summary.get('steps_reused', 0)} reused from "
           f"the store `{summary.get('store')}`.", "", "## Steps", "",
           "| step | name | artifact id | outcome | seconds |", "|---|---|---|---|---:|"]
    for s in summary.get("steps") or []:
        md.append(f"| {s['step']} | {s['name']} | `{s['id'][:12]}` | {'reused' if s['reused'] else 'computed'} | "
                  f"{s['seconds']:.2f} |")
    acc = corpus.get("accounting")
    if acc:
        md += ["", "## Record accounting", "", "read = kept + quarantined + filtered + deduplicated", "",
               "| source | read | kept | quarantined | filtered | deduplicated |", "|---|---:|---:|---:|---:|---:|"]
        rows = list((acc.get("per_source") or {}).items()) + [("**TOTAL**", acc)]
        for source, c in rows:
            md.append(f"| {source} | {c['records_read']:,} | {c['kept']:,} | "
                      + " | ".join(f"{sum(c[b].values()):,}" for b in ("quarantined", "filtered", "deduplicated"))
                      + " |")
    md += ["", "## Headline metrics", ""]
    outputs = [("corpus", corpus)] + list((summary.get("stages") or {}).items())
    for section, out in outputs:
        metrics = headline_metrics(out.get("metrics") or {})
        if not out or not metrics:
            continue
        md += [f"### {section} `{out.get('name')}` (`{str(out.get('id', ''))[:12]}`)", "", "| metric | value |",
               "|---|---:|"]
        md += [f"| {k} | {format_number(v)} |" for k, v in metrics]
        md.append("")
        lines = (summary.get("highlights") or {}).get(section) or []
        if lines:  # e.g. the embeddings' query answers, declared by the stage (StepOutputs.highlights)
            md += ["| answers |", "|---|", *(f"| {line.replace('|', '/')} |" for line in lines), ""]
    plots = _plots(summary, scratch, stages)
    note = list(md)
    if plots:
        md += ["## Plots", ""]
        note += ["## Plots", "", "In `report.html` (this run's artifacts): "
                 + ", ".join(f"{caption} ({heading})" for heading, caption, _ in plots) + "."]
    for heading, caption, path in plots:
        uri = _data_uri(path)
        md += [f"### {caption}: {heading}", "", f"![{caption}]({uri})" if uri else f"`{path}`", ""]
    markdown = "\n".join(md).rstrip() + "\n"
    # the page's <title> is plain text: the heading's Markdown code marks would show as backticks in a browser tab
    return {"markdown": markdown, "note": "\n".join(note).rstrip() + "\n",
            "html": markdown_to_html(markdown, title.replace("`", ""))}


def markdown_to_html(markdown: str, title: str) -> str:
    """The small Markdown subset run_report writes (headings, pipe tables, images, links, code, bold) as one
    standalone HTML page."""
    import re

    def inline(text: str) -> str:
        out = html.escape(text, quote=False)
        out = re.sub(r"!\[([^\]]*)\]\(([^)\s]+)\)", lambda m: f'<img alt="{m[1]}" src="{m[2]}">', out)
        out = re.sub(r"\[([^\]]+)\]\(([^)\s]+)\)", lambda m: f'<a href="{m[2]}" target="_blank">{m[1]}</a>', out)
        out = re.sub(r"`([^`]+)`", r"<code>\1</code>", out)
        return re.sub(r"\*\*([^*]+)\*\*", r"<b>\1</b>", out)

    body: list[str] = []
    lines = markdown.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("|"):
            rows = []
            while i < len(lines) and lines[i].startswith("|"):
                rows.append([c.strip() for c in lines[i].strip().strip("|").split("|")])
                i += 1
            head, aligns, data = rows[0], rows[1] if len(rows) > 1 else [], rows[2:]
            right = [a.endswith(":") for a in aligns]
            cells = lambda row, tag: "".join(  # noqa: E731
                f"<{tag}{' class=num' if k < len(right) and right[k] else ''}>{inline(c)}</{tag}>" for k, c in enumerate(row))
            body.append("<table><thead><tr>" + cells(head, "th") + "</tr></thead><tbody>"
                        + "".join("<tr>" + cells(r, "td") + "</tr>" for r in data) + "</tbody></table>")
            continue
        heading = re.match(r"(#{1,6}) (.*)", line)
        if heading:
            n = len(heading[1])
            body.append(f"<h{n}>{inline(heading[2])}</h{n}>")
        elif line.strip():
            body.append(f"<p>{inline(line)}</p>")
        i += 1
    style = ("body{font-family:system-ui,sans-serif;margin:24px;color:#222;max-width:1100px}"
             "table{border-collapse:collapse;margin:8px 0 16px}th,td{border:1px solid #ccc;padding:4px 8px}"
             "th{background:#f3f3f3}td.num,th.num{text-align:right}code{background:#f5f5f5;padding:0 3px}"
             "img{max-width:100%;border:1px solid #eee}h1{font-size:1.5em}")
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            f"<style>{style}</style></head><body>" + "\n".join(body) + "</body></html>\n")
