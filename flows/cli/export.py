"""``corpusforge export ID --format F OUT``: an artifact in a format its stage declares (``StepOutputs.exports``);
today a corpus as a Hugging Face ``datasets`` folder (hf-datasets).

Reads the store only (no Prefect, no MLflow): the artifact's files are checked against their digests, then
written with ``datasets`` (``DatasetDict.save_to_disk``), so ``datasets.load_from_disk(OUT)`` and
``datasets.load_dataset(OUT)`` open it (one schema for every split).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from corpusforge.cli.common import JsonOpt, StoreOpt, _fail, _store, out, print_json


def _check_format(value: str) -> str:
    from corpusforge.stages import export_formats

    if value not in export_formats():
        raise typer.BadParameter(f"{value!r} is not a format; the stages declare: {', '.join(export_formats())}")
    return value


def export(
    artifact_id: Annotated[str, typer.Argument(metavar="ID", help="Corpus artifact id or a unique prefix.")],
    output: Annotated[Path, typer.Argument(metavar="OUT", help="New (or empty) folder to write.")],
    fmt: Annotated[str, typer.Option("--format", callback=_check_format,
                                     help="Output format, as the stages declare them: hf-datasets (a corpus as "
                                          "a folder that datasets.load_from_disk and load_dataset open)."
                                     )] = "hf-datasets",
    store: StoreOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Export a corpus artifact: splits train/validation/test, meta as a struct, and a dataset card."""
    from corpusforge.stages import export_formats, step_outputs
    from corpusforge.storage.catalog import Catalog
    from corpusforge.storage.store import ArtifactStore, TamperedArtifact
    from corpusforge.tasks.stage import ExportError, load

    artifact_store = ArtifactStore(_store(store))
    try:
        found = Catalog(artifact_store).get(artifact_id)
    except LookupError as exc:  # an unknown or ambiguous id is bad usage
        _fail(str(exc.args[0]), 2)
    step = found.manifest.get("step")
    exporter = (step_outputs(step).exports.get(fmt) if step_outputs(step) else None)
    if exporter is None:
        _fail(f"export --format {fmt} takes a {' or '.join(export_formats()[fmt])} artifact; "
              f"{found.manifest['id'][:12]} is a {step}", 2)
    try:
        artifact_store.check_intact(found.path, found.manifest)
        summary = load(exporter)(found.path, found.manifest, output)
    except TamperedArtifact as exc:
        _fail(str(exc), 1)
    except ExportError as exc:
        _fail(str(exc), 2)
    if as_json:
        print_json(summary, ensure_ascii=False)
        return
    splits = ", ".join(f"{name} {rows}" for name, rows in summary["splits"].items())
    out.print(f"exported {found.manifest['name']} ({summary['id'][:12]}) to {summary['path']}: {splits}; "
              f"meta as {summary['meta']}")
    out.print(f"open it with: datasets.load_from_disk({str(output)!r})", soft_wrap=True)
