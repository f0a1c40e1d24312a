"""What the stages that train on the tokenizer stage's encoded records share (classify, sentence_embeddings):
reading the records (``<split>.parquet`` with a ``<field>_ids`` column per text field, the label columns passed
through, and ``meta.json``), encoding them again with a checkpoint's own tokenizer, taking a model's shape from
the checkpoint it starts from (``init``), and loading a trained model with its tokenizer (``reading``: the hook
through which a stage puts the corpus's cleaning in front of that tokenizer, tasks/corpus/reading.py)."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from corpusforge.storage.store import input_dir, read_manifest

SPLITS = ("train", "valid", "test")


def read_encoded(encoded_dir: Path, fields: Sequence[str], labels: Sequence[str] = (),
                 step: str = "this") -> tuple[dict[str, Any], dict[str, Any]]:
    """meta.json and, per split, a polars frame with ``doc_id``, each text field's ids (in a column named after the
    field) and the labels (None: no rows). A ValueError naming the tokenizer keys to set when the encoding lacks
    them."""
    import polars as pl

    meta_path = Path(encoded_dir) / "meta.json"
    if not meta_path.is_file():
        raise ValueError(f"{encoded_dir}: no meta.json; the {step} step needs the tokenizer stage's encoded records")
    meta = json.loads(meta_path.read_text(encoding="utf-8"))
    columns = meta.get("fields") or {}
    missing = [f for f in fields if f not in columns] + [x for x in labels if x not in (meta.get("labels") or [])]
    if meta.get("format") != "parquet" or missing:
        raise ValueError(f"the encoded corpus has no {', '.join(missing) or 'field'} column: the {step} step needs "
                         f"tokenizer.format: parquet, tokenizer.fields: [{', '.join(fields)}]"
                         + (f" and tokenizer.labels: [{', '.join(labels)}]" if labels else ""))
    frames = {}
    for split in SPLITS:
        path = Path(encoded_dir) / f"{split}.parquet"
        frame = (pl.read_parquet(path, columns=["doc_id", *(columns[f] for f in fields), *labels])
                 if path.is_file() else None)
        frames[split] = frame.rename({columns[f]: f for f in fields}) if frame is not None and frame.height else None
    return meta, frames


def reencode(encoded_dir: Path, frames: Mapping[str, Any], fields: Sequence[str], tokenizer) -> dict[str, Any]:
    """The splits' text fields encoded with another tokenizer (a checkpoint's), from the corpus the encoding read."""
    import polars as pl

    corpus = input_dir(encoded_dir, "corpus")
    out = {}
    for split, frame in frames.items():
        if frame is None:
            out[split] = None
            continue
        texts = pl.read_parquet(corpus / f"{split}.parquet", columns=["doc_id", *fields])
        if texts["doc_id"].to_list() != frame["doc_id"].to_list():
            raise ValueError(f"{split}: the encoded records and the corpus they came from list other records")
        out[split] = frame.with_columns([pl.Series(f, tokenizer.encode_batch(texts[f].fill_null("").to_list()),
                                                   dtype=pl.List(pl.UInt32)) for f in fields])
    return out


def checkpoint(parent: Path) -> tuple[dict[str, Any], str, str | None]:
    """A checkpoint's config.json, its step and its id."""
    spec = json.loads((Path(parent) / "config.json").read_text(encoding="utf-8"))
    manifest = read_manifest(Path(parent)) or {}
    return spec, str(manifest.get("step")), manifest.get("id")


def special_ids(meta: Mapping[str, Any]) -> dict[str, int]:
    """The tokenizer's special-token ids by role from an encode artifact's meta.json, its end-of-text id as the
    ``eot`` role (what a family's ``derived`` fields read: an NPLM's or a classifier's pad may be the eot id)."""
    ids = {role: int(i) for role, i in (meta.get("special_ids") or {}).items() if i is not None}
    if meta.get("eot_id") is not None:
        ids.setdefault("eot", int(meta["eot_id"]))
    return ids


