"""The ``corpusforge`` command line: a thin typer layer over flows and corpusforge.storage.catalog.

Heavy libraries (prefect, mlflow, great_expectations, polars) are imported inside the commands that
need them, so ``corpusforge artifacts ...`` answers in a fraction of a second.
Exit codes: 0 success, 1 the work failed (or verify found problems), 2 bad usage or config.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from corpusforge.cli.common import (  # noqa: F401 - re-exported: scripts and tests import them from here
    PRESET_HELP,
    SOURCES_HELP,
    CleanPreset,
    JsonOpt,
    SetOpt,
    StoreOpt,
    _fail,
    _no_space,
    _print_result,
    _run_flow,
    _store,
    _writable_store,
    choices,
    err,
    out,
)

app = typer.Typer(
    name="corpusforge",
    help="Turn raw text corpora into trained NLP artifacts, with content-addressed, reusable steps.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
artifacts_app = typer.Typer(help="Find, show and verify published artifacts (reads manifests only; fast).",
                            no_args_is_help=True)
app.add_typer(artifacts_app, name="artifacts")


def main() -> None:
    app()


@app.command()
def run(
    config: Annotated[Path, typer.Argument(help="Pipeline YAML, e.g. configs/demo.yaml.")],
    set_: SetOpt = None,
    store: StoreOpt = None,
    as_json: JsonOpt = False,
    verify_inputs: Annotated[bool, typer.Option(
        "--verify-inputs", help="Re-hash every file of a published artifact before reusing it (default: sizes and "
                                "recorded file stats; files whose stats changed are re-hashed).")] = False,
) -> None:
    """Run the whole pipeline: every stage present in CONFIG. Finished steps are reused, not recomputed.

    Relative paths inside CONFIG resolve against the config file's directory.
    """
    from corpusforge.tasks.config import ConfigError, apply_overrides, load_yaml

    try:
        data = apply_overrides(load_yaml(config), [*(set_ or []), *(["runner.verify_inputs=true"] if verify_inputs
                                                                     else [])])
    except ConfigError as exc:
        _fail(str(exc), 2)
    store_root = _store(store)
    summary = _run_flow(data, store_root, config.resolve().parent, as_json)
    _print_result(summary, as_json, summary)


@app.command()
def corpus(
    sources: Annotated[list[Path], typer.Argument(help=SOURCES_HELP)],
    name: Annotated[str, typer.Option("--name", help="Name of the corpus artifact.")],
    preset: Annotated[CleanPreset, typer.Option("--preset", help=PRESET_HELP)] = CleanPreset.lm,
    set_: SetOpt = None,
    store: StoreOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Build (or reuse) a corpus artifact from SOURCES: read, clean, dedup, split, validate.

    --set keys address the corpus section (reader.txt_mode=paragraph, split.valid=0.1, validate.max_chars=5000)
    or the pipeline (runner.workers=4, tracking.enabled=false).
    """
    from corpusforge.api import corpus_config
    from corpusforge.tasks.config import ConfigError

    try:
        data = corpus_config([str(s) for s in sources], name, preset.value, set_ or [])
    except ConfigError as exc:
        _fail(str(exc), 2)
    summary = _run_flow(data, _store(store), Path.cwd(), as_json)
    c = summary["corpus"]
    payload = {"id": c["id"], "path": c["path"], "step": c["step"], "name": c["name"], "reused": c["reused"],
               "accounting": c["accounting"], "metrics": c["metrics"], "data_docs": c["data_docs"],
               "shards": [s["id"] for s in summary["steps"] if s["step"] == "corpus_shard"]}
    _print_result(summary, as_json, payload)


