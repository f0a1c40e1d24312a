"""Cards: a ``README.md`` in every artifact folder saying what it is, from which inputs, with which settings,
its headline metrics and the licence note, in the layout of Hugging Face dataset and model cards (YAML front
matter, then Markdown). The store writes one into each artifact when it publishes it (so the card is listed
and digested in the manifest like any file); ``corpusforge export`` writes one into an exported dataset.

A card is made from the manifest's identity fields and the step's own fields only (never timings, dates or
host details), so the same inputs and config give the same card bytes.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

CARD = "README.md"
DATASET_STEPS = {"corpus", "corpus_shard", "encode"}
PACKED_SHARD = ("Several small source files packed into one shard (`corpus.shard_mb`), read, cleaned and validated "
                "(Parquet), before the corpus merge.")
WHAT = {
    "corpus": "A cleaned, deduplicated, split text corpus (Parquet: train/valid/test, with every dropped or "
              "quarantined record accounted for).",
    "corpus_shard": "One source file read, cleaned and validated (Parquet), before the corpus merge.",
    "encode": "A corpus encoded with a tokenizer (token ids per split).",
    "tokenizer": "A trained tokenizer (Hugging Face `tokenizers` JSON).",
    "embeddings": "Word embeddings (vectors in the formats gensim and the word2vec tools read).",
    "glove": "GloVe word embeddings.",
    "ngram": "A smoothed n-gram language model (ARPA, readable by KenLM).",
    "lm": "A neural language model (safetensors weights, its config and tokenizer).",
}
SKIP_METRICS = {"seconds", "timings"}
# Measurements of the run, not of the artifact (they differ between two builds of the same bytes): left out
# so the card stays byte-identical; they stay in the manifest and in MLflow.
TIMING = re.compile(r"seconds|_per_s(ec)?$|per_second|throughput|elapsed|speed|(^|_)time($|_)|rss|memory")


def _yaml_scalar(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)  # JSON strings and numbers are valid YAML scalars


def _inputs(manifest: Mapping[str, Any]) -> list[str]:
    lines = []
    for inp in manifest.get("inputs") or []:
        if inp.get("kind") == "source" or "path" in inp:
            where = inp.get("name") or inp.get("path") or "?"  # the name: no machine-specific path
            lines.append(f"- source file `{where}` (sha256 `{str(inp.get('id', ''))[:16]}...`)")
        else:
            lines.append(f"- {inp.get('step', 'artifact')} `{inp.get('name', '?')}` "
                         f"(id `{str(inp.get('id', ''))[:12]}`)")
    return lines or ["- none"]


def _scalars(metrics: Any, prefix: str = "") -> list[tuple[str, Any]]:
    """Flattened scalar metrics (nested dicts as dotted keys; lists and tables are left to the report)."""
    out: list[tuple[str, Any]] = []
    if not isinstance(metrics, Mapping):
        return out
    for key, value in metrics.items():
        if key in SKIP_METRICS or TIMING.search(key):
            continue
        name = f"{prefix}{key}"
        if isinstance(value, bool) or value is None:
            continue
        if isinstance(value, (int, float)):
            out.append((name, round(value, 6) if isinstance(value, float) else value))
        elif isinstance(value, Mapping) and len(out) < 60:
            out += _scalars(value, name + ".")
    return out[:60]


def _licence(manifest: Mapping[str, Any]) -> str:
    declared = (manifest.get("config") or {}).get("license")
    if declared:
        return f"Declared in the config: `{declared}`."
    return ("Not declared. The licences of the source files listed under Inputs (or of the corpus this artifact "
            "was built from) apply; corpusforge adds no terms of its own.")


def card(manifest: Mapping[str, Any], export: Mapping[str, Any] | None = None) -> str:
    """The card text for a manifest (complete or the store's provisional one at publish)."""
    step = str(manifest.get("step", "artifact"))
    kind = "dataset" if step in DATASET_STEPS or export else "model"
    tags = ["corpusforge", step]
    front = ["---", f"license: {_yaml_scalar((manifest.get('config') or {}).get('license') or 'other')}",
             "tags:", *[f"- {t}" for t in tags]]
    if export:
        front += ["configs:", "- config_name: default", "  data_files:"]
        front += [f"  - split: {s}\n    path: {s}/*.arrow" for s in export.get("splits", {})]
    front.append("---")
    lines = front + [
        "",
        f"# {step} `{manifest.get('name', '?')}` ({kind} card)",
        "",
        PACKED_SHARD if step == "corpus_shard" and "sources" in (manifest.get("config") or {}) else
        WHAT.get(step, f"An artifact of the `{step}` step."),
        "",
        f"- artifact id: `{manifest.get('id', '?')}` (content-derived: step, version, config and input ids)",
        f"- step version: {manifest.get('version', '?')}",
        "- check it: `corpusforge artifacts verify " + str(manifest.get("id", "ID"))[:12] + "`",
    ]
    if export:
        lines += ["", "## This export", "",
                  "Written by `corpusforge export --format hf-datasets`; open it with "
                  "`datasets.load_from_disk(PATH)` or `datasets.load_dataset(PATH)` (every split has the same "
                  "columns and types).", ""]
        lines += [f"- split `{s}`: {n} records" for s, n in export.get("splits", {}).items()]
        lines.append("- `meta`: " + {"struct": "a struct column (one field per key any source record has; None where a "
                                                "record lacks it)",
                                      "json-string": "a JSON string (the records' meta values do not share one "
                                                     "type per key, so Arrow cannot make one struct of them)",
                                      "none": "empty (the sources carried no extra fields)"}[export["meta"]])
    lines += ["", "## Inputs", "", *_inputs(manifest)]
    accounting = manifest.get("accounting")
    if isinstance(accounting, Mapping) and accounting:
        lines += ["", "## Accounting", "", "| what | records |", "|---|---|"]
        for key, value in accounting.items():
            if key == "per_source" or (isinstance(value, Mapping) and any(isinstance(v, Mapping)
                                                                         for v in value.values())):
                continue  # per-source detail: `corpusforge artifacts show ID`
            if isinstance(value, Mapping):
                value = ", ".join(f"{k}: {v}" for k, v in value.items()) or "none"
            lines.append(f"| {key} | {value} |")
    scalars = _scalars(manifest.get("metrics"))
    if scalars:
        lines += ["", "## Metrics", "", "| metric | value |", "|---|---|"]
        lines += [f"| {k} | {v} |" for k, v in scalars]
    lines += ["", "## Configuration", "", "```json",
              json.dumps(manifest.get("config") or {}, indent=2, sort_keys=True, ensure_ascii=False), "```",
              "", "## Licence", "", _licence(manifest), ""]
    return "\n".join(lines)


def dataset_card(manifest: Mapping[str, Any], export: Mapping[str, Any] | None = None) -> str:
    return card(manifest, export=export)