def role_ids(tokenizer: Any) -> dict[str, int]:
    """:func:`special_ids` of a loaded tokenizer (a checkpoint's, when a stage starts from one)."""
    ids = {role: int(i) for role, i in dict(tokenizer.role_ids).items() if i is not None}
    if getattr(tokenizer, "eot_id", None) is not None:
        ids.setdefault("eot", int(tokenizer.eot_id))
    return ids


def shape_from(model_cfg: Any, parent_model: Mapping[str, Any], own: Sequence[str] = ("dropout",)) -> tuple[Any, list[str]]:
    """The model's config with the fields it shares with the checkpoint's taken from it (its shape, vocabulary,
    special ids), except ``own``; and the fields whose value changed."""
    names = {f.name for f in dataclasses.fields(model_cfg)} - set(own)
    taken = {k: v for k, v in parent_model.items() if k in names}
    changed = sorted(k for k, v in taken.items() if getattr(model_cfg, k) != v)
    return dataclasses.replace(model_cfg, **taken), changed


def load_start(model: Any, parent: Path, report: dict[str, Any], warnings: list[str]) -> None:
    """A checkpoint's weights (``parent``, a stage's ``init``) into a new model by name
    (corpusforge.models.zoo.load_weights). The first time (``report`` has no ``loaded`` yet) what loaded, what is
    missing (the new head) and what mismatched go into ``report`` (config.json's ``init``), and each of the last two
    into ``warnings``; a stage that starts several models from one checkpoint (cross-validation) says it once."""
    from safetensors.torch import load_file

    from corpusforge.models.zoo import load_weights

    found = load_weights(model, load_file(str(Path(parent) / "model.safetensors")))
    if "loaded" in report:
        return
    report.update(loaded=len(found["loaded"]), **{k: v for k, v in found.items() if k != "loaded"})
    for what in ("missing", "mismatched"):
        if found[what]:
            warnings.append(f"init {Path(parent).name}: {what} {', '.join(found[what][:8])}"
                            + (f" (+{len(found[what]) - 8} more)" if len(found[what]) > 8 else ""))


def checkpoint_tokenizer(parent: Path, spec: Mapping[str, Any]) -> tuple[Path, str | None] | None:
    """(the tokenizer folder, its id) a checkpoint was trained with, or None when its config.json records none."""
    from corpusforge.storage.store import resolve_recorded

    recorded = (spec.get("tokenizer") or {}).get("path")
    if not recorded:
        return None
    return resolve_recorded(recorded, Path(parent)), (spec.get("tokenizer") or {}).get("id")


def model_tokenizer_dir(model_dir: Path) -> Path:
    """The tokenizer folder a trained model's config.json records (store-relative), checked to exist: a ValueError
    naming what is missing otherwise (the model could not read text without it)."""
    from corpusforge.storage.store import resolve_recorded

    spec = json.loads((Path(model_dir) / "config.json").read_text(encoding="utf-8"))
    recorded = (spec.get("tokenizer") or {}).get("path")
    found = resolve_recorded(recorded, Path(model_dir)) if recorded else None
    if not found or not Path(found).is_dir():
        raise ValueError(f"{model_dir}: its tokenizer ({found or 'none recorded in config.json'}) is missing")
    return Path(found)


def load_with_tokenizer(model_dir: str | Path, tokenizer_dir: str | Path | None = None, device: str = "cpu",
                        reading: Callable[[Any, dict[str, Any]], Any] | None = None) -> tuple[Any, Any, dict[str, Any]]:
    """(the model saved in ``model_dir``, its tokenizer, its config.json): the tokenizer its config.json records
    unless ``tokenizer_dir`` is given (a registered MLflow model carries its own copy). ``reading(tokenizer, spec)``
    gives the tokenizer the model reads new text through (the stages pass tasks/corpus/reading.py's
    ``reading_as_trained``: the corpus's cleaning first). Nothing is unpickled."""
    from corpusforge.models.tokenization import load_tokenizer
    from corpusforge.models.zoo import load_model

    model_dir = Path(model_dir)
    spec = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
    tokenizer = load_tokenizer(tokenizer_dir if tokenizer_dir is not None else model_tokenizer_dir(model_dir))
    return load_model(model_dir, device=device), reading(tokenizer, spec) if reading else tokenizer, spec
