"""What every ``corpusforge`` command module shares: the consoles, the common options (``--store``, ``--set``,
``--json``), help texts, one-line failures, store checks and running a pipeline config (through the store's
local server, or answered from the store). A leaf: it imports no command module, so ``corpusforge.cli`` and
each ``corpusforge.cli_*`` import it without an import circle.
"""

from __future__ import annotations

import json
import math
import numbers
import os
import sys
from collections.abc import Mapping
from enum import Enum
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.console import Console

from corpusforge.door import CLI_DEFAULTS
from corpusforge.tasks.corpus.clean import PRESETS as CLEAN_PRESETS

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


def _console(stderr: bool = False) -> Console:
    """On a terminal, Rich's usual layout; piped or redirected, no wrapping at 80 columns (a printed command
    or path stays on one line for the script or file that reads it), tables as wide as they need."""
    console = Console(stderr=stderr)
    if console.is_terminal or os.environ.get("COLUMNS"):
        return console
    return Console(stderr=stderr, soft_wrap=True, width=240)


out = _console()
err = _console(stderr=True)

StoreOpt = Annotated[  # a str: Path would fold s3://bucket into s3:/bucket
    Optional[str],
    typer.Option("--store", metavar="PATH|URL",  # "\\[s3]": help is rich markup, where [s3] is a tag (dropped)
                 help="Artifact store: a directory, or s3://bucket/prefix (docs: Operations, 'Object storage'; needs "
                      "corpusforge\\[s3]). Default: $CORPUSFORGE_STORE, else ./.corpusforge"),
]
SetOpt = Annotated[
    Optional[list[str]],
    typer.Option("--set", help="Override a config key, e.g. --set corpus.split.valid=0.1 (repeatable)."),
]
ProcessesOpt = Annotated[Optional[str], typer.Option("--processes", metavar="N|auto", help=(
    "Train on N processes (data parallel with torch.distributed: one per GPU, gloo on CPU; started by torch's "
    "elastic launch, or by Ray Train under runner.kind=ray); auto: one per visible GPU. Sets train.processes; "
    "train.grad_accum must be a multiple of N (the step is split over the processes, so the model and its id are "
    "the same for any N)."))]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON as the last stdout line (strict: a "
                                                      "NaN or infinite number is null, and a 'notes' entry says so).")]

def with_processes(overrides: Optional[list[str]], processes: Optional[str]) -> list[str]:
    """The --set overrides with ``--processes`` as the stage's ``train.processes`` (a number, or auto)."""
    if processes is None:
        return list(overrides or [])
    value = processes.strip().lower()
    if value != "auto" and not (value.isdigit() and int(value) >= 1):
        _fail(f"--processes: a number >= 1 or auto, got {processes!r}", 2)
    return [*(overrides or []), f"train.processes={value}"]


# What the readers take today (storage/formats.py; docs: User guide, "Corpus"), for every command that reads sources.
SOURCES_HELP = ("Files or directories (read recursively, in sorted order): .txt/.md, .jsonl, .json, .csv/.tsv, "
                ".parquet, each optionally compressed as .gz, .bz2, .xz or .zst.")


def choices(name: str, values: tuple[str, ...]) -> type[Enum]:
    """An Enum whose values are exactly ``values``: typer then accepts only them and ``--help`` lists them."""
    return Enum(name, [(v, v) for v in values], type=str)


CleanPreset = choices("CleanPreset", CLEAN_PRESETS)
PRESET_HELP = ("Cleaning preset: lm (NFC, whitespace; keeps case and punctuation), raw (text unchanged), classic "
               "(NFKC, strips HTML/emails/URLs/emoji, lowercase, no punctuation or stop words; for BoW/TF-IDF), "
               "social (mentions, hashtags, elongation, emoji -> :name:, lowercase).")




def _fail(message: str, code: int) -> None:
    from rich.markup import escape

    err.print(f"[bold red]error:[/] {escape(message)}", highlight=False)  # 'corpusforge[hf]' is no markup tag
    raise typer.Exit(code)


def _files_exist(*given: Path | tuple[Path, ...] | None) -> None:
    """Each given file (a path, a pair of paths, or None: not given) must be a file: else one line and exit 2,
    before any work (the train commands' data files, --valid and --test)."""
    for item in given:
        for path in item if isinstance(item, tuple) else (item,):
            if path is not None and not Path(path).is_file():
                _fail(f"{path}: {'a directory, not a file' if Path(path).is_dir() else 'no such file'}", 2)


