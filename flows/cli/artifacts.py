"""`corpusforge artifacts find/show/verify`: look up published artifacts (reads manifests only; fast); `du`: what the
store holds; `gc`: remove the artifacts no kept artifact depends on, and what killed writers left."""

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

app = typer.Typer(help="Find, show and verify published artifacts (reads manifests only; fast); du and gc.",
                  no_args_is_help=True)


@app.command("find")
def artifacts_find(
    step: Annotated[Optional[str], typer.Option("--step", help="Only this step, e.g. corpus or corpus_shard.")] = None,
    name: Annotated[Optional[str], typer.Option("--name", help="Only artifacts with this name.")] = None,
    config: Annotated[Optional[list[str]], typer.Option("--config", help=(
        "Config filter KEY=VALUE (dotted keys; repeatable): a key of the artifact's config (split.valid=0.1), "
        "or one with its section first, as --set takes it (corpus.split.valid=0.1: the corpus stage's "
        "artifacts)."))] = None,
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
    from corpusforge.stages import section_steps

    hits = Catalog(ArtifactStore(_store(store))).find(step=step, name=name, config=wanted, input_id=input_id,
                                                      latest=latest, sections=section_steps() if wanted else None)
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
    artifact_ids: Annotated[Optional[list[str]], typer.Argument(
        metavar="ID...", help="Artifact ids or unique prefixes (one or more).", show_default=False)] = None,
    every: Annotated[bool, typer.Option("--all", help="Every artifact in the store (one process for all of them: "
                                                      "a store's whole check, as a cron job or CI runs it).")] = False,
    store: StoreOpt = None,
) -> None:
    """Re-hash every file of an artifact, re-derive its id and check its manifest's digest (and its registered MLflow
    copies). Give one or more ids, or --all. Exit code 1 if anything changed in any of them."""
    from corpusforge.storage.catalog import Catalog
    from corpusforge.storage.store import ArtifactStore

    if bool(artifact_ids) == every:
        _fail("give the artifact ids to verify, or --all for every artifact in the store (not both)", 2)
    catalog = Catalog(ArtifactStore(_store(store)))
    if every:
        artifact_ids = sorted({f.manifest["id"] for f in catalog.all()})
        if not artifact_ids:
            out.print("no artifacts in the store: nothing to verify")
            return
    else:
        for artifact_id in artifact_ids:  # every id is known before anything is hashed: a typo is bad usage
            try:
                catalog.get(artifact_id)
            except LookupError as exc:
                _fail(str(exc.args[0]), 2)
    from rich.markup import escape

    failed = []
    for artifact_id in artifact_ids:
        report = catalog.verify(artifact_id)
        for note in report.notes:
            err.print(f"note: {escape(note)}", highlight=False)
        if report.ok:
            out.print(f"[green]OK[/] {report.id} ({report.files_checked} files and the manifest verified)")
            continue
        failed.append(report.id)
        for problem in report.problems:
            err.print(f"[red]FAIL[/] {escape(problem)}", highlight=False)
    if len(artifact_ids) > 1:
        out.print(f"{len(artifact_ids)} artifacts: {len(artifact_ids) - len(failed)} verified, {len(failed)} failed"
                  + (f" ({', '.join(i[:12] for i in failed)})" if failed else ""))
    if failed:
        raise typer.Exit(1)


def _size(n: int) -> str:
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"