@artifacts_app.command("find")
def artifacts_find(
    step: Annotated[Optional[str], typer.Option("--step", help="Only this step, e.g. corpus or corpus_shard.")] = None,
    name: Annotated[Optional[str], typer.Option("--name", help="Only artifacts with this name.")] = None,
    config: Annotated[Optional[list[str]], typer.Option("--config", help="Config filter KEY=VALUE (dotted keys).")] = None,
    input_id: Annotated[Optional[str], typer.Option("--input", help="Only artifacts with this input id (prefix).")] = None,
    latest: Annotated[bool, typer.Option("--latest", help="Only the newest match.")] = False,
    store: StoreOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """List published artifacts, oldest first."""
    from corpusforge.storage.catalog import Catalog
    from corpusforge.storage.store import ArtifactStore
    from corpusforge.tasks.config import ConfigError, parse_override

    wanted = {}
    try:
        for item in config or []:
            parts, value = parse_override(item)
            wanted[".".join(parts)] = value
    except ConfigError as exc:
        _fail(str(exc).replace("--set", "--config"), 2)
    hits = Catalog(ArtifactStore(_store(store))).find(step=step, name=name, config=wanted, input_id=input_id,
                                                      latest=latest)
    if as_json:
        print(json.dumps([h.summary() for h in hits]))
        return
    if not hits:
        err.print(f"no artifacts match in {_store(store)}")
        return
    from rich.table import Table

    table = Table()
    for col in ("id", "step", "name", "created", "path"):
        table.add_column(col, overflow="fold")
    for h in hits:
        s = h.summary()
        table.add_row(s["id"][:12], s["step"], s["name"], (s["created_at"] or "")[:19], s["path"])
    out.print(table)


@artifacts_app.command("show")
def artifacts_show(
    artifact_id: Annotated[str, typer.Argument(metavar="ID", help="Artifact id or a unique prefix (>= 4 hex).")],
    store: StoreOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Print an artifact's manifest: config, lineage tree, files, and what happened to every input record."""
    from corpusforge.storage.catalog import Catalog
    from corpusforge.storage.store import ArtifactStore

    catalog = Catalog(ArtifactStore(_store(store)))
    try:
        found = catalog.get(artifact_id)
    except LookupError as exc:  # an unknown or ambiguous id is bad usage
        _fail(str(exc.args[0]), 2)
    if as_json:
        print(json.dumps(found.manifest, ensure_ascii=False))
        return
    from corpusforge.render import print_manifest

    print_manifest(out, found.manifest, str(found.path), catalog.lineage(found.manifest["id"]))


@artifacts_app.command("verify")
def artifacts_verify(
    artifact_id: Annotated[str, typer.Argument(metavar="ID", help="Artifact id or a unique prefix.")],
    store: StoreOpt = None,
) -> None:
    """Re-hash every file of an artifact and re-derive its id. Exit code 1 if anything changed."""
    from corpusforge.storage.catalog import Catalog
    from corpusforge.storage.store import ArtifactStore

    try:
        report = Catalog(ArtifactStore(_store(store))).verify(artifact_id)
    except LookupError as exc:  # an unknown or ambiguous id is bad usage
        _fail(str(exc.args[0]), 2)
    if report.ok:
        out.print(f"[green]OK[/] {report.id} ({report.files_checked} files verified)")
        return
    for problem in report.problems:
        err.print(f"[red]FAIL[/] {problem}")
    raise typer.Exit(1)


@app.command()
def schedule(
    config: Annotated[Path, typer.Argument(help="Pipeline YAML to run on the schedule.")],
    cron: Annotated[str, typer.Option("--cron", help='Cron expression, e.g. "0 3 * * *" (03:00 daily).')],
    name: Annotated[Optional[str], typer.Option("--name", help="Deployment name (default: the pipeline name).")] = None,
    set_: SetOpt = None,
    store: StoreOpt = None,
) -> None:
    """Register CONFIG as a Prefect deployment on a cron schedule and serve it (Ctrl-C stops serving).

    Needs a running Prefect server (PREFECT_API_URL). Each run re-reads the sources, so only new or
    changed files are recomputed.
    """
    from corpusforge.schedule import serve_schedule

    serve_schedule(config, cron, name, set_ or [], _store(store), fail=_fail, console=err)


@app.command()
def ui(
    store: StoreOpt = None,
    prefect_port: Annotated[int, typer.Option(help="Port for the Prefect UI.")] = 4200,
    mlflow_port: Annotated[int, typer.Option(help="Port for the MLflow UI.")] = 5000,
    host: Annotated[str, typer.Option(help="Bind address; keep 127.0.0.1 unless you know why.")] = "127.0.0.1",
) -> None:
    """Start the Prefect server and the MLflow UI for this store on 127.0.0.1; print their URLs and Data Docs."""
    from corpusforge.ui import serve_uis

    serve_uis(_store(store), host, prefect_port, mlflow_port, fail=_fail, console=err)


def _version_callback(value: bool) -> None:
    if value:
        from importlib.metadata import version

        print(f"corpusforge {version('corpusforge')}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[bool, typer.Option("--version", callback=_version_callback, is_eager=True,
                                          help="Print the version and exit.")] = False,
) -> None:
    """Options that apply to every command."""


# Stage command groups. Imported last because each sub-app uses the helpers defined above
# (their own heavy imports stay inside their commands, so `corpusforge artifacts ...` stays fast).
from corpusforge.cli.embed import app as embed_app  # noqa: E402
from corpusforge.cli.export import export as export_command  # noqa: E402
from corpusforge.cli.lm import app as lm_app  # noqa: E402
from corpusforge.cli.ngram import app as ngram_app  # noqa: E402
from corpusforge.cli.server import app as server_app  # noqa: E402
from corpusforge.cli.tokenizer import app as tokenizer_app  # noqa: E402

app.add_typer(tokenizer_app, name="tokenizer")
app.add_typer(embed_app, name="embed")
app.add_typer(ngram_app, name="ngram")
app.add_typer(lm_app, name="lm")
app.add_typer(server_app, name="server")
app.command("export")(export_command)

if __name__ == "__main__":
    main()