def _store(store: Optional[str | Path]) -> Path:
    """The store's root directory (an object store's: its local cache, after checking the bucket answers)."""
    from corpusforge.storage.store import StoreError, resolve_store_root

    if store is not None and not str(store).strip():
        _fail("--store is empty: give the store's directory or URL (or leave the flag out for $CORPUSFORGE_STORE, "
              "else ./.corpusforge)", 2)
    try:
        root = resolve_store_root(store)
    except StoreError as exc:
        _fail(str(exc), 2)
    if root.exists() and not root.is_dir():
        _fail(f"the store {root} is a file, not a directory (--store or $CORPUSFORGE_STORE)", 2)
    from corpusforge.storage.object_store import REMOTE_MARKER, ObjectArtifactStore

    if (root / REMOTE_MARKER).is_file():
        try:
            ObjectArtifactStore(root).check_reachable()
        except StoreError as exc:
            _fail(str(exc), 2)
    return root


def _find_step_artifact(artifact_id: str, store: Optional[str | Path], step: str, what: str):
    """The published artifact of ``step`` with this id (or unique prefix), as the catalog finds it; an unknown or
    ambiguous id, or an artifact of another step, is one line and exit 2 (``what`` names what was wanted)."""
    from corpusforge.storage.catalog import Catalog
    from corpusforge.storage.store import ArtifactStore

    try:
        found = Catalog(ArtifactStore(_store(store))).get(artifact_id)
    except LookupError as exc:
        _fail(str(exc.args[0]), 2)
    if found.manifest.get("step") != step:
        _fail(f"{artifact_id}: is a {found.manifest.get('step')!r} artifact, not {what}", 2)
    return _intact(found)


def _reading(root: Path) -> None:
    """Hold the store's lock shared until this command ends (issue 44, item 11): `artifacts gc --apply` (which
    takes it alone) waits or stops while a command reads an artifact, instead of removing it under the reader.
    Released when the command's click context closes (in this process, or when the process ends)."""
    import click
    import contextlib

    from corpusforge.storage.locks import store_in_use

    ctx = click.get_current_context(silent=True)
    if ctx is None:
        return
    stack = contextlib.ExitStack()
    stack.enter_context(store_in_use(root))
    ctx.find_root().call_on_close(stack.close)


def _intact(found):
    """``found`` (a catalog entry) after checking its files against their recorded digests, and those of the
    tokenizer artifact its config.json reads (issue 44, item 9: every command that reads a model checks it, as the
    Python API's ``Artifact.load`` does). A mismatch is one line naming the file, exit 1."""
    from corpusforge.storage.store import MANIFEST, ArtifactStore, TamperedArtifact

    _reading(found.path.parents[1])
    artifact_store = ArtifactStore(found.path.parents[1])
    try:
        artifact_store.check_intact(found.path, found.manifest)
        config = found.path / "config.json"
        if "config.json" in (found.manifest.get("files") or {}) and config.is_file():
            spec = json.loads(config.read_text(encoding="utf-8"))
            if isinstance(spec, dict) and isinstance(spec.get("tokenizer"), dict) and spec["tokenizer"].get("path"):
                from corpusforge.tasks.encoded import model_tokenizer_dir

                try:
                    tokenizer_dir = model_tokenizer_dir(found.path)
                except ValueError:
                    tokenizer_dir = None  # the loader says what is wrong with the path
                if tokenizer_dir is not None and (tokenizer_dir / MANIFEST).is_file():
                    tok_manifest = json.loads((tokenizer_dir / MANIFEST).read_text(encoding="utf-8"))
                    ArtifactStore(tokenizer_dir.parents[1]).check_intact(tokenizer_dir, tok_manifest)
    except TamperedArtifact as exc:
        _fail(str(exc), 1)
    return found


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
    from corpusforge.settings import configure_environment

    _writable_store(store_root)
    configure_environment(store_root)
    from corpusforge.pipeline_config import pipeline_config_from_dict
    from corpusforge.plan import answer_from_store, plan_pipeline
    from corpusforge.storage.readers import SourceError
    from corpusforge.tasks.config import ConfigError
    from corpusforge.tasks.corpus.validate import DatasetValidationError
    from corpusforge.tasks.training import TrainingDiverged

    try:
        cfg = pipeline_config_from_dict(config)  # fail fast, before any server starts
        if cfg.runner.verify_inputs:  # read by the store before each reuse (threads and worker processes alike)
            os.environ["CORPUSFORGE_VERIFY_INPUTS"] = "1"
        summary = answer_from_store(cfg, store_root, plan_pipeline(cfg, store_root, base_dir))
        if summary is not None:
            return summary
        from corpusforge.server.client import ensure_prefect_api, hand_over

        code = hand_over(store_root, console=err)  # the warm local server runs this command, if it can
        if code is not None:
            raise typer.Exit(code)
        ensure_prefect_api(store_root, console=err)
        from corpusforge.pipeline import run_pipeline
        from corpusforge.settings import quiet_user_errors

        quiet_user_errors()

        return run_pipeline(config, store=store_root, base_dir=base_dir)
    except (ConfigError, SourceError) as exc:
        _fail(str(exc), 2)
    except DatasetValidationError as exc:
        _fail(f"validation stopped the publish: {exc}", 1)
    except TrainingDiverged as exc:  # says which artifact, what is not finite and what to change
        _fail(str(exc), 1)
    except typer.Exit:
        raise
    except (Exception, _panic()) as exc:  # noqa: BLE001 - the flow already logged the traceback
        full = _no_space(exc, store_root)
        if full:
            _fail(f"no space left on device: {full}. The store is intact (nothing half-written is visible); "
                  "free some space and run the command again", 1)
        _fail(f"{type(exc).__name__}: {exc}", 1)
    raise AssertionError("unreachable")


