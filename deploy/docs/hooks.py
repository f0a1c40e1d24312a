"""MkDocs hooks for the corpusforge documentation site (deploy/docs/mkdocs.yml, ``hooks:``).

The reference pages are generated at build time, never committed, so they cannot go stale:

- ``reference/cli.md``: every command of the ``corpusforge`` console script (the typer app the entry point in
  pyproject's ``[project.scripts]`` runs, ``corpusforge.cli:app``), walked as its click command tree: usage, the
  command's own help text, and every argument and option with the help record ``--help`` prints.
- ``reference/configuration.md``: every key of a pipeline config, walked from ``PipelineConfig``
  (flows/pipeline_config.py) through each stage's config dataclass (tasks/*/config.py and what they nest:
  storage/readers.py, tasks/corpus/*.py, models/configs.py, each model family's config by ``family``): the dotted
  key, its type, its default, the allowed values and the field's ``doc`` metadata.
- ``benchmarks/results.md``: benchmarks/RESULTS.md as it is in the repository.

A config field without ``doc`` metadata is a warning, which fails ``mkdocs build --strict``.
"""

from __future__ import annotations

import dataclasses
import html
import inspect
import json
import logging
import re
import types
import typing
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

log = logging.getLogger("mkdocs.hooks.corpusforge")

REPO = Path(__file__).resolve().parents[2]
CLI_PAGE = "reference/cli.md"
CONFIG_PAGE = "reference/configuration.md"
RESULTS_PAGE = "benchmarks/results.md"


# --- text helpers ----------------------------------------------------------------------------------------------

def _plain(text: str) -> str:
    """A help or doc string as the reader sees it: rich's escaped brackets (``\\[s3]``, which --help prints as
    ``[s3]``) unescaped, Sphinx roles (``:func:`x` ``) reduced to their text."""
    text = str(text).replace("\\[", "[")
    return re.sub(r":[a-z]+:`([^`]+)`", r"``\1``", text)


def _cell(text: str) -> str:
    """Plain text (a help string, a doc) as one Markdown table cell: HTML-escaped, Markdown's specials escaped,
    on one line."""
    parts = re.split(r"(``.+?``|`[^`]+`)", " ".join(_plain(text).split()))
    out = []
    for i, part in enumerate(parts):
        if i % 2:  # a code span stays one
            out.append(_code(part.strip("`").strip()))
        else:
            out.append(re.sub(r"([\\*_\[\]|#])", r"\\\1", html.escape(part, quote=False)))
    return "".join(out)


def _code(text: str) -> str:
    """Inline code that may hold backticks (a pipe inside a code span does not split a table cell)."""
    text = str(text)
    if not text:
        return ""
    fence = "``" if "`" in text else "`"
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def _anchor(*parts: str) -> str:
    return "-".join(re.sub(r"[^a-z0-9]+", "-", p.lower()).strip("-") for p in parts if p)


# --- the CLI reference -----------------------------------------------------------------------------------------

def _cli_root() -> tuple[Any, Any]:
    """The click command behind the console script and its root context."""
    import typer

    from corpusforge.cli import app

    command = typer.main.get_command(app)
    return command, command.context_class(command, info_name="corpusforge")


def cli_commands() -> list[tuple[Any, Any]]:
    """(command, context) for the root and every command and group under it, depth first, in --help's order;
    hidden ones left out."""
    found: list[tuple[Any, Any]] = []

    def walk(command: Any, ctx: Any) -> None:
        found.append((command, ctx))
        if hasattr(command, "list_commands"):
            for name in command.list_commands(ctx):
                sub = command.get_command(ctx, name)
                if sub is None or getattr(sub, "hidden", False):
                    continue
                walk(sub, sub.context_class(sub, info_name=name, parent=ctx))

    walk(*_cli_root())
    return found


def _help_paragraphs(command: Any) -> str:
    text = inspect.cleandoc(command.help or command.short_help or "")
    text = text.split("\f", 1)[0]  # click's marker: what follows is not help
    paragraphs = [" ".join(p.split()) for p in re.split(r"\n\s*\n", text) if p.strip()]
    return "\n\n".join(_cell(p).replace("\\|", "|") for p in paragraphs)


