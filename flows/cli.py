"""The ``corpusforge`` command line: a thin typer layer over flows and storage.catalog.

Heavy libraries (prefect, mlflow, great_expectations, polars) are imported inside the commands that
need them, so ``corpusforge artifacts ...`` answers in a fraction of a second.
Exit codes: 0 success, 1 the work failed (or verify found problems), 2 bad usage or config.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from enum import Enum
from typing import Annotated, Optional

import typer
from rich.console import Console

from flows.entry import CLI_DEFAULTS
from tasks.clean import PRESETS as CLEAN_PRESETS

for _key, _value in CLI_DEFAULTS.items():  # before any command imports torch (see flows/entry.py)
    os.environ.setdefault(_key, _value)


def _tidy_help_labels() -> None:
    """Help output for every command, fixed once where typer makes it.

    typer (0.2x, its bundled click) labels each parameter in ``--help`` with its Python annotation: ``<bool>`` on
    every flag (``--json``, ``--help``), ``<str>``, ``<list[str]>``, ``<int range>``, and ``<str>`` even where
    the values are fixed. Both its label paths (the Rich panel and plain help) go through
    ``_TyperParameter.display_type``; this replaces that one method: flags get no label, choices (Enum or
    Literal annotations) show as ``[a|b|c]``, everything else gets click's classic name (TEXT, INTEGER, FLOAT,
    PATH, FILE, DIRECTORY). A default containing a newline, CR or tab is shown escaped (``\\n``), so it cannot
    break the help layout. Only help text changes: parsing and the values users type stay exactly as before.
    """
    from typer import core
    from typer._param_types import normalize_choice_value

    if getattr(core._TyperParameter.display_type, "_corpusforge", False):
        return
    names = {"str": "TEXT", "int": "INTEGER", "float": "FLOAT", "bool": "BOOLEAN", "UUID": "UUID",
             "datetime": "DATETIME", "path": "PATH", "file": "FILE", "dir": "DIRECTORY"}

    def display_type(self, ctx):
        if getattr(self, "is_flag", False) or getattr(self, "count", False):
            return None
        desc = self.type_descriptor
        if desc.is_choice:
            values = [normalize_choice_value(c, desc.case_sensitive, ctx) for c in desc.choices or ()]
            return "[" + " | ".join(dict.fromkeys(values)) + "]"  # spaced: a narrow column wraps between choices
        if desc.is_path or (desc.is_list and self.bare_type() in ("list[Path]", "list[PosixPath]")):
            return names[desc.path_type]
        bare = self.bare_type()
        element = bare[5:-1] if bare.startswith("list[") else bare
        return names.get(element, element.upper())

    def default_string(obj, **kwargs):
        text = plain_default_string(obj, **kwargs)
        return text.replace("\n", "\\n").replace("\r", "\\r").replace("\t", "\\t")

    display_type._corpusforge = True
    plain_default_string = core._get_default_string
    core._TyperParameter.display_type = display_type
    core._get_default_string = default_string


_tidy_help_labels()

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

def _console(stderr: bool = False) -> Console:
    """On a terminal, Rich's usual layout; piped or redirected, no wrapping at 80 columns (a printed command
    or path stays on one line for the script or file that reads it), tables as wide as they need."""
    console = Console(stderr=stderr)
    if console.is_terminal or os.environ.get("COLUMNS"):
        return console
    return Console(stderr=stderr, soft_wrap=True, width=240)


out = _console()
err = _console(stderr=True)

StoreOpt = Annotated[
    Optional[Path],
    typer.Option("--store", help="Artifact store root. Default: $CORPUSFORGE_STORE, else ./.corpusforge"),
]
SetOpt = Annotated[
    Optional[list[str]],
    typer.Option("--set", help="Override a config key, e.g. --set corpus.split.valid=0.1 (repeatable)."),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON as the last stdout line.")]

# What the readers take today (storage/formats.py; README "The corpus stage"), for every command that reads sources.
SOURCES_HELP = ("Files or directories (read recursively, in sorted order): .txt/.md, .jsonl, .json, .csv/.tsv, "
                ".parquet, each optionally compressed as .gz, .bz2, .xz or .zst.")


def choices(name: str, values: tuple[str, ...]) -> type[Enum]:
    """An Enum whose values are exactly ``values``: typer then accepts only them and ``--help`` lists them."""
    return Enum(name, [(v, v) for v in values], type=str)


CleanPreset = choices("CleanPreset", CLEAN_PRESETS)
PRESET_HELP = ("Cleaning preset: lm (NFC, whitespace; keeps case and punctuation), raw (text unchanged), classic "
               "(NFKC, strips HTML/emails/URLs/emoji, lowercase, no punctuation or stop words; for BoW/TF-IDF), "
               "social (mentions, hashtags, elongation, emoji -> :name:, lowercase).")


def main() -> None:
    app()


def _fail(message: str, code: int) -> None:
    from rich.markup import escape

    err.print(f"[bold red]error:[/] {escape(message)}", highlight=False)  # 'corpusforge[hf]' is no markup tag
    raise typer.Exit(code)


def _store(store: Optional[Path]) -> Path:
    from storage.store import resolve_store_root

    root = resolve_store_root(store)
    if root.exists() and not root.is_dir():
        _fail(f"the store {root} is a file, not a directory (--store or $CORPUSFORGE_STORE)", 2)
    return root


def _writable_store(root: Path) -> None:
    """A command that writes needs a store it can create or write into: say so before any work starts."""
    probe = root
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if not probe.is_dir():
        _fail(f"the store {root} cannot be created: {probe} is a file, not a directory", 2)
    if not os.access(probe, os.W_OK | os.X_OK):
        what = "store" if probe == root else f"store's parent directory {probe}"
        _fail(f"the {what} is not writable by this user, so the store {root} cannot be written", 2)
    import shutil

    need_mb = float(os.environ.get("CORPUSFORGE_MIN_FREE_MB", "100"))
    free_mb = shutil.disk_usage(probe).free / 2**20
    if free_mb < need_mb:
        _fail(f"no space left on device: {probe} has {free_mb:.1f} MiB free; a run needs at least {need_mb:g} MiB "
              "to start (CORPUSFORGE_MIN_FREE_MB). Nothing was written.", 1)


def _no_space(exc: BaseException, store_root: Path) -> str | None:
    """The path a full disk refused, if ``exc`` (or what caused it) is one; None otherwise."""
    import errno

    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, OSError) and exc.errno == errno.ENOSPC:
            return str(exc.filename or store_root)
        if "No space left on device" in str(exc):  # wrapped by a library (polars, DuckDB, pyarrow)
            return str(store_root)
        if "database or disk is full" in str(exc):
            return f"{store_root / 'mlflow.db'} (or the Prefect database)"
        exc = exc.__cause__ or exc.__context__
    return None


def _run_flow(config: dict, store_root: Path, base_dir: Path, as_json: bool) -> dict:
    """Validate the config, answer from the store when every step is published, else run the pipeline flow
    against the store's Prefect API. Known errors become clean exits."""
    from flows.settings import configure_environment

    _writable_store(store_root)
    configure_environment(store_root)
    from flows.pipeline_config import pipeline_config_from_dict
    from flows.plan import answer_from_store, plan_pipeline
    from storage.readers import SourceError
    from tasks.config import ConfigError
    from tasks.validate import DatasetValidationError

    try:
        cfg = pipeline_config_from_dict(config)  # fail fast, before any server starts
        if cfg.runner.verify_inputs:  # read by the store before each reuse (threads and worker processes alike)
            os.environ["CORPUSFORGE_VERIFY_INPUTS"] = "1"
        summary = answer_from_store(cfg, store_root, plan_pipeline(cfg, store_root, base_dir))
        if summary is not None:
            return summary
        from flows.local_server import ensure_prefect_api, hand_over

        code = hand_over(store_root, console=err)  # the warm local server runs this command, if it can
        if code is not None:
            raise typer.Exit(code)
        ensure_prefect_api(store_root, console=err)
        from flows.pipeline import run_pipeline
        from flows.settings import quiet_user_errors

        quiet_user_errors()

        return run_pipeline(config, store=store_root, base_dir=base_dir)
    except (ConfigError, SourceError) as exc:
        _fail(str(exc), 2)
    except DatasetValidationError as exc:
        _fail(f"validation stopped the publish: {exc}", 1)
    except typer.Exit:
        raise
    except Exception as exc:  # noqa: BLE001 - the flow already logged the traceback
        full = _no_space(exc, store_root)
        if full:
            _fail(f"no space left on device: {full}. The store is intact (nothing half-written is visible); "
                  "free some space and run the command again", 1)
        _fail(f"{type(exc).__name__}: {exc}", 1)
    raise AssertionError("unreachable")