def _panic() -> type[BaseException]:
    """polars' PanicException (a BaseException, from pyo3): a bug or an allocation failure inside polars, which
    must still end in one line, not a traceback."""
    try:
        from polars.exceptions import PanicException

        return PanicException
    except ImportError:  # pragma: no cover - polars is a dependency
        return Exception


def json_line(payload: Any, *, ensure_ascii: bool = True, why: Mapping[str, str] | None = None) -> str:
    """``payload`` as one line of strict JSON (RFC 8259). Python's json writes NaN and Infinity, which strict
    parsers (jq, JavaScript's JSON.parse, Go, serde) reject: a non-finite number becomes null instead, and a note
    says where it was and what it was, in the top-level ``notes`` list (on stderr for a payload that is not an
    object). ``why``: for a top-level key, why its values can be non-finite (added to their notes)."""
    notes: list[str] = []
    clean = _finite_or_null(payload, (), notes, why or {})
    if notes and isinstance(clean, dict):
        given = clean.get("notes")
        clean = {**clean, "notes": [*(given if isinstance(given, list) else [] if given is None else [given]), *notes]}
    elif notes:
        for note in notes:
            err.print(f"note: {note}", highlight=False, markup=False)
    return json.dumps(clean, default=str, allow_nan=False, ensure_ascii=ensure_ascii)


def print_json(payload: Any, *, ensure_ascii: bool = True, why: Mapping[str, str] | None = None) -> None:
    """What ``--json`` prints: :func:`json_line` as the last stdout line."""
    sys.stdout.flush()
    print(json_line(payload, ensure_ascii=ensure_ascii, why=why), flush=True)


def _finite_or_null(value: Any, where: tuple, notes: list[str], why: Mapping[str, str]) -> Any:
    if isinstance(value, Mapping):
        return {k: _finite_or_null(v, (*where, k), notes, why) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite_or_null(v, (*where, i), notes, why) for i, v in enumerate(value)]
    if isinstance(value, numbers.Real) and not isinstance(value, numbers.Integral):
        number = float(value)  # numpy's float32 too (json cannot write it)
        if math.isfinite(number):
            return number
        what = "NaN" if math.isnan(number) else "infinite" if number > 0 else "minus infinite"
        reason = why.get(where[0]) if where else None
        notes.append(f"{_json_path(where)} is {what}{f' ({reason})' if reason else ''}; written as null")
        return None
    return value


def _json_path(where: tuple) -> str:
    """metrics.final_loss, perplexity["v.txt"], top[0].prob: where a value sits in the printed JSON."""
    text = ""
    for key in where:
        if isinstance(key, int):
            text += f"[{key}]"
        elif isinstance(key, str) and key.isidentifier():
            text += f".{key}" if text else key
        else:
            text += f"[{json.dumps(str(key), ensure_ascii=False)}]"
    return text or "the value"


def trained_payload(summary: dict, section: str, preset: str) -> dict:
    """What a one-stage train command (classify, tag, qa train) prints with --json: the stage's artifact (``id``,
    ``path``, ``name``, ``reused``, ``metrics``), the ``preset``, the corpus ``accounting``, the registered model
    (``registered_model``, or null with ``registered_model_reason``) and every step's id (``steps``)."""
    from corpusforge.tasks.track import registered_model_fields

    model = summary["stages"][section]
    steps = {s["step"]: s for s in summary["steps"] if s["step"] != "corpus_shard"}
    return {"id": model["id"], "path": model["path"], "name": model["name"], "reused": model["reused"],
            "metrics": model.get("metrics") or {}, "preset": preset,
            "accounting": (summary.get("corpus") or {}).get("accounting"),
            **registered_model_fields(summary, section),
            "steps": {step: s["id"] for step, s in steps.items()}}


def _print_result(summary: dict, as_json: bool, json_payload: dict, why: Mapping[str, str] | None = None) -> None:
    if as_json:
        print_json(json_payload, why=why)
        return
    from corpusforge.render import print_pipeline_summary

    print_pipeline_summary(out, summary)