def cli_reference() -> str:
    lines = ["# Command-line reference", "",
             "Generated from the commands' own `--help` when this site is built (`deploy/docs/hooks.py` walks the "
             "`corpusforge` console script's command tree), so it lists exactly the commands and options of this "
             "version. The [command-line overview](../guide/cli.md) says what each is for; exit codes and the "
             "store's location are there too.", ""]
    for command, ctx in cli_commands():
        path = ctx.command_path
        depth = path.count(" ")
        level = "#" * min(2 + depth, 4) if depth else "##"
        lines += [f"{level} {path} {{#{_anchor(path)}}}", ""]
        usage = " ".join([path, *command.collect_usage_pieces(ctx)])
        lines += ["```text", f"Usage: {usage}", "```", ""]
        about = _help_paragraphs(command)
        if about:
            lines += [about, ""]
        if hasattr(command, "list_commands"):
            subs = [(name, command.get_command(ctx, name)) for name in command.list_commands(ctx)]
            subs = [(n, s) for n, s in subs if s is not None and not getattr(s, "hidden", False)]
            if subs:
                lines += ["| command | what it does |", "|---|---|"]
                for name, sub in subs:
                    summary = sub.get_short_help_str(limit=200) if hasattr(sub, "get_short_help_str") else ""
                    lines.append(f"| [{_code(path + ' ' + name)}](#{_anchor(path + ' ' + name)}) | {_cell(summary)} |")
                lines.append("")
        records = [r for r in (p.get_help_record(ctx) for p in command.get_params(ctx)) if r]
        if records:
            lines += ["| argument or option | help |", "|---|---|"]
            lines += [f"| {_code(name)} | {_cell(text)} |" for name, text in records]
            lines.append("")
    return "\n".join(lines)


# --- the configuration reference -------------------------------------------------------------------------------

def _describe(tp: Any) -> str:
    """A type as a reader of YAML sees it."""
    from corpusforge.tasks.config import _describe as describe

    origin = get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        members = [a for a in get_args(tp) if a is not type(None)]
        text = " or ".join(_describe(a) for a in members)
        return text + (" or null" if len(members) < len(get_args(tp)) else "")
    if origin is Literal:
        kinds = sorted({_describe(type(v)) if v is not None else "null" for v in get_args(tp)})
        return " or ".join(kinds)
    if dataclasses.is_dataclass(tp) or tp is object:
        return "a mapping"
    if tp is bool:
        return "true or false"
    if tp is int:
        return "integer"
    if tp is float:
        return "number"
    if tp is str:
        return "string"
    if origin in (dict, Mapping):
        key, value = get_args(tp) or (Any, Any)
        return f"a mapping of {_describe(key)} to {_describe(value)}" if get_args(tp) else "a mapping"
    if origin in (tuple, list, Sequence):
        args = [a for a in get_args(tp) if a is not Ellipsis]
        return f"a list of {_describe(args[0])}" if args else "a list"
    return describe(tp)


def _allowed(tp: Any) -> list[Any]:
    """The values a Literal (or an optional Literal, or a list of them) allows."""
    origin = get_origin(tp)
    if origin is Literal:
        return list(get_args(tp))
    if origin in (typing.Union, types.UnionType, tuple, list, Sequence):
        out: list[Any] = []
        for arg in get_args(tp):
            out += [v for v in _allowed(arg) if v not in out]
        return out
    return []


def _nested(tp: Any) -> list[type]:
    """The config dataclasses a field's type holds: itself, an optional one, the items of a list of them."""
    if dataclasses.is_dataclass(tp):
        return [tp]
    out: list[type] = []
    if get_origin(tp) in (typing.Union, types.UnionType, tuple, list, Sequence):
        for arg in get_args(tp):
            out += [c for c in _nested(arg) if c not in out]
    if get_origin(tp) in (dict, Mapping) and get_args(tp):
        out += [c for c in _nested(get_args(tp)[1]) if c not in out]
    return out


