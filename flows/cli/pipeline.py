"""`corpusforge run`, `corpusforge corpus`, `corpusforge schedule` and `corpusforge ui`: whole pipelines and the
services around them (registered on the root app by corpusforge.cli)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from corpusforge.cli.common import (
    PRESET_HELP,
    SOURCES_HELP,
    CleanPreset,
    JsonOpt,
    SetOpt,
    StoreOpt,
    _fail,
    _print_result,
    _run_flow,
    _store,
    err,
)


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


def schedule(
    config: Annotated[Path, typer.Argument(help="Pipeline YAML to run on the schedule.")],
    cron: Annotated[str, typer.Option("--cron", help='Cron expression, e.g. "0 3 * * *" (03:00 daily).')],
    name: Annotated[Optional[str], typer.Option("--name", help="Deployment name (default: the pipeline name).")] = None,
    set_: SetOpt = None,
    store: StoreOpt = None,
) -> None:
    """Register CONFIG as a Prefect deployment on a cron schedule and serve it (Ctrl-C stops serving).

    The deployment and its runs live on the store's own Prefect server (its local server, started if needed and
    kept running while this serves), or with PREFECT_API_URL set on that server instead. Each run re-reads the
    sources, so only new or changed files are recomputed.
    """
    from corpusforge.schedule import serve_schedule

    serve_schedule(config, cron, name, set_ or [], _store(store), fail=_fail, console=err)


def ui(
    store: StoreOpt = None,
    prefect_port: Annotated[Optional[int], typer.Option(
        min=1, max=65535, help="Port for the Prefect UI (default: 4200, or a free port when 4200 is taken).")] = None,
    mlflow_port: Annotated[Optional[int], typer.Option(
        min=1, max=65535, help="Port for the MLflow UI; a taken port is an error (default: the port this store's "
                               "MLflow UI had last, else 5000, else a free port).")] = None,
    host: Annotated[str, typer.Option(help="Bind address; keep 127.0.0.1 unless you know why.")] = "127.0.0.1",
) -> None:
    """Start the Prefect server and the MLflow UI for this store on 127.0.0.1; print their URLs and Data Docs."""
    from corpusforge.ui import serve_uis

    serve_uis(_store(store), host, prefect_port, mlflow_port, fail=_fail, console=err)