@app.command("du")
def artifacts_du(
    tree: Annotated[bool, typer.Option("--tree", help="Each artifact nothing depends on, with what it depends on "
                                                      "below it (bytes, id, date).")] = False,
    store: StoreOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Bytes per step and name (count, newest), what else the store holds (MLflow, temp dirs), and with --tree
    which artifact depends on which. JSON: every artifact with its bytes, inputs and used_by. Reads manifests
    only."""
    from rich.markup import escape

    import corpusforge as cf

    report = cf.artifacts.du(store=_store(store))
    if as_json:
        print_json(report.to_dict())
        return
    from rich.table import Table

    table = Table(title=f"{escape(report.store)}: {_size(report.total_bytes)} "
                        f"({_size(report.artifact_bytes)} in {len(report.artifacts)} artifacts)")
    for col, justify in (("step", "left"), ("name", "left"), ("count", "right"), ("bytes", "right"),
                         ("newest", "left")):
        table.add_column(col, justify=justify, overflow="fold")
    for g in report.groups():
        table.add_row(escape(g["step"]), escape(g["name"]), str(g["count"]), _size(g["bytes"]),
                      (g["newest"] or "")[:19])
    for o in sorted(report.other, key=lambda o: -o["bytes"]):
        if o["bytes"]:
            table.add_row("[dim]not an artifact[/]", escape(o["where"]), "", _size(o["bytes"]),
                          f"[dim]{escape(o['what'])}[/]")
    out.print(table)
    if tree:
        from rich.tree import Tree

        by_id = {e.id: e for e in report.artifacts}
        shown: set[str] = set()

        def label(e) -> str:
            registered = f" [green]registered: {escape(', '.join(e.registered))}[/]" if e.registered else ""
            return (f"{escape(e.step)} {escape(e.name)} [cyan]{e.id[:12]}[/] {_size(e.bytes)} "
                    f"{(e.created_at or '')[:10]}{registered}")

        def grow(node, e) -> None:
            for aid in dict.fromkeys(e.inputs):
                child = by_id.get(aid)
                if child is None:
                    node.add(f"[dim]{aid[:12]} (not in this store)[/]")
                elif child.id in shown:
                    node.add(f"{label(child)} [dim](listed above)[/]")
                else:
                    shown.add(child.id)
                    grow(node.add(label(child)), child)

        for root in report.roots():
            shown.add(root.id)
            top = Tree(label(root))
            grow(top, root)
            out.print(top)


@app.command("gc")
def artifacts_gc(
    keep_latest: Annotated[Optional[int], typer.Option(
        "--keep-latest", min=1, metavar="N", help="Keep the N newest artifacts of each step and name.")] = None,
    keep_newer_than: Annotated[Optional[str], typer.Option(
        "--keep-newer-than", metavar="AGE",
        help="Keep every artifact newer than AGE (7d, 12h, 30m, 45s, 2w, or seconds); older ones no kept artifact "
             "depends on go.")] = None,
    older_than: Annotated[Optional[str], typer.Option(
        "--older-than", metavar="AGE",
        help="Leftovers only (a killed writer's temp dir or, on an object store, an upload no manifest names): "
             "remove those older than AGE (seconds, or 7d, 12h, ...; object stores: default "
             "$CORPUSFORGE_OBJECT_STORE_STALE_SECONDS, else 3600). Never selects artifacts.")] = None,
    dry_run: Annotated[bool, typer.Option(
        "--dry-run/--yes", " /--apply",
        help="--dry-run (the default) lists what would go and removes nothing; --yes (or --apply) removes it.")
    ] = True,
    wait: Annotated[bool, typer.Option("--wait", help="Wait for running pipelines to finish instead of stopping "
                                                      "(--yes only).")] = False,
    store: StoreOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Remove the artifacts no kept artifact depends on, and what killed writers left (their temp dirs; on an
    object store, uploads no manifest names). Kept: the --keep-latest N newest of each step and name, those newer
    than --keep-newer-than AGE, every artifact a registered MLflow model was made from, and everything a kept
    artifact depends on. Without a policy only leftovers go. A dry run unless --yes."""
    from rich.markup import escape

    import corpusforge as cf
    from corpusforge.storage.gc import GcError, GcFailed, StoreBusy

    failed = None
    try:
        report = cf.artifacts.gc(keep_latest=keep_latest, keep_newer_than=keep_newer_than, dry_run=dry_run,
                                 wait=wait, store=_store(store), older_than=older_than)
    except ValueError as exc:  # a bad age or --keep-latest
        _fail(str(exc), 2)
    except GcFailed as exc:  # stopped part-way: what was removed before is reported, then exit 1
        report, failed = exc.report, str(exc)
    except (GcError, StoreBusy) as exc:
        _fail(str(exc), 1)
    if as_json:
        print_json(report.to_dict())
        if failed:
            raise typer.Exit(1)
        return
    verb = "would remove" if report.dry_run else "removed"
    for e in report.removed:
        out.print(f"{verb} {escape(e.step)} {escape(e.name)} {e.id[:12]} ({_size(e.bytes)}, "
                  f"{(e.created_at or '')[:10]}): {escape(e.why)}", highlight=False)
    for e in report.kept:
        if e.registered:
            out.print(f"kept {escape(e.step)} {escape(e.name)} {e.id[:12]}: {escape(e.why)}", highlight=False)
    for item in report.leftovers:
        out.print(f"{verb} {escape(item.where)} ({_size(item.size)}): {escape(item.why)}", highlight=False)
    for run in report.mlflow_runs:
        err.print(f"note: MLflow run {run['run_id']} ({escape(run['run_name'])}, experiment {run['experiment_id']}) "
                  f"logged artifact {run['artifact_id'][:12]}", highlight=False)
    for note in report.notes:
        err.print(f"note: {escape(note)}", highlight=False)
    if failed:
        _fail(failed, 1)
    if not report.removed and not report.leftovers:
        out.print(f"nothing to remove in {escape(report.store)} ({len(report.kept)} artifacts kept)", highlight=False)
        return
    counts = " and ".join(f"{n} {what}(s)" for n, what in ((len(report.removed), "artifact"),
                                                            (len(report.leftovers), "leftover")) if n)
    if report.dry_run:
        out.print(f"dry run: {counts} would go, {_size(report.bytes_freed)} freed, {len(report.kept)} artifacts "
                  "kept; nothing was removed: run again with --yes (or --apply) to remove them", highlight=False)
    else:
        out.print(f"removed {counts}, freed {_size(report.bytes_freed)}; {len(report.kept)} artifacts kept",
                  highlight=False)
