"""Export a corpus artifact to a Hugging Face ``datasets`` folder (``corpusforge export ID --format hf-datasets``),
declared on the corpus step (tasks/corpus/__init__.py, ``exports``).

The folder is what ``DatasetDict.save_to_disk`` writes, so ``datasets.load_from_disk(OUT)`` opens it. Splits
take the names that library uses (``train``, ``validation``, ``test``; empty splits are left out), and each
record's ``meta`` (stored as a JSON string in our Parquet) becomes a struct column, so ``ds[0]["meta"]["id"]``
works. When the records' meta values do not share one type per key (say ``"n": 1`` and ``"n": "x"``), Arrow
cannot make one struct of them: ``meta`` then stays a JSON string, and the summary and the card say so.

The artifact's files are checked against their recorded digests before anything is read, and the folder
gets a dataset card (``README.md``) naming the artifact, its inputs, its accounting and the licence note.
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from pathlib import Path
from typing import Any

from corpusforge.tasks.stage import ExportError

HF_SPLITS = {"train": "train", "valid": "validation", "test": "test"}


def _meta_column(values: list[str | None]):
    """(pyarrow array, how) for the JSON-string meta values: a struct when Arrow can type it, else strings."""
    import pyarrow as pa

    if all(v is None for v in values):
        return pa.array(values, type=pa.string()), "none"
    try:
        return pa.array([None if v is None else json.loads(v) for v in values]), "struct"
    except (pa.ArrowInvalid, pa.ArrowTypeError, ValueError):
        return pa.array(values, type=pa.string()), "json-string"


def _split_table(path: Path, meta_how: list[str]):
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pq.read_table(path)
    if "meta" in table.column_names:
        column, how = _meta_column(table.column("meta").to_pylist())
        meta_how.append(how)
        table = table.set_column(table.column_names.index("meta"), "meta", column)
    # large_string -> string: what datasets' own loaders produce (and smaller offsets)
    fields = [pa.field(f.name, pa.string()) if pa.types.is_large_string(f.type) else f for f in table.schema]
    return table.cast(pa.schema(fields))


def export_hf_datasets(artifact_dir: Path, manifest: dict[str, Any], out: Path) -> dict[str, Any]:
    """Write ``out`` as a ``datasets`` DatasetDict folder; return what was written (splits, rows, meta type)."""
    if manifest.get("step") != "corpus":
        raise ExportError(f"export --format hf-datasets takes a corpus artifact; {manifest['id'][:12]} is a "
                          f"{manifest.get('step')} artifact")
    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ExportError(f"{out} already exists and is not empty; choose a new folder")
    try:
        import datasets
    except ImportError:
        raise ExportError("export --format hf-datasets needs the datasets library: "
                          "pip install 'corpusforge[hf]'") from None
    meta_how: list[str] = []
    splits = {}
    rows = {}
    for ours, theirs in HF_SPLITS.items():
        path = artifact_dir / f"{ours}.parquet"
        if not path.is_file():
            continue
        table = _split_table(path, meta_how)
        if table.num_rows == 0:
            continue
        splits[theirs] = datasets.Dataset(datasets.table.InMemoryTable(table))
        rows[theirs] = table.num_rows
    if not splits:
        raise ExportError(f"corpus {manifest['id'][:12]} holds no document to export")
    meta = "json-string" if "json-string" in meta_how else ("struct" if "struct" in meta_how else "none")
    if meta == "json-string":  # one type for every split: strings everywhere
        import pyarrow as pa

        for name, ds in splits.items():
            table = ds.data.table
            if pa.types.is_struct(table.schema.field("meta").type):
                values = [None if v is None else json.dumps(v, ensure_ascii=False, sort_keys=True)
                          for v in table.column("meta").to_pylist()]
                table = table.set_column(table.column_names.index("meta"), "meta", pa.array(values, pa.string()))
                splits[name] = datasets.Dataset(datasets.table.InMemoryTable(table))
    # Written next to OUT and renamed into place, so an interrupted export leaves no half folder at OUT.
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.parent / f".{out.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    import sys

    if not sys.stderr.isatty():  # datasets' "Saving the dataset" bars only on a terminal
        datasets.disable_progress_bars()
    try:
        datasets.DatasetDict(splits).save_to_disk(str(tmp))
        summary = {"id": manifest["id"], "format": "hf-datasets", "path": str(out), "splits": rows, "meta": meta}
        from corpusforge.storage.cards import dataset_card

        (tmp / "README.md").write_text(dataset_card(manifest, export=summary), encoding="utf-8")
        if out.exists():
            out.rmdir()  # empty (checked above)
        os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return summary


def load_corpus(artifact_dir: Path, manifest: dict[str, Any]) -> dict[str, Any]:
    """``Artifact.load()`` of a corpus: ``{split: polars.DataFrame}`` for the splits it has."""
    import polars as pl

    return {split: pl.read_parquet(artifact_dir / f"{split}.parquet") for split in ("train", "valid", "test")
            if (artifact_dir / f"{split}.parquet").is_file()}
