"""Human-readable output for the CLI (rich tables and trees). Pure formatting, stdlib + rich only."""

from __future__ import annotations

import json
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.tree import Tree

BUCKETS = ("quarantined", "filtered", "deduplicated")


def accounting_table(accounting: dict[str, Any]) -> Table:
    table = Table(title="Record accounting: read = kept + quarantined + filtered + deduplicated", title_justify="left")
    table.add_column("source", overflow="fold")
    for col in ("read", "kept", "quarantined", "filtered", "deduplicated"):
        table.add_column(col, justify="right")
    rows = list(accounting.get("per_source", {}).items()) + [("TOTAL", accounting)]
    for source, c in rows:
        table.add_row(source, f"{c['records_read']:,}", f"{c['kept']:,}", *(f"{sum(c[b].values()):,}" for b in BUCKETS),
                      style="bold" if source == "TOTAL" else None)
    return table


def reasons_table(accounting: dict[str, Any], examples: dict[str, list[str]] | None) -> Table:
    table = Table(title="Why records were not kept", title_justify="left")
    for col in ("bucket", "reason", "count", "examples (source:locator)"):
        table.add_column(col, justify="right" if col == "count" else "left", overflow="fold")
    for bucket in BUCKETS:
        for reason, n in sorted(accounting.get(bucket, {}).items(), key=lambda kv: -kv[1]):
            table.add_row(bucket, reason, f"{n:,}", "\n".join((examples or {}).get(reason, [])[:3]))
    return table