def _value(value: Any) -> str:
    from corpusforge.tasks.config import to_dict

    if dataclasses.is_dataclass(value):
        return "its keys' defaults"
    return _code(json.dumps(to_dict(value), ensure_ascii=False, default=str))


def _default(f: dataclasses.Field) -> str:
    """A field's default as a table cell (JSON, which YAML reads alike)."""
    if f.default is not dataclasses.MISSING:
        return _value(f.default)
    if f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
        return _value(f.default_factory())  # type: ignore[misc]
    return "required"


def _id_note(f: dataclasses.Field) -> str:
    meta = f.metadata
    if meta.get("identity", True) is False or meta.get("steps", None) == ():
        return " *Not in the artifact id: editing it reuses the artifact.*"
    if callable(meta.get("identity")):
        return " *In the artifact id only where it changes the output.*"
    if "artifact" in meta:
        return " *The artifact it names joins the step's inputs (its id and lineage).*"
    return ""


def config_sections() -> list[tuple[str, type, str]]:
    """(dotted prefix, config dataclass, what picks it) for every mapping a pipeline config can hold, top level
    first, depth first."""
    from corpusforge.pipeline_config import PipelineConfig

    sections: list[tuple[str, type, str]] = []
    seen: set[tuple[str, type]] = set()

    def walk(prefix: str, cls: type, picked_by: str = "") -> None:
        if (prefix, cls) in seen:
            return
        seen.add((prefix, cls))
        sections.append((prefix, cls, picked_by))
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            if not f.init or "derived" in f.metadata:
                continue
            key = f"{prefix}.{f.name}" if prefix else f.name
            variants = f.metadata.get("variants")
            if variants is not None:
                tag, choices = variants
                for name in choices:
                    walk(key, choices[name], f"{prefix + '.' if prefix else ''}{tag}: {name}")
                continue
            if "objective" in f.metadata:  # one table per settings class of the kinds the stage's families take
                for settings, kinds in _objective_kinds(cls, f).items():
                    walk(key, settings, f"{key}.kind: {' or '.join(kinds)}")
                continue
            for nested in _nested(hints[f.name]):
                list_item = get_origin(hints[f.name]) in (tuple, list, Sequence)
                walk(key + ("[]" if list_item else ""), nested)

    walk("", PipelineConfig)
    return sections


def _objective_kinds(cls: type, f: dataclasses.Field, every: bool = False) -> Any:
    """settings class -> the objective kinds (of the families the stage trains) that take it, for kinds with
    settings besides ``kind`` (corpusforge.models.objectives); ``every``: the list of all those kinds."""
    from corpusforge.models.family import families
    from corpusforge.models.objectives import allowed, settings_class, settings_fields

    model_field = f.metadata["objective"][1]
    choices = next(g for g in dataclasses.fields(cls) if g.name == model_field).metadata["variants"][1]
    kinds = list(dict.fromkeys(kind for name in choices for kind in allowed(families()[name])))
    if every:
        return kinds
    out: dict[type, list[str]] = {}
    for kind in kinds:
        if settings_fields(kind):
            out.setdefault(settings_class(kind), []).append(kind)
    return out


def _tag_choices(cls: type) -> dict[str, list[str]]:
    """tag field -> the names it allows, for the tagged unions of ``cls`` (lm.family picks lm.model's class)."""
    out = {}
    for f in dataclasses.fields(cls):
        variants = f.metadata.get("variants")
        if variants is not None:
            out[variants[0]] = list(variants[1])
    return out


def config_keys() -> list[str]:
    """Every dotted key the reference documents (the tests compare it with the dataclasses)."""
    keys = []
    for prefix, cls, _ in config_sections():
        for f in dataclasses.fields(cls):
            if f.init and "derived" not in f.metadata:
                keys.append(f"{prefix}.{f.name}" if prefix else f.name)
    return keys


