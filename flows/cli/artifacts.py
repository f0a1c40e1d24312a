"""`corpusforge artifacts find/show/verify`: look up published artifacts (reads manifests only; fast); `gc`: sweep
what killed writers left."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from corpusforge.cli.common import (
    JsonOpt,
    StoreOpt,
    _fail,
    _store,
    err,
    out,
    print_json,
)

app = typer.Typer(help="Find, show and verify published artifacts (reads manifests only; fast); sweep leftovers.",
                  no_args_is_help=True)


@app.command("find")
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
    from rich.markup import escape

    for h in hits:  # a folder that does not hold the artifact its name says: listed, and said (JSON: "problem")
        if h.problem:
            err.print(f"[yellow]warning:[/] {escape(h.problem)}", highlight=False)
    if as_json:
        print_json([h.summary() for h in hits])
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


@app.command("show")
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
        print_json(found.manifest, ensure_ascii=False)
        return
    from corpusforge.render import print_manifest

    print_manifest(out, found.manifest, str(found.path), catalog.lineage(found.manifest["id"]))


@app.command("verify")
def artifacts_verify(
    artifact_id: Annotated[str, typer.Argument(metavar="ID", help="Artifact id or a unique prefix.")],
    store: StoreOpt = None,
) -> None:
    """Re-hash every file of an artifact, re-derive its id and check its manifest's digest. Exit code 1 if anything
    changed."""
    from corpusforge.storage.catalog import Catalog
    from corpusforge.storage.store import ArtifactStore

    try:
        report = Catalog(ArtifactStore(_store(store))).verify(artifact_id)
    except LookupError as exc:  # an unknown or ambiguous id is bad usage
        _fail(str(exc.args[0]), 2)
    from rich.markup import escape

    for note in report.notes:
        err.print(f"note: {escape(note)}", highlight=False)
    if report.ok:
        out.print(f"[green]OK[/] {report.id} ({report.files_checked} files and the manifest verified)")
        return
    for problem in report.problems:
        err.print(f"[red]FAIL[/] {escape(problem)}", highlight=False)
    raise typer.Exit(1)


@app.command("gc")
def artifacts_gc(
    apply: Annotated[bool, typer.Option("--apply", help="Remove what is listed (without it: a dry run).")] = False,
    older_than: Annotated[Optional[float], typer.Option(
        "--older-than", min=0, metavar="SECONDS",
        help="Object stores: only uploads no manifest names whose newest object is this old "
             "(default $CORPUSFORGE_OBJECT_STORE_STALE_SECONDS, else 3600: a writer elsewhere may be uploading)."),
    ] = None,
    store: StoreOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """List (or with --apply remove) what killed writers left: temp dirs of dead writers, and on an object store
    the uploads no manifest names. Never an artifact."""
    from rich.markup import escape

    from corpusforge.storage.store import ArtifactStore

    root = _store(store)
    artifacts = ArtifactStore(root)
    found = artifacts.sweep_leftovers(apply=apply, max_age=older_than)
    if as_json:
        print_json({"store": artifacts.uri_for_humans, "applied": apply,
                    ("removed" if apply else "would_remove"): [f.to_dict() for f in found]})
        return
    if not found:
        out.print(f"nothing to remove in {escape(artifacts.uri_for_humans)}", highlight=False)
        return
    for item in found:
        out.print(f"{'removed' if apply else 'would remove'} {escape(item.where)} ({item.size / 2**20:.1f} MiB): "
                  f"{escape(item.why)}", highlight=False)
    total = sum(item.size for item in found) / 2**20
    if apply:
        out.print(f"removed {len(found)} leftover(s), {total:.1f} MiB", highlight=False)
    else:
        out.print(f"{len(found)} leftover(s), {total:.1f} MiB: run again with --apply to remove them", highlight=False)