def run_order(steps: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Steps with every step after the steps it reads (a stage lists its main output last, so an lm's sample or
    an embeddings evaluation came before the model it was made from); otherwise in the order given."""
    from pathlib import Path

    from corpusforge.storage.store import read_manifest

    ids = {s["id"] for s in steps}
    needs = {}
    for s in steps:
        manifest = read_manifest(Path(s["path"])) if s.get("path") else None
        needs[s["id"]] = {str(i.get("id")) for i in (manifest or {}).get("inputs", [])} & ids
    out: list[dict[str, Any]] = []
    placed: set[str] = set()
    pending = list(steps)
    while pending:
        ready = next((s for s in pending if needs[s["id"]] <= placed), pending[0])  # a cycle cannot happen
        pending.remove(ready)
        out.append(ready)
        placed.add(ready["id"])
    return out


def steps_table(steps: list[dict[str, Any]]) -> Table:
    table = Table(title="Steps", title_justify="left")
    for col in ("step", "name", "id", "outcome", "seconds"):
        table.add_column(col, justify="right" if col == "seconds" else "left")
    for s in run_order(steps):
        outcome = "[yellow]reused[/]" if s["reused"] else "[green]computed[/]"
        table.add_row(s["step"], s["name"], s["id"][:12], outcome, f"{s['seconds']:.2f}")
    return table


def print_pipeline_summary(console: Console, summary: dict[str, Any]) -> None:
    console.print(steps_table(summary["steps"]))
    corpus = summary.get("corpus") or {}
    if corpus.get("accounting"):
        console.print(accounting_table(corpus["accounting"]))
    metrics = corpus.get("metrics") or {}
    if metrics:
        console.print(
            f"corpus [bold]{corpus['name']}[/] id [bold]{corpus['id'][:12]}[/]: {metrics.get('docs', 0):,} documents "
            f"(train {metrics.get('docs_train', 0):,} / valid {metrics.get('docs_valid', 0):,} / "
            f"test {metrics.get('docs_test', 0):,}), {metrics.get('words', 0):,} words"
        )
    for section, out in (summary.get("stages") or {}).items():
        console.print(f"{section} [bold]{out['name']}[/] id [bold]{out['id'][:12]}[/]: {headline(out.get('metrics') or {})}")
        for line in (summary.get("highlights") or {}).get(section, []):
            console.print(f"  {escape(line)}")
    store = summary["store"]
    console.print("\n[bold]Where to look[/]")
    console.print(f"  artifacts:  {corpus.get('path')}")
    console.print(f"  accounting: corpusforge artifacts show {corpus.get('id', '')[:12]} --store {store}")
    console.print(f"  Data Docs:  {corpus.get('data_docs')}")
    if summary.get("mlflow_run_id"):
        from corpusforge.ui import mlflow_ui_base

        console.print(f"  MLflow:     {summary['tracking_uri']} (run {summary['mlflow_run_id']})")
        if summary.get("mlflow_experiment_id"):
            uri = summary.get("tracking_uri") or ""
            base = mlflow_ui_base(uri, store)  # where the store's `corpusforge ui` serves MLflow (not always :5000)
            query = "?workflowType=machine_learning"  # MLflow 3 opens on GenAI traces otherwise
            console.print(f"  report:     {base}/#/experiments/{summary['mlflow_experiment_id']}/runs/"
                          f"{summary['mlflow_run_id']}{query} (report.html; also the Prefect flow run's "
                          "corpusforge-report artifact)")
            console.print(f"  runs:       {base}/#/experiments/{summary['mlflow_experiment_id']}{query}")
    from corpusforge.stages import STAGES

    described = {s.registers.step: s.registers.what for s in STAGES if s.registers is not None}
    for model in summary.get("registered_models") or []:
        if "error" in model:
            console.print(f"  model:      [yellow]{model['name']} was not registered[/]: {model['error']}")
        else:
            console.print(f"  model:      {model['uri']} (also {model['latest_uri']}), "
                          f"{described.get(model.get('step'), 'a pyfunc')}")
    for model in summary.get("not_registered") or []:
        console.print(f"  model:      {escape(model['name'])} not registered: {escape(model['reason'])}")
    console.print(f"  UIs:        corpusforge ui --store {store}   (Prefect + MLflow on 127.0.0.1)")
    console.print(
        f"  {summary['steps_computed']} step(s) computed, {summary['steps_reused']} reused from the store"
    )
    if summary.get("answered_from_store"):
        console.print("  every step was already published: answered from the store without starting Prefect or "
                      "MLflow (no new flow run or MLflow run)")


HEADLINE_HINTS = ("ppl", "perplexity", "loss", "accuracy", "exact_match", "_nll", "spearman", "fertility",
                  "bytes_per_token")


def headline(metrics: dict[str, Any], limit: int = 8) -> str:
    """The metrics people look for first (perplexity, loss, accuracy ...), then the rest, compactly."""
    from corpusforge.tasks.report import format_number, headline_metrics

    return ", ".join(f"{k}={format_number(v)}" for k, v in headline_metrics(metrics, limit, HEADLINE_HINTS))


def lineage_tree(node: dict[str, Any], tree: Tree | None = None) -> Tree:
    label = (
        f"[bold]{node.get('step')}[/] {node.get('name')} {node['id'][:12]}"
        if node.get("kind") != "source" and "step" in node and node.get("step")
        else f"source {node.get('name')} sha256:{str(node['id'])[:12]}"
    )
    if node.get("missing"):
        label += " [red](missing from store)[/]"
    branch = tree.add(label) if tree is not None else Tree(label)
    for child in node.get("inputs", []):
        lineage_tree(child, branch)
    return branch


def print_manifest(console: Console, manifest: dict[str, Any], path: str, lineage: dict[str, Any]) -> None:
    console.print(f"[bold]{manifest['step']}[/] [bold]{manifest['name']}[/]  id {manifest['id']}")
    console.print(f"  path:     {path}")
    console.print(f"  version:  {manifest.get('version')}   created {manifest.get('created_at')}   "
                  f"computed in {manifest.get('timings', {}).get('seconds', 0):.2f}s   git {manifest.get('git_commit')}")
    files = manifest.get("files", {})
    size = sum(f.get("size", 0) for f in files.values())
    console.print(f"  files:    {len(files)} ({size:,} bytes)")
    if manifest.get("data_docs"):
        console.print(f"  Data Docs: {path}/{manifest['data_docs']}")
    console.print("  config:   " + json.dumps(manifest.get("config", {}), sort_keys=True))
    if manifest.get("metrics"):
        console.print("  metrics:  " + json.dumps(manifest["metrics"], sort_keys=True))
    console.print(lineage_tree(lineage))
    if manifest.get("accounting"):
        console.print(accounting_table(manifest["accounting"]))
        console.print(reasons_table(manifest["accounting"], manifest.get("drop_examples")))
        if "quarantine.parquet" in files:
            console.print(f"  every dropped record, with source, locator, reason and detail: "
                          f"{path}/quarantine.parquet and {path}/dropped.parquet")
