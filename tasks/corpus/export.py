"""Export a corpus artifact to a Hugging Face ``datasets`` folder (``corpusforge export ID --format hf-datasets``),
declared on the corpus step (tasks/corpus/__init__.py, ``exports``).

The folder is what ``DatasetDict.save_to_disk`` writes, so ``datasets.load_from_disk(OUT)`` opens it, and
``datasets.load_dataset(OUT)`` too (the card's ``configs`` name each split's Arrow files). Splits take the names
that library uses (``train``, ``validation``, ``test``; empty splits are left out), and each record's ``meta``
(stored as a JSON string in our Parquet) becomes a struct column, so ``ds[0]["meta"]["id"]`` works. Every split
has the same schema (``load_dataset`` and ``concatenate_datasets`` need it): the struct's type is inferred from
the records of all splits at once, so it has every key any record has (None where a record lacks it), also in a
split whose records carry no meta at all. When the records' meta values do not share one type per key (say
``"n": 1`` and ``"n": "x"``), or a struct would have no field (which Parquet cannot store), ``meta`` is a JSON
string in every split, and the summary and the card say so.

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


def _storable(kind) -> bool:
    """Whether Parquet (and so ``Dataset.to_parquet``) can hold the Arrow type: no struct without fields."""
    import pyarrow as pa

    if pa.types.is_struct(kind):
        return kind.num_fields > 0 and all(_storable(kind.field(i).type) for i in range(kind.num_fields))
    if pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind):
        return _storable(kind.value_type)
    return True


def _meta_type(values: list[Any]):
    """(one Arrow type for the parsed meta values of every split, how): a struct with every key any record has
    when Arrow can type them together ("struct"), else strings ("json-string"); strings when there is no meta
    ("none")."""
    import pyarrow as pa

    if all(v is None for v in values):
        return pa.string(), "none"
    try:
        kind = pa.array(values).type
    except (pa.ArrowInvalid, pa.ArrowTypeError, ValueError):
        return pa.string(), "json-string"
    return (kind, "struct") if pa.types.is_struct(kind) and _storable(kind) else (pa.string(), "json-string")


def _read_split(path: Path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pq.read_table(path)
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
    tables = {}
    for ours, theirs in HF_SPLITS.items():
        path = artifact_dir / f"{ours}.parquet"
        if path.is_file() and (table := _read_split(path)).num_rows:
            tables[theirs] = table
    if not tables:
        raise ExportError(f"corpus {manifest['id'][:12]} holds no document to export")
    # One schema for every split: meta's type comes from the records of all splits together.
    import pyarrow as pa

    texts = {name: t.column("meta").to_pylist() for name, t in tables.items() if "meta" in t.column_names}
    parsed = {name: [None if v is None else json.loads(v) for v in values] for name, values in texts.items()}
    kind, meta = _meta_type([v for values in parsed.values() for v in values])
    for name, values in (texts if pa.types.is_string(kind) else parsed).items():
        table = tables[name]
        tables[name] = table.set_column(table.column_names.index("meta"), "meta", pa.array(values, type=kind))
    splits = {}
    schema = next(iter(tables.values())).schema
    for name, table in tables.items():
        if not table.schema.equals(schema):
            raise ExportError(f"corpus {manifest['id'][:12]}: split {name} has columns {table.schema.names}, "
                              f"not {schema.names} as the others")
        splits[name] = datasets.Dataset(datasets.table.InMemoryTable(table))
    rows = {name: table.num_rows for name, table in tables.items()}
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