def config_reference() -> str:
    lines = ["# Configuration reference", "",
             "Generated from the config dataclasses when this site is built (`deploy/docs/hooks.py` walks "
             "`PipelineConfig` and every stage's config), so it lists exactly the keys this version accepts, with "
             "the `doc` each field carries (the same text `--help` and the error messages use). A pipeline is a "
             "YAML file of these keys; override any of them with `--set key=value` "
             "([Pipelines and configuration](../guide/configuration.md)).", "",
             "Keys marked *not in the artifact id* change no output (threads, scratch space, names): editing them "
             "reuses published artifacts. Keys whose model-family table is headed `family: NAME` apply when the "
             "section's `family` is that family.", ""]
    index = [prefix for prefix, _, _ in config_sections() if prefix and "." not in prefix]
    lines += ["Sections: " + ", ".join(f"[`{p}`](#{_anchor(p)})" for p in index) + ".", ""]
    missing_docs = []
    for prefix, cls, picked_by in config_sections():
        title = f"`{prefix}`" if prefix else "The top level"
        heading_id = _anchor(prefix or "top-level", picked_by.split(": ")[-1] if picked_by else "")
        level = "#" * min(2 + prefix.count("."), 4)
        lines += [f"{level} {title}" + (f" (`{picked_by}`)" if picked_by else "") + f" {{#{heading_id}}}", ""]
        doc = inspect.cleandoc(cls.__doc__ or "")
        if doc and not doc.startswith(f"{cls.__name__}("):  # dataclasses' generated signature is no doc
            lines += [html.escape(" ".join(_plain(doc).split()), quote=False), ""]
        lines += [f"<small>`{cls.__module__}.{cls.__qualname__}`</small>", ""]
        hints = typing.get_type_hints(cls)
        tags = _tag_choices(cls)
        rows = []
        for f in dataclasses.fields(cls):
            if not f.init or "derived" in f.metadata:
                continue
            key = f"{prefix}.{f.name}" if prefix else f.name
            doc = str(f.metadata.get("doc", ""))
            if not doc:
                missing_docs.append(f"{key} ({cls.__module__}.{cls.__qualname__})")
            tp = hints[f.name]
            values = tags.get(f.name) or _allowed(tp)  # a tag field allows its union's names
            allowed = ", ".join(_code(v if isinstance(v, str) else json.dumps(v)) for v in values)
            what, link = _describe(tp), ""
            if "artifact" in f.metadata:
                what = "a section of this pipeline, or an artifact id (a unique prefix)"
                allowed = _cell(" or ".join(f"a {step} artifact" for step in f.metadata["artifact"]))
            elif f.metadata.get("variants") is not None:
                what = f"a mapping: the config of the {f.metadata['variants'][0]} (tables below)"
            elif "objective" in f.metadata:
                what = "a mapping keyed by kind (its settings: tables below), or a kind's name"
                allowed = ", ".join(_code(k) for k in _objective_kinds(cls, f, every=True))
            elif f.metadata.get("path"):
                what += " (a path, relative to the config file)"
            elif _nested(tp):
                below = key + ("[]" if get_origin(tp) in (tuple, list, Sequence) else "")
                link = f" ([below](#{_anchor(below)}))"
            rows.append(f"| {_code(key)} | {_cell(what)}{link} | {_default(f)} | {allowed} "
                        f"| {_cell(doc)}{_id_note(f)} |")
        if rows:
            lines += ["| key | type | default | allowed values | description |", "|---|---|---|---|---|", *rows, ""]
    for item in missing_docs:
        log.warning("config field without a doc (metadata={'doc': ...}): %s", item)
    return "\n".join(lines)


# --- mkdocs events ---------------------------------------------------------------------------------------------

def on_files(files: Any, config: Any) -> Any:
    from mkdocs.structure.files import File

    results = (REPO / "benchmarks" / "RESULTS.md").read_text(encoding="utf-8")
    results = ("<small>The file `benchmarks/RESULTS.md` of the repository, as it was when this site was built.</small>"
               "\n\n" + results)
    for uri, content in ((CLI_PAGE, cli_reference()), (CONFIG_PAGE, config_reference()), (RESULTS_PAGE, results)):
        if files.get_file_from_path(uri) is not None:
            log.warning("%s is generated when the site is built; remove the committed copy under docs_dir", uri)
            files.remove(files.get_file_from_path(uri))
        files.append(File.generated(config, uri, content=content))
    return files