def _print_result(summary: dict, as_json: bool, json_payload: dict) -> None:
    if as_json:
        sys.stdout.flush()
        print(json.dumps(json_payload, default=str), flush=True)
        return
    from flows.render import print_pipeline_summary

    print_pipeline_summary(out, summary)


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
    from tasks.config import ConfigError, apply_overrides, load_yaml

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
    from tasks.config import ConfigError, apply_overrides

    pipeline_keys = ("runner.", "tracking.", "name=", "corpus.")
    overrides = [s if s.startswith(pipeline_keys) else f"corpus.{s}" for s in (set_ or [])]
    base = {"name": name, "corpus": {"name": name, "sources": [str(s) for s in sources],
                                     "clean": {"preset": preset.value}}}
    try:
        data = apply_overrides(base, overrides)
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
    from storage.catalog import Catalog
    from storage.store import ArtifactStore
    from tasks.config import ConfigError, parse_override

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
    from storage.catalog import Catalog
    from storage.store import ArtifactStore

    catalog = Catalog(ArtifactStore(_store(store)))
    try:
        found = catalog.get(artifact_id)
    except LookupError as exc:  # an unknown or ambiguous id is bad usage
        _fail(str(exc.args[0]), 2)
    if as_json:
        print(json.dumps(found.manifest, ensure_ascii=False))
        return
    from flows.render import print_manifest

    print_manifest(out, found.manifest, str(found.path), catalog.lineage(found.manifest["id"]))


@artifacts_app.command("verify")
def artifacts_verify(
    artifact_id: Annotated[str, typer.Argument(metavar="ID", help="Artifact id or a unique prefix.")],
    store: StoreOpt = None,
) -> None:
    """Re-hash every file of an artifact and re-derive its id. Exit code 1 if anything changed."""
    from storage.catalog import Catalog
    from storage.store import ArtifactStore

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
    from flows.schedule import serve_schedule

    serve_schedule(config, cron, name, set_ or [], _store(store), fail=_fail, console=err)


@app.command()
def ui(
    store: StoreOpt = None,
    prefect_port: Annotated[int, typer.Option(help="Port for the Prefect UI.")] = 4200,
    mlflow_port: Annotated[int, typer.Option(help="Port for the MLflow UI.")] = 5000,
    host: Annotated[str, typer.Option(help="Bind address; keep 127.0.0.1 unless you know why.")] = "127.0.0.1",
) -> None:
    """Start the Prefect server and the MLflow UI for this store on 127.0.0.1; print their URLs and Data Docs."""
    from flows.ui import serve_uis

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
from flows.cli_embed import app as embed_app  # noqa: E402
from flows.cli_export import export as export_command  # noqa: E402
from flows.cli_lm import app as lm_app  # noqa: E402
from flows.cli_ngram import app as ngram_app  # noqa: E402
from flows.cli_server import app as server_app  # noqa: E402
from flows.cli_tokenizer import app as tokenizer_app  # noqa: E402

app.add_typer(tokenizer_app, name="tokenizer")
app.add_typer(embed_app, name="embed")
app.add_typer(ngram_app, name="ngram")
app.add_typer(lm_app, name="lm")
app.add_typer(server_app, name="server")
app.command("export")(export_command)

if __name__ == "__main__":
    main()
